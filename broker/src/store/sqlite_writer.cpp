#include "store/sqlite_writer.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "common/log.hpp"

namespace fleetlink::broker {
namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t thread_cpu_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

bool busy_code(int rc) noexcept { return (rc & 0xFF) == SQLITE_BUSY || (rc & 0xFF) == SQLITE_LOCKED; }

}  // namespace

Expected<std::unique_ptr<SqliteWriter>> SqliteWriter::start(const std::string& db_path, const WriterOptions& options) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(db_path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  sqlite::Db db(raw);
  if (rc != SQLITE_OK) return sqlite::error_of(raw, rc, "opening " + db_path + " for writing");
  sqlite3_extended_result_codes(db.get(), 1);
  try {
    std::unique_ptr<SqliteWriter> w(new SqliteWriter(std::move(db), db_path, options));
    if (auto r = w->prepare(); !r) return r.error();
    w->thread_ = std::thread([p = w.get()] { p->run(); });
    return w;
  } catch (const std::system_error& e) {
    return make_error(Errc::io, std::string("cannot start the store's writer thread: ") + e.what());
  } catch (const std::exception& e) {
    return make_error(Errc::io, "cannot open " + db_path + " for writing: " + e.what());
  }
}

SqliteWriter::SqliteWriter(sqlite::Db db, std::string path, const WriterOptions& options)
    : path_(std::move(path)),
      options_(options),
      busy_(options.busy_timeout, &give_up_),
      db_(std::move(db)),
      rows_(db_.get()),
      pruner_(db_.get(), options.prune_chunk, options.prune_max_per_call) {
  busy_.install(db_.get());
}

SqliteWriter::~SqliteWriter() {
  if (thread_.joinable()) stop(std::chrono::milliseconds(0));
  if (db_ && !sqlite3_get_autocommit(db_.get())) (void)sqlite::exec(db_.get(), "ROLLBACK");
}

Expected<void> SqliteWriter::prepare() {
  // synchronous is the connection's own: the writer's is the one that matters.
  const std::string settings =
      "PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0; PRAGMA temp_store = MEMORY;"
      " PRAGMA journal_size_limit = " +
      std::to_string(options_.wal_truncate_bytes) + "; PRAGMA cache_size = -" + std::to_string(options_.cache_kib) +
      "; PRAGMA mmap_size = " + std::to_string(options_.mmap_bytes);
  if (auto r = sqlite::exec(db_.get(), settings.c_str()); !r)
    return make_error(Errc::io, "cannot configure " + path_ + " for writing: " + r.error().detail);
  const std::pair<sqlite::Stmt*, const char*> statements[] = {
      {&begin_, "BEGIN IMMEDIATE"},
      {&commit_, "COMMIT"},
      {&rollback_, "ROLLBACK"},
      {&data_version_stmt_, "PRAGMA data_version"},
  };
  for (const auto& [into, sql] : statements) {
    auto st = sqlite::prepare(db_.get(), sql);
    if (!st) return make_error(Errc::io, "cannot use " + path_ + ": " + st.error().detail);
    *into = std::move(*st);
  }
  if (auto r = rows_.prepare(); !r) return make_error(Errc::io, "cannot use " + path_ + ": " + r.error().detail);
  if (auto r = pruner_.prepare(); !r) return make_error(Errc::io, "cannot use " + path_ + ": " + r.error().detail);
  std::lock_guard c(conn_mu_);
  sample_locked();
  return {};
}

// ---- the loop's side ----

std::uint64_t SqliteWriter::enqueue(std::shared_ptr<const WriteBatch> batch) {
  std::uint64_t ticket = 0;
  {
    std::lock_guard l(mu_);
    queue_.push_back(std::move(batch));
    ticket = attempts_begun_;
  }
  work_cv_.notify_one();
  return ticket;
}

