#include "store/sqlite_row_writer.hpp"

#include <algorithm>
#include <string>

#include "common/log.hpp"
#include "store/record_codec.hpp"

namespace fleetlink::broker {

using store_codec::is_final_code;
using store_codec::kFirstFinalCode;
using store_rows::CommandRow;
using store_rows::RigRow;

namespace {

constexpr int kCommandParams = 12;

// The rank guard: a stored open command takes a write of the same or a later
// state; a stored final one takes nothing (store_rows::combine does the same).
// Rows going to an open state and rows ending are written by two statements:
// only the second assigns is_open, so only it touches commands_open (see
// sqlite_schema.cpp).
constexpr const char* kUpsertSet =
    " ON CONFLICT (cmd_id) DO UPDATE SET"
    " state = excluded.state,"
    " attempts = max(attempts, excluded.attempts),"
    " sent_at = coalesce(max(sent_at, excluded.sent_at), sent_at, excluded.sent_at),"
    " acked_at = coalesce(acked_at, excluded.acked_at),"
    " running_at = coalesce(running_at, excluded.running_at),"
    " finished_at = coalesce(excluded.finished_at, finished_at),"
    " body = excluded.body";
constexpr const char* kUpsertEnding = ", is_open = 0";
constexpr const char* kUpsertGuard = " WHERE commands.state < 4 AND excluded.state >= commands.state";
static_assert(kFirstFinalCode == 4, "kUpsertGuard and the schema spell the first final code");

// Written once, and only if the command ended in the state the result came
// with: a broker whose RESULT lost the race to the other's timed_out does not
// hang its output on a command that says it had none.
constexpr const char* kInsertResultHead =
    "INSERT OR FAIL INTO results (cmd_id, body) SELECT v.column1, v.column2 FROM (VALUES ";
constexpr const char* kInsertResultTail =
    ") AS v JOIN commands c ON c.cmd_id = v.column1 AND c.state = v.column3"
    " WHERE true ON CONFLICT (cmd_id) DO NOTHING";

constexpr const char* kUpsertRig =
    "INSERT INTO rigs (rig_id, first_seen, last_seen, body) VALUES (?1, ?2, ?3, ?4)"
    " ON CONFLICT (rig_id) DO UPDATE SET"
    " first_seen = CASE WHEN first_seen = 0 THEN excluded.first_seen"
    "                   WHEN excluded.first_seen = 0 THEN first_seen"
    "                   ELSE min(first_seen, excluded.first_seen) END,"
    " body = CASE WHEN excluded.last_seen >= last_seen THEN excluded.body ELSE body END,"
    " last_seen = max(last_seen, excluded.last_seen)";

constexpr const char* kUpsertJob =
    "INSERT INTO jobs (job_id, created_at, finished, body) VALUES (?1, ?2, ?3, ?4)"
    " ON CONFLICT (job_id) DO UPDATE SET finished = excluded.finished, body = excluded.body"
    " WHERE jobs.finished = 0";

void bind_command(sqlite::Stmt& st, int first, const CommandRow& row, bool drop_key) noexcept {
  st.bind_text(first + 0, row.cmd_id);
  st.bind_text(first + 1, row.rig_id);
  st.bind_int(first + 2, row.state);
  st.bind_text(first + 3, row.job_id);
  st.bind_text(first + 4, drop_key ? std::string_view() : std::string_view(row.idempotency_key));
  st.bind_u64(first + 5, row.enqueued_at);
  st.bind_int(first + 6, row.attempts);
  st.bind_opt(first + 7, row.sent_at);
  st.bind_opt(first + 8, row.acked_at);
  st.bind_opt(first + 9, row.running_at);
  st.bind_opt(first + 10, row.finished_at);
  st.bind_blob(first + 11, row.body);
}

}  // namespace

Expected<void> SqliteRowWriter::prepare() {
  auto rig = sqlite::prepare(db_, kUpsertRig);
  if (!rig) return rig.error();
  auto job = sqlite::prepare(db_, kUpsertJob);
  if (!job) return job.error();
  upsert_rig_ = std::move(*rig);
  upsert_job_ = std::move(*job);
  return {};
}

Expected<void> SqliteRowWriter::write(const store_rows::PendingWrites& w) {
  const CommandRow* rows = w.commands();
  const std::size_t n = w.command_count();
  opening_.clear();
  ending_.clear();
  results_.clear();
  for (std::size_t i = 0; i < n; ++i) {
    (is_final_code(rows[i].state) ? ending_ : opening_).push_back(&rows[i]);
    if (rows[i].has_result) results_.push_back(&rows[i]);
  }
  for (const auto* group : {&opening_, &ending_}) {
    const bool ending = group == &ending_;
    for (std::size_t i = 0; i < group->size(); i += kRowsPerStatement) {
      if (auto r = write_commands(group->data() + i, std::min(kRowsPerStatement, group->size() - i), ending); !r)
        return r;
    }
  }
  for (std::size_t i = 0; i < results_.size(); i += kRowsPerStatement) {
    if (auto r = write_results(results_.data() + i, std::min(kRowsPerStatement, results_.size() - i)); !r) return r;
  }
  for (const RigRow& rig : w.rigs()) {
    if (auto r = write_rig(rig); !r) return r;
  }
  for (const JobRecord& job : w.jobs()) {
    if (auto r = write_job(job); !r) return r;
  }
  return {};
}

sqlite::Stmt* SqliteRowWriter::upsert_statement(std::size_t rows, bool ending) {
  sqlite::Stmt& st = (ending ? upsert_ending_ : upsert_opening_)[rows];
  if (st) return &st;
  // OR FAIL: a clash stops the statement where it is, keeping the rows before
  // it, instead of undoing them; so SQLite keeps no statement journal (a copy
  // of every page the statement touches, which spilled to temporary files when
  // a commit's rows were spread over many pages).
  std::string sql =
      "INSERT OR FAIL INTO commands (cmd_id, rig_id, state, job_id, idempotency_key, enqueued_at, attempts,"
      " sent_at, acked_at, running_at, finished_at, body, is_open) VALUES ";
  const char* row = ending ? "(?,?,?,?,?,?,?,?,?,?,?,?,0)" : "(?,?,?,?,?,?,?,?,?,?,?,?,1)";
  for (std::size_t i = 0; i < rows; ++i) {
    if (i) sql += ',';
    sql += row;
  }
  sql += kUpsertSet;
  if (ending) sql += kUpsertEnding;
  sql += kUpsertGuard;
  return prepare_into(st, sql);
}

sqlite::Stmt* SqliteRowWriter::results_statement(std::size_t rows) {
  sqlite::Stmt& st = insert_results_[rows];
  if (st) return &st;
  std::string sql = kInsertResultHead;
  for (std::size_t i = 0; i < rows; ++i) sql += i ? ",(?,?,?)" : "(?,?,?)";
  sql += kInsertResultTail;
  return prepare_into(st, sql);
}

sqlite::Stmt* SqliteRowWriter::prepare_into(sqlite::Stmt& st, const std::string& sql) {
  auto made = sqlite::prepare(db_, sql);
  if (!made) {
    FL_WARN("store: %s", made.error().detail.c_str());
    return nullptr;
  }
  st = std::move(*made);
  return &st;
}

Expected<void> SqliteRowWriter::write_commands(const CommandRow* const* rows, std::size_t n, bool ending) {
  sqlite::Stmt* st = upsert_statement(n, ending);
  if (!st) return make_error(Errc::io, "cannot prepare the command upsert");
  int rc = 0;
  {
    sqlite::StmtReset done(*st);
    for (std::size_t i = 0; i < n; ++i) bind_command(*st, static_cast<int>(i) * kCommandParams + 1, *rows[i], false);
    rc = st->step();
  }
  if (rc == SQLITE_DONE) return {};
  if (rc != SQLITE_CONSTRAINT_UNIQUE) return sqlite::error_of(db_, rc, "writing commands");
  // An idempotency key already names another command (two brokers took the same
  // POST at once). Row by row (the rows the statement wrote before the clash are
  // written again, which changes nothing), the one that clashes is kept without
  // its key: its record matters more than its name, and the key goes on naming
  // the command that had it first.
  for (std::size_t i = 0; i < n; ++i) {
    if (auto r = write_command_alone(*rows[i], ending); !r) return r;
  }
  return {};
}

Expected<void> SqliteRowWriter::write_command_alone(const CommandRow& row, bool ending) {
  sqlite::Stmt* st = upsert_statement(1, ending);
  if (!st) return make_error(Errc::io, "cannot prepare the command upsert");
  for (bool drop_key : {false, true}) {
    int rc = 0;
    {
      sqlite::StmtReset done(*st);
      bind_command(*st, 1, row, drop_key);
      rc = st->step();
    }
    if (rc == SQLITE_DONE) {
      if (drop_key) {
        key_conflicts_.fetch_add(1, std::memory_order_relaxed);
        FL_WARN("store: idempotency key '%s' already names another command; command %s is stored without it",
                row.idempotency_key.c_str(), row.cmd_id.c_str());
      }
      return {};
    }
    if (rc != SQLITE_CONSTRAINT_UNIQUE || row.idempotency_key.empty())
      return sqlite::error_of(db_, rc, "writing command " + row.cmd_id);
  }
  return make_error(Errc::io, "writing command " + row.cmd_id + ": its key clashes");
}

Expected<void> SqliteRowWriter::write_results(const CommandRow* const* rows, std::size_t n) {
  sqlite::Stmt* st = results_statement(n);
  if (!st) return make_error(Errc::io, "cannot prepare the result insert");
  sqlite::StmtReset done(*st);
  for (std::size_t i = 0; i < n; ++i) {
    const int p = static_cast<int>(i) * 3 + 1;
    st->bind_text(p, rows[i]->cmd_id);
    st->bind_blob(p + 1, rows[i]->result_body);
    st->bind_int(p + 2, rows[i]->state);
  }
  const int rc = st->step();
  if (rc != SQLITE_DONE) return sqlite::error_of(db_, rc, "writing results");
  return {};
}

Expected<void> SqliteRowWriter::write_rig(const RigRow& row) {
  sqlite::StmtReset done(upsert_rig_);
  upsert_rig_.bind_text(1, row.rig.rig_id);
  upsert_rig_.bind_u64(2, row.rig.first_seen_ms);
  upsert_rig_.bind_u64(3, row.rig.last_seen_ms);
  upsert_rig_.bind_blob(4, row.body);
  const int rc = upsert_rig_.step();
  if (rc != SQLITE_DONE) return sqlite::error_of(db_, rc, "writing rig " + row.rig.rig_id);
  return {};
}

Expected<void> SqliteRowWriter::write_job(const JobRecord& job) {
  sqlite::StmtReset done(upsert_job_);
  upsert_job_.bind_text(1, job.job_id);
  upsert_job_.bind_u64(2, job.created_at_ms);
  upsert_job_.bind_int(3, job.finished ? 1 : 0);
  upsert_job_.bind_text(4, job.body);
  const int rc = upsert_job_.step();
  if (rc != SQLITE_DONE) return sqlite::error_of(db_, rc, "writing job " + job.job_id);
  return {};
}

}  // namespace fleetlink::broker
