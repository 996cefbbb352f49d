#include "store/sqlite_pruner.hpp"

#include <algorithm>

#include "store/store_rows.hpp"

namespace fleetlink::broker {

Expected<void> SqlitePruner::prepare() {
  const std::pair<sqlite::Stmt*, const char*> statements[] = {
      {&select_aged_, "SELECT cmd_id FROM commands WHERE cmd_id < ?1 AND state >= 4 ORDER BY cmd_id LIMIT ?2"},
      {&select_oldest_, "SELECT cmd_id FROM commands WHERE state >= 4 ORDER BY cmd_id LIMIT ?2"},
      {&select_jobs_, "SELECT job_id FROM jobs WHERE finished = 1 AND created_at < ?1 LIMIT ?2"},
      {&del_result_, "DELETE FROM results WHERE cmd_id = ?1"},
      {&del_command_, "DELETE FROM commands WHERE cmd_id = ?1 AND state >= 4"},
      {&del_job_, "DELETE FROM jobs WHERE job_id = ?1"},
      {&count_, "SELECT count(*) FROM commands"},
  };
  for (const auto& [into, sql] : statements) {
    auto st = sqlite::prepare(db_, sql);
    if (!st) return st.error();
    *into = std::move(*st);
  }
  return {};
}

void SqlitePruner::start(const RetentionPolicy& policy, std::uint64_t now_ms) {
  policy_ = policy;
  now_ms_ = now_ms;
  total_ = 0;
  phase_deleted_ = 0;
  want_ = max_per_call_;
  phase_ = Phase::aged_commands;
  bound_.clear();
}

void SqlitePruner::rollback() noexcept {
  if (!sqlite3_get_autocommit(db_)) (void)sqlite::exec(db_, "ROLLBACK");
}

// `select` has its ?1 bound (if it has one); the ids it answers are deleted by
// each of `deletes` in turn. `gone`: the rows the last delete removed.
Expected<bool> SqlitePruner::delete_chunk(sqlite::Stmt& select, sqlite::Stmt* const* deletes,
                                          std::size_t n_deletes, std::size_t chunk, std::size_t& gone) {
  gone = 0;
  if (auto r = sqlite::exec(db_, "BEGIN IMMEDIATE"); !r) return make_error(Errc::io, "BEGIN: " + r.error().detail);
  ids_.clear();
  int rc = 0;
  {
    sqlite::StmtReset done(select);
    select.bind_u64(2, chunk);
    while ((rc = select.step()) == SQLITE_ROW) ids_.emplace_back(select.text(0));
  }
  if (rc != SQLITE_DONE) {
    Error e = sqlite::error_of(db_, rc, "selecting what to delete");
    rollback();
    return e;
  }
  for (const std::string& id : ids_) {
    for (std::size_t i = 0; i < n_deletes; ++i) {
      sqlite::StmtReset done(*deletes[i]);
      deletes[i]->bind_text(1, id);
      rc = deletes[i]->step();
      if (rc != SQLITE_DONE) {
        Error e = sqlite::error_of(db_, rc, "deleting " + id);
        rollback();
        return e;
      }
    }
    gone += static_cast<std::size_t>(sqlite3_changes(db_));
  }
  if (auto r = sqlite::exec(db_, "COMMIT"); !r) {
    rollback();
    return make_error(Errc::io, "COMMIT: " + r.error().detail);
  }
  return ids_.size() == chunk;  // a full chunk: there may be more
}

Expected<bool> SqlitePruner::step() {
  const bool aged = policy_.max_age_ms > 0 && now_ms_ > policy_.max_age_ms;
  for (;;) {
    switch (phase_) {
      case Phase::done:
        return false;
      case Phase::aged_commands: {
        if (!aged || want_ == 0) {
          phase_ = Phase::count;
          continue;
        }
        if (bound_.empty()) bound_ = store_rows::key_of_ms(now_ms_ - policy_.max_age_ms);
        const std::size_t chunk = std::min(chunk_, want_ - phase_deleted_);
        select_aged_.bind_text(1, bound_);
        sqlite::Stmt* const deletes[] = {&del_result_, &del_command_};
        std::size_t gone = 0;
        auto more = delete_chunk(select_aged_, deletes, 2, chunk, gone);
        if (!more) {
          phase_ = Phase::done;
          return more.error();
        }
        phase_deleted_ += gone;
        total_ += gone;
        if (!*more || phase_deleted_ >= want_) {
          phase_ = Phase::count;
          phase_deleted_ = 0;
        }
        return true;
      }
      case Phase::count: {
        phase_ = Phase::aged_jobs;
        if (total_ >= max_per_call_) continue;
        // A walk of the table's pages (about 45 ms for a million commands):
        // prune runs from a timer, not per command.
        std::int64_t count = 0;
        {
          sqlite::StmtReset done(count_);
          const int rc = count_.step();
          if (rc != SQLITE_ROW) {
            phase_ = Phase::done;
            return sqlite::error_of(db_, rc, "counting commands");
          }
          count = count_.i64(0);
        }
        if (static_cast<std::uint64_t>(count) > policy_.max_commands) {
          const std::uint64_t excess = static_cast<std::uint64_t>(count) - policy_.max_commands;
          want_ = static_cast<std::size_t>(std::min<std::uint64_t>(excess, max_per_call_ - total_));
          phase_deleted_ = 0;
          phase_ = Phase::excess_commands;
        }
        continue;
      }
      case Phase::excess_commands: {
        const std::size_t chunk = std::min(chunk_, want_ - phase_deleted_);
        sqlite::Stmt* const deletes[] = {&del_result_, &del_command_};
        std::size_t gone = 0;
        auto more = delete_chunk(select_oldest_, deletes, 2, chunk, gone);
        if (!more) {
          phase_ = Phase::done;
          return more.error();
        }
        phase_deleted_ += gone;
        total_ += gone;
        if (!*more || phase_deleted_ >= want_) phase_ = Phase::aged_jobs;
        return true;
      }
      case Phase::aged_jobs: {
        if (!aged || total_ >= max_per_call_) {
          phase_ = Phase::done;
          continue;
        }
        const std::size_t chunk = std::min(chunk_, max_per_call_ - total_);
        select_jobs_.bind_u64(1, now_ms_ - policy_.max_age_ms);
        sqlite::Stmt* const deletes[] = {&del_job_};
        std::size_t gone = 0;
        auto more = delete_chunk(select_jobs_, deletes, 1, chunk, gone);
        if (!more) {
          phase_ = Phase::done;
          return more.error();
        }
        total_ += gone;
        if (!*more) phase_ = Phase::done;
        return true;
      }
    }
  }
}

}  // namespace fleetlink::broker