bool SqliteWriter::commit_here(const std::shared_ptr<const WriteBatch>& batch) {
  if (batch->lost_writes) return false;  // its Error is reported by the thread
  {
    std::lock_guard l(mu_);
    // Anything ahead of it must be durable first, and a failing streak keeps its order and backoff.
    if (!queue_.empty() || group_held_ || stop_ || !last_attempt_ok_) return false;
  }
  // Only the loop enqueues, so nothing can get ahead of it from here on.
  std::unique_lock c(conn_mu_, std::try_to_lock);
  if (!c.owns_lock()) return false;  // a prune, or a checkpoint's sample, has the connection
  const auto began = Clock::now();
  bool ok = false;
  busy_.set_no_wait(true);
  try {
    int rc = begin_.step();
    begin_.reset();
    if (rc == SQLITE_DONE) {
      ok = rows_.write(batch->writes).has_value();
      if (ok) {
        rc = commit_.step();
        commit_.reset();
        ok = rc == SQLITE_DONE;
      }
      if (!ok) rollback();
    }
  } catch (const std::exception&) {
    rollback();
    ok = false;
  }
  busy_.set_no_wait(false);
  const auto took = Clock::now() - began;
  // No sample of data_version here: it moves only for other connections'
  // commits, which the thread's next transaction or sample_data_version()
  // sees; sampling costs two more lock calls on the loop.
  c.unlock();
  if (!ok) return false;  // the thread tries it, with its waits and its retries
  count_commit(took);
  rows_written_.fetch_add(batch->writes.command_count(), std::memory_order_relaxed);
  batches_.fetch_add(1, std::memory_order_relaxed);
  commits_here_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard l(mu_);
  try {
    outcomes_.push_back(BatchOutcome{batch->number, {}});
  } catch (const std::bad_alloc&) {
    // Durable all the same: the caller reads durable_through(), and an
    // outcome is only ever needed for a failure.
  }
  rows_durable_.fetch_add(batch->rows, std::memory_order_release);
  durable_through_.store(batch->number, std::memory_order_release);
  return true;
}

std::uint64_t SqliteWriter::ticket() const {
  std::lock_guard l(mu_);
  return attempts_begun_;
}

Expected<void> SqliteWriter::wait(std::uint64_t through, std::uint64_t ticket) {
  std::unique_lock l(mu_);
  if (durable_through() >= through) return {};
  kick_ = true;
  work_cv_.notify_one();
  done_cv_.wait(l, [&] {
    return durable_through() >= through || (attempts_ended_ > ticket && !last_attempt_ok_) || stopped_;
  });
  if (durable_through() >= through) return {};
  if (attempts_ended_ > ticket && !last_attempt_ok_) return last_error_;
  return make_error(Errc::io, "the command store " + path_ + " was closed before the writes were durable");
}

std::vector<BatchOutcome> SqliteWriter::take_outcomes() {
  std::vector<BatchOutcome> out;
  std::lock_guard l(mu_);
  out.swap(outcomes_);
  return out;
}

void SqliteWriter::set_wakeup(std::function<void()> wake) {
  std::lock_guard l(wake_mu_);
  wake_ = std::move(wake);
}

std::optional<std::uint64_t> SqliteWriter::sample_data_version() {
  std::unique_lock c(conn_mu_, std::try_to_lock);
  if (!c.owns_lock()) return std::nullopt;
  sample_locked();
  return data_version();
}

std::uint64_t SqliteWriter::request_prune(const RetentionPolicy& policy, std::uint64_t now_ms) {
  std::uint64_t ticket = 0;
  {
    std::lock_guard l(mu_);
    prune_request_.emplace(policy, now_ms);
    ticket = ++prune_requested_;
  }
  work_cv_.notify_one();
  return ticket;
}

void SqliteWriter::wait_prune(std::uint64_t ticket) {
  std::unique_lock l(mu_);
  done_cv_.wait(l, [&] { return prune_done_ >= ticket || stopped_; });
}

WriterStats SqliteWriter::stats() const noexcept {
  WriterStats s;
  s.commits = commits_.load(std::memory_order_relaxed);
  s.batches = batches_.load(std::memory_order_relaxed);
  s.commit_failures = commit_failures_.load(std::memory_order_relaxed);
  s.rows_written = rows_written_.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < kCommitBucketCount; ++i) s.commit_buckets[i] = buckets_[i].load(std::memory_order_relaxed);
  s.commit_seconds = static_cast<double>(commit_ns_.load(std::memory_order_relaxed)) / 1e9;
  s.key_conflicts = rows_.key_conflicts();
  s.prune_failures = prune_failures_.load(std::memory_order_relaxed);
  s.cpu_ns = cpu_ns_.load(std::memory_order_relaxed);
  s.commits_here = commits_here_.load(std::memory_order_relaxed);
  return s;
}

std::size_t SqliteWriter::stop(std::chrono::milliseconds drain) {
  Clock::time_point deadline;
  {
    std::lock_guard l(mu_);
    if (!thread_.joinable()) return abandoned_rows_;
    stop_ = true;
    deadline = Clock::now() + drain;
    drain_deadline_ = deadline;
  }
  work_cv_.notify_all();
  {
    std::unique_lock l(mu_);
    if (!done_cv_.wait_until(l, deadline, [&] { return stopped_; })) {
      give_up_.store(true, std::memory_order_relaxed);
      work_cv_.notify_all();
    }
  }
  thread_.join();
  std::lock_guard l(mu_);
  return abandoned_rows_;
}

// ---- the thread ----

void SqliteWriter::lower_priority() noexcept {
  pthread_setname_np(pthread_self(), "fl-store");
  if (options_.sched_batch) {
    sched_param p{};
    if (const int e = pthread_setschedparam(pthread_self(), SCHED_BATCH, &p); e != 0)
      FL_DEBUG("store: the writer thread stays SCHED_OTHER: %s", std::strerror(e));
  }
  if (options_.nice != 0) {
    const pid_t tid = ::gettid();
    errno = 0;
    const int now = ::getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
    if (errno == 0 && ::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), now + options_.nice) != 0)
      FL_DEBUG("store: the writer thread's nice value stays %d: %s", now, std::strerror(errno));
  }
}

void SqliteWriter::run() noexcept {
  lower_priority();
  std::unique_lock l(mu_);
  for (;;) {
    try {
      if (give_up_.load(std::memory_order_relaxed)) break;
      const auto now = Clock::now();
      if (stop_ && now >= drain_deadline_) break;
      const bool batches = !group_.empty() || !queue_.empty();
      if (!batches && !prune_request_) {
        if (stop_) break;  // drained
        work_cv_.wait(l);
        continue;
      }
      const bool backing_off = !group_.empty() && !kick_ && now < retry_at_;
      if (batches && !backing_off) {
        kick_ = false;
        take_queued();
        l.unlock();
        attempt();
        l.lock();
        continue;
      }
      if (prune_request_ && !stop_) {
        // Also while batches wait for their retry: a prune is tried once (it
        // fails as they do if the lock is still held) and its caller goes on.
        const auto [policy, now_ms] = *prune_request_;
        prune_request_.reset();
        const std::uint64_t ticket = prune_requested_;
        l.unlock();
        run_prune(policy, now_ms);
        l.lock();
        prune_done_ = ticket;
        done_cv_.notify_all();
        continue;
      }
      if (!batches) {  // stopping: prunes are dropped
        prune_request_.reset();
        continue;
      }
      work_cv_.wait_until(l, stop_ ? std::min(retry_at_, drain_deadline_) : retry_at_);
    } catch (const std::exception& e) {
      // Out of memory taking a batch: nothing was lost (the batch is where it was).
      if (!l.owns_lock()) l.lock();
      FL_ERROR("store: the writer thread: %s", e.what());
      work_cv_.wait_for(l, options_.retry_min);
    }
  }
  if (!l.owns_lock()) l.lock();
  std::size_t rows = 0, batches = 0;
  for (const Entry& e : group_) rows += e.batch->rows, ++batches;
  for (const auto& b : queue_) rows += b->rows, ++batches;
  group_.clear();
  group_held_ = false;
  queue_.clear();
  abandoned_rows_ = rows;
  stopped_ = true;
  prune_done_ = prune_requested_;
  const bool failing = !last_attempt_ok_;
  done_cv_.notify_all();
  l.unlock();
  if (rows > 0) {
    FL_ERROR("store: closed with %zu rows in %zu batches not written to %s%s", rows, batches, path_.c_str(),
             failing ? " (writing had failed; see above)" : " (the drain's time ran out)");
  }
}

bool SqliteWriter::take_queued() {
  std::size_t rows = 0;
  for (const Entry& e : group_) rows += e.batch->rows;
  bool took = false;
  while (!queue_.empty() && (group_.empty() || rows + queue_.front()->rows <= options_.max_group_rows)) {
    group_.push_back(Entry{queue_.front(), false});
    rows += queue_.front()->rows;
    queue_.pop_front();
    took = true;
  }
  ++attempts_begun_;
  group_held_ = !group_.empty();
  return took;
}

bool SqliteWriter::attempt() {
  Clock::duration took{};
  Expected<void> r = write_group(took);
  finish_attempt(r, took);
  return r.has_value();
}

void SqliteWriter::rollback() noexcept {
  if (!sqlite3_get_autocommit(db_.get())) {
    rollback_.step();
    rollback_.reset();
  }
}

Expected<void> SqliteWriter::write_group(Clock::duration& took) {
  std::lock_guard c(conn_mu_);
  const auto began = Clock::now();
  Expected<void> result;
  try {
    int rc = begin_.step();
    begin_.reset();
    if (rc != SQLITE_DONE) {
      std::string why = sqlite::describe(db_.get(), rc);
      if (busy_code(rc))
        why += ": another process has held the write lock for " + std::to_string(options_.busy_timeout.count()) + " ms";
      result = make_error(Errc::io, "cannot commit to " + path_ + ": " + why + "; the writes are kept and tried again");
    } else {
      for (const Entry& e : group_) {
        if (auto w = rows_.write(e.batch->writes); !w) {
          result = w.error();
          break;
        }
      }
      if (result) {
        rc = commit_.step();
        commit_.reset();
        if (rc != SQLITE_DONE) result = sqlite::error_of(db_.get(), rc, "COMMIT");
      }
      if (!result) {
        rollback();
        result = make_error(Errc::io, "cannot commit to " + path_ + ": " + result.error().detail +
                                          "; the writes are kept and tried again");
      }
    }
  } catch (const std::exception& e) {
    rollback();
    result = make_error(Errc::io, "cannot commit to " + path_ + ": " + e.what() + "; the writes are kept and tried again");
  }
  took = Clock::now() - began;
  sample_locked();
  cpu_ns_.store(thread_cpu_ns(), std::memory_order_relaxed);
  return result;
}

void SqliteWriter::count_commit(Clock::duration took) noexcept {
  commits_.fetch_add(1, std::memory_order_relaxed);
  const double s = std::chrono::duration<double>(took).count();
  const auto* bucket = std::lower_bound(std::begin(kCommitBuckets), std::end(kCommitBuckets), s);
  buckets_[bucket - std::begin(kCommitBuckets)].fetch_add(1, std::memory_order_relaxed);
  commit_ns_.fetch_add(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(took).count()),
                       std::memory_order_relaxed);
}

void SqliteWriter::finish_attempt(const Expected<void>& result, Clock::duration took) {
  const auto now = Clock::now();
  bool wake_now = false;
  if (result) {
    count_commit(took);
    std::uint64_t command_rows = 0, rows = 0;
    for (const Entry& e : group_) {
      command_rows += e.batch->writes.command_count();
      rows += e.batch->rows;
    }
    rows_written_.fetch_add(command_rows, std::memory_order_relaxed);
    batches_.fetch_add(group_.size(), std::memory_order_relaxed);
    const std::uint64_t last = group_.empty() ? durable_through() : group_.back().batch->number;
    const std::uint64_t failures = streak_failures_;
    {
      std::lock_guard l(mu_);
      // Marked as they go: if memory runs out here, the batches are written
      // again (which changes nothing) and none is reported twice.
      for (Entry& e : group_) {
        if (e.reported) continue;
        if (e.batch->lost_writes)
          outcomes_.push_back(BatchOutcome{
              e.batch->number, make_error(Errc::io, "a write could not be buffered (out of memory) and is lost; see the log")});
        else
          outcomes_.push_back(BatchOutcome{e.batch->number, {}});
        e.reported = true;
      }
      // The references go before the number does: a batch the loop sees
      // durable is the loop's alone.
      group_.clear();
      group_held_ = false;
      rows_durable_.fetch_add(rows, std::memory_order_release);
      durable_through_.store(last, std::memory_order_release);
      ++attempts_ended_;
      last_attempt_ok_ = true;
      up_.store(true, std::memory_order_relaxed);  // before a waiter wakes: it may ask at once
    }
    done_cv_.notify_all();
    if (failures > 0) {
      FL_INFO("store: writing to %s again after %.1f s and %llu failed attempts", path_.c_str(),
              std::chrono::duration<double>(now - streak_began_).count(), static_cast<unsigned long long>(failures));
    }
    streak_failures_ = 0;
    backoff_ = std::chrono::milliseconds(0);
    wake_now = true;
  } else {
    commit_failures_.fetch_add(1, std::memory_order_relaxed);
    std::size_t rows = 0;
    {
      std::lock_guard l(mu_);
      for (Entry& e : group_) {
        rows += e.batch->rows;
        if (e.reported) continue;
        outcomes_.push_back(BatchOutcome{e.batch->number, result.error()});
        e.reported = true;
        wake_now = true;
      }
      ++attempts_ended_;
      last_attempt_ok_ = false;
      last_error_ = result.error();
      up_.store(false, std::memory_order_relaxed);
      for (const auto& b : queue_) rows += b->rows;
    }
    done_cv_.notify_all();
    backoff_ = backoff_.count() == 0 ? options_.retry_min : std::min(backoff_ * 2, options_.retry_max);
    retry_at_ = now + backoff_;
    if (streak_failures_++ == 0) {
      streak_began_ = now;
      FL_ERROR("store: %s; %zu rows wait, tried again every %lld ms at most", result.error().detail.c_str(), rows,
               static_cast<long long>(options_.retry_max.count()));
    }
  }
  if (wake_now) wake();
}

void SqliteWriter::run_prune(const RetentionPolicy& policy, std::uint64_t now_ms) noexcept {
  try {
    prune_steps(policy, now_ms);
  } catch (const std::exception& e) {
    prune_failures_.fetch_add(1, std::memory_order_relaxed);
    FL_ERROR("store: prune of %s stopped: %s", path_.c_str(), e.what());
  }
  pruned_.fetch_add(pruner_.deleted(), std::memory_order_acq_rel);
  cpu_ns_.store(thread_cpu_ns(), std::memory_order_relaxed);
}

void SqliteWriter::prune_steps(const RetentionPolicy& policy, std::uint64_t now_ms) {
  pruner_.start(policy, now_ms);
  for (;;) {
    Expected<bool> more = false;
    {
      std::lock_guard c(conn_mu_);
      try {
        more = pruner_.step();
      } catch (const std::exception& e) {
        if (!sqlite3_get_autocommit(db_.get())) (void)sqlite::exec(db_.get(), "ROLLBACK");
        more = make_error(Errc::io, e.what());
      }
      sample_locked();
    }
    if (!more) {
      prune_failures_.fetch_add(1, std::memory_order_relaxed);
      FL_WARN("store: prune of %s stopped: %s", path_.c_str(), more.error().detail.c_str());
      break;
    }
    if (!*more) break;
    // Batches do not wait for the rest of the prune.
    bool batches = false;
    {
      std::lock_guard l(mu_);
      if (stop_) break;
      if (group_.empty() && !queue_.empty()) {
        kick_ = false;
        batches = take_queued();
      }
    }
    if (batches && !attempt()) break;
  }
}

void SqliteWriter::sample_locked() noexcept {
  sqlite::StmtReset done(data_version_stmt_);
  if (data_version_stmt_.step() == SQLITE_ROW) data_version_.store(data_version_stmt_.u64(0), std::memory_order_release);
}

void SqliteWriter::wake() noexcept {
  std::lock_guard l(wake_mu_);
  if (!wake_) return;
  try {
    wake_();
  } catch (const std::exception& e) {
    FL_ERROR("store: the wakeup failed: %s", e.what());
  } catch (...) {
    FL_ERROR("store: the wakeup failed");
  }
}

}  // namespace fleetlink::broker
