#include "store/sqlite_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <unordered_map>

#include "common/log.hpp"
#include "store/record_codec.hpp"
#include "store/sqlite_schema.hpp"

namespace fleetlink::broker {

using store_codec::is_final_code;
using store_codec::kFirstFinalCode;
using store_rows::CommandRow;
using store_rows::RigRow;

namespace {

// The columns every command read selects, in CommandRow order; the 13th is the
// results row's body (NULL when there is none or the query does not join it).
constexpr const char* kCommandColumns =
    "c.cmd_id, c.rig_id, c.state, c.job_id, c.idempotency_key, c.enqueued_at, c.attempts, "
    "c.sent_at, c.acked_at, c.running_at, c.finished_at, c.body";
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

constexpr const char* kJobColumns = "job_id, created_at, finished, body";

// The smallest UUIDv7 text of Unix millisecond `ms`: "0190ab12-34cd". Every id
// made at or after `ms` sorts at or after it.
std::string key_of_ms(std::uint64_t ms) {
  ms = std::min<std::uint64_t>(ms, 0xFFFF'FFFF'FFFFULL);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%08" PRIx64 "-%04" PRIx64, ms >> 16, ms & 0xFFFF);
  return buf;
}

bool matches(const CommandRow& row, const CommandQuery& q, const std::string& since_key) {
  if (!q.rig_id.empty() && row.rig_id != q.rig_id) return false;
  if (q.state && row.state != store_codec::state_code(*q.state)) return false;
  if (!q.job_id.empty() && row.job_id != q.job_id) return false;
  if (q.since_ms && (row.enqueued_at < q.since_ms || row.cmd_id < since_key)) return false;
  if (!q.before_cmd_id.empty() && row.cmd_id >= q.before_cmd_id) return false;
  return true;
}

bool matches(const JobRecord& j, const JobQuery& q) {
  if (q.finished && j.finished != *q.finished) return false;
  if (q.since_ms && j.created_at_ms < q.since_ms) return false;
  if (!q.before_job_id.empty() && j.job_id >= q.before_job_id) return false;
  return true;
}

bool busy_code(int rc) noexcept { return (rc & 0xFF) == SQLITE_BUSY || (rc & 0xFF) == SQLITE_LOCKED; }

}  // namespace

// ---- opening ----

Expected<std::unique_ptr<SqliteStore>> SqliteStore::open(const std::string& state_dir, SqliteOptions options) {
  try {
    namespace fs = std::filesystem;
    std::error_code ec;
    const bool made = fs::create_directories(state_dir, ec);
    if (ec) return make_error(Errc::io, "cannot create the state directory " + state_dir + ": " + ec.message());
    if (!fs::is_directory(state_dir, ec))
      return make_error(Errc::io, "the state directory " + state_dir + " is not a directory");
    if (made) {
      fs::permissions(state_dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec,
                      fs::perm_options::replace, ec);
    }
    const std::string path = (fs::path(state_dir) / "commands.db").string();
    // Made here, not by SQLite (0644): its -wal and -shm files take the
    // database's mode, so they are 0640 too.
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
    if (fd >= 0) {
      ::fchmod(fd, 0640);
      ::close(fd);
    } else if (errno != EEXIST) {
      return make_error(Errc::io, "cannot create " + path + ": " + std::strerror(errno));
    }
    std::unique_ptr<SqliteStore> store(new SqliteStore(path, options));
    if (auto r = store->init(); !r) return r.error();
    return store;
  } catch (const std::exception& e) {
    return make_error(Errc::io, "cannot open the command store in " + state_dir + ": " + e.what());
  }
}

SqliteStore::SqliteStore(std::string path, SqliteOptions options)
    : path_(std::move(path)), options_(options), busy_(options.busy_timeout) {}

SqliteStore::~SqliteStore() {
  // The checkpointer's connection closes first: the last one to close (this
  // store's, unless another broker still has the file) checkpoints and removes
  // the WAL.
  checkpointer_.reset();
  if (db_ && !sqlite3_get_autocommit(db_.get())) sqlite::exec(db_.get(), "ROLLBACK");
}

Expected<void> SqliteStore::init() {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path_.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  db_.reset(raw);
  if (rc != SQLITE_OK) return make_error(Errc::io, "cannot open " + path_ + ": " + sqlite::describe(raw, rc));
  sqlite3_extended_result_codes(db_.get(), 1);
  busy_.install(db_.get());

  // The first statement that reads the file: where a file that is not a
  // database, or a damaged header, shows.
  {
    // Preparing reads the schema, stepping may read more: either shows it.
    sqlite::Stmt st;
    auto prepared = sqlite::prepare(db_.get(), "PRAGMA journal_mode = WAL", false);
    if (prepared) {
      st = std::move(*prepared);
      rc = st.step();
    } else {
      rc = sqlite3_extended_errcode(db_.get());
    }
    sqlite::StmtReset done(st);
    if ((rc & 0xFF) == SQLITE_NOTADB)
      return make_error(Errc::malformed, path_ + " is not an SQLite database (" + sqlite::describe(db_.get(), rc) +
                                             "): move it away, or point --state-dir elsewhere");
    if ((rc & 0xFF) == SQLITE_CORRUPT)
      return make_error(Errc::malformed, path_ + " is corrupt (" + sqlite::describe(db_.get(), rc) + ")");
    if (rc != SQLITE_ROW) return make_error(Errc::io, "cannot read " + path_ + ": " + sqlite::describe(db_.get(), rc));
    if (st.text(0) != "wal") {
      return make_error(Errc::io, path_ + " cannot be put in WAL mode (journal_mode stays '" +
                                      std::string(st.text(0)) + "')");
    }
  }
  {
    auto st = sqlite::prepare(db_.get(), "PRAGMA quick_check(5)", false);
    if (!st) return make_error(Errc::io, "cannot check " + path_ + ": " + st.error().detail);
    sqlite::StmtReset done(*st);
    std::string problems;
    while ((rc = st->step()) == SQLITE_ROW) {
      if (st->text(0) == "ok") continue;
      if (!problems.empty()) problems += "; ";
      problems += st->text(0);
    }
    if (rc != SQLITE_DONE) problems = sqlite::describe(db_.get(), rc);
    if (!problems.empty()) {
      return make_error(Errc::malformed, path_ + " is corrupt (PRAGMA quick_check: " + problems +
                                             "): move it away to start with an empty store, or restore a copy");
    }
  }
  const std::string settings =
      "PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0; PRAGMA temp_store = MEMORY;"
      " PRAGMA journal_size_limit = " +
      std::to_string(options_.wal_truncate_bytes) + "; PRAGMA cache_size = -" + std::to_string(options_.cache_kib) +
      "; PRAGMA mmap_size = " + std::to_string(options_.mmap_bytes);
  if (auto r = sqlite::exec(db_.get(), settings.c_str()); !r)
    return make_error(Errc::io, "cannot configure " + path_ + ": " + r.error().detail);
  if (auto r = sqlite_schema::migrate(db_.get(), path_, sqlite_schema::migrations()); !r) return r;

  auto prep = [&](sqlite::Stmt& into, const std::string& sql) -> Expected<void> {
    auto st = sqlite::prepare(db_.get(), sql);
    if (!st) return make_error(Errc::io, "cannot use " + path_ + ": " + st.error().detail);
    into = std::move(*st);
    return {};
  };
  const std::string cols = kCommandColumns;
  const std::pair<sqlite::Stmt*, std::string> statements[] = {
      {&begin_, "BEGIN IMMEDIATE"},
      {&commit_, "COMMIT"},
      {&rollback_, "ROLLBACK"},
      {&upsert_rig_, kUpsertRig},
      {&upsert_job_, kUpsertJob},
      {&find_, "SELECT " + cols + ", r.body FROM commands c LEFT JOIN results r ON r.cmd_id = c.cmd_id"
                                  " WHERE c.cmd_id = ?1"},
      // `<> ''` repeated so the planner may use the partial index.
      {&find_key_, "SELECT " + cols + ", r.body FROM commands c LEFT JOIN results r ON r.cmd_id = c.cmd_id"
                                      " WHERE c.idempotency_key = ?1 AND c.idempotency_key <> ''"},
      {&open_of_, "SELECT " + cols + ", NULL FROM commands c WHERE c.rig_id = ?1 AND c.is_open = 1"
                                     " ORDER BY c.cmd_id"},
      {&load_open_, "SELECT " + cols + ", NULL FROM commands c INDEXED BY commands_open WHERE c.is_open = 1"
                                       " ORDER BY c.cmd_id"},
      {&load_rigs_, "SELECT rig_id, first_seen, last_seen, body FROM rigs ORDER BY rig_id"},
      {&load_jobs_, std::string("SELECT ") + kJobColumns + " FROM jobs WHERE finished = 0 ORDER BY job_id"},
      {&find_job_, std::string("SELECT ") + kJobColumns + " FROM jobs WHERE job_id = ?1"},
      {&data_version_, "PRAGMA data_version"},
  };
  for (const auto& [into, sql] : statements) {
    if (auto r = prep(*into, sql); !r) return r;
  }

  auto cp = WalCheckpointer::start(path_, {options_.checkpoint_interval, options_.wal_truncate_bytes});
  if (!cp) return make_error(Errc::io, "cannot start checkpoints of " + path_ + ": " + cp.error().detail);
  checkpointer_ = std::move(*cp);
  return {};
}

// ---- writes ----

void SqliteStore::put_command(const CommandView& v, bool with_result) {
  try {
    pending_.put(v, with_result);
  } catch (const std::exception& e) {
    buffer_failed_ = true;
    FL_ERROR("store: command %s could not be buffered: %s", v.cmd_id.c_str(), e.what());
  }
}

void SqliteStore::put_rig(const RigRecord& r) {
  try {
    pending_.put(r);
  } catch (const std::exception& e) {
    buffer_failed_ = true;
    FL_ERROR("store: rig %s could not be buffered: %s", r.rig_id.c_str(), e.what());
  }
}

void SqliteStore::put_job(const JobRecord& j) {
  try {
    pending_.put(j);
  } catch (const std::exception& e) {
    buffer_failed_ = true;
    FL_ERROR("store: job %s could not be buffered: %s", j.job_id.c_str(), e.what());
  }
}

StoreCounters SqliteStore::counters() const noexcept {
  StoreCounters c{stats_.commits, stats_.commit_failures, stats_.rows_written, {}, {}, stats_.commit_seconds};
  try {
    c.commit_bounds.assign(std::begin(kCommitBuckets), std::end(kCommitBuckets));
    c.commit_buckets.assign(std::begin(stats_.commit_buckets), std::end(stats_.commit_buckets));
  } catch (...) {  // out of memory: the histogram is left out
    c.commit_bounds.clear();
    c.commit_buckets.clear();
  }
  return c;
}

void SqliteStore::count_commit(std::chrono::steady_clock::time_point began) noexcept {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  const auto* bucket = std::lower_bound(std::begin(kCommitBuckets), std::end(kCommitBuckets), s);
  ++stats_.commit_buckets[bucket - std::begin(kCommitBuckets)];
  stats_.commit_seconds += s;
}

Expected<void> SqliteStore::commit() {
  if (pending_.empty() && !buffer_failed_) return {};
  const auto began = std::chrono::steady_clock::now();
  try {
    Expected<void> result;
    if (!pending_.empty()) {
      int rc = begin_.step();
      begin_.reset();
      if (rc != SQLITE_DONE) {
        ++stats_.commit_failures;
        up_ = false;
        std::string why = sqlite::describe(db_.get(), rc);
        if (busy_code(rc)) {
          why += ": another process has held the write lock for " +
                 std::to_string(options_.busy_timeout.count()) + " ms";
        }
        return make_error(Errc::io, "cannot commit to " + path_ + ": " + why + "; the writes stay pending");
      }
      auto written = write_pending();
      if (written) {
        rc = commit_.step();
        commit_.reset();
        if (rc != SQLITE_DONE) written = sqlite::error_of(db_.get(), rc, "COMMIT");
      }
      if (!written) {
        if (!sqlite3_get_autocommit(db_.get())) {
          rollback_.step();
          rollback_.reset();
        }
        ++stats_.commit_failures;
        up_ = false;
        return make_error(Errc::io, "cannot commit to " + path_ + ": " + written.error().detail +
                                        "; the writes stay pending");
      }
      ++stats_.commits;
      count_commit(began);
      stats_.rows_written += pending_.command_count();
      pending_.clear();
    }
    up_ = true;
    if (buffer_failed_) {
      buffer_failed_ = false;
      result = make_error(Errc::io, "a write could not be buffered (out of memory) and is lost; see the log");
    }
    return result;
  } catch (const std::exception& e) {
    if (db_ && !sqlite3_get_autocommit(db_.get())) {
      rollback_.step();
      rollback_.reset();
    }
    ++stats_.commit_failures;
    up_ = false;
    return make_error(Errc::io, "cannot commit to " + path_ + ": " + e.what() + "; the writes stay pending");
  }
}

Expected<void> SqliteStore::write_pending() {
  const CommandRow* rows = pending_.commands();
  const std::size_t n = pending_.command_count();
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
  for (const RigRow& rig : pending_.rigs()) {
    if (auto r = write_rig(rig); !r) return r;
  }
  for (const JobRecord& job : pending_.jobs()) {
    if (auto r = write_job(job); !r) return r;
  }
  return {};
}

sqlite::Stmt* SqliteStore::upsert_statement(std::size_t rows, bool ending) {
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
  auto made = sqlite::prepare(db_.get(), sql);
  if (!made) {
    FL_WARN("store: %s", made.error().detail.c_str());
    return nullptr;
  }
  st = std::move(*made);
  return &st;
}

sqlite::Stmt* SqliteStore::results_statement(std::size_t rows) {
  sqlite::Stmt& st = insert_results_[rows];
  if (st) return &st;
  std::string sql = kInsertResultHead;
  for (std::size_t i = 0; i < rows; ++i) sql += i ? ",(?,?,?)" : "(?,?,?)";
  sql += kInsertResultTail;
  auto made = sqlite::prepare(db_.get(), sql);
  if (!made) {
    FL_WARN("store: %s", made.error().detail.c_str());
    return nullptr;
  }
  st = std::move(*made);
  return &st;
}

void SqliteStore::bind_command(sqlite::Stmt& st, int first, const CommandRow& row, bool drop_key) {
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

Expected<void> SqliteStore::write_commands(const CommandRow* const* rows, std::size_t n, bool ending) {
  sqlite::Stmt* st = upsert_statement(n, ending);
  if (!st) return make_error(Errc::io, "cannot prepare the command upsert");
  int rc = 0;
  {
    sqlite::StmtReset done(*st);
    for (std::size_t i = 0; i < n; ++i) bind_command(*st, static_cast<int>(i) * kCommandParams + 1, *rows[i], false);
    rc = st->step();
  }
  if (rc == SQLITE_DONE) return {};
  if (rc != SQLITE_CONSTRAINT_UNIQUE) return sqlite::error_of(db_.get(), rc, "writing commands");
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

Expected<void> SqliteStore::write_command_alone(const CommandRow& row, bool ending) {
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
        ++stats_.key_conflicts;
        FL_WARN("store: idempotency key '%s' already names another command; command %s is stored without it",
                row.idempotency_key.c_str(), row.cmd_id.c_str());
      }
      return {};
    }
    if (rc != SQLITE_CONSTRAINT_UNIQUE || row.idempotency_key.empty())
      return sqlite::error_of(db_.get(), rc, "writing command " + row.cmd_id);
  }
  return make_error(Errc::io, "writing command " + row.cmd_id + ": its key clashes");
}

Expected<void> SqliteStore::write_results(const CommandRow* const* rows, std::size_t n) {
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
  if (rc != SQLITE_DONE) return sqlite::error_of(db_.get(), rc, "writing results");
  return {};
}

Expected<void> SqliteStore::write_rig(const RigRow& row) {
  sqlite::StmtReset done(upsert_rig_);
  upsert_rig_.bind_text(1, row.rig.rig_id);
  upsert_rig_.bind_u64(2, row.rig.first_seen_ms);
  upsert_rig_.bind_u64(3, row.rig.last_seen_ms);
  upsert_rig_.bind_blob(4, row.body);
  const int rc = upsert_rig_.step();
  if (rc != SQLITE_DONE) return sqlite::error_of(db_.get(), rc, "writing rig " + row.rig.rig_id);
  return {};
}

Expected<void> SqliteStore::write_job(const JobRecord& job) {
  sqlite::StmtReset done(upsert_job_);
  upsert_job_.bind_text(1, job.job_id);
  upsert_job_.bind_u64(2, job.created_at_ms);
  upsert_job_.bind_int(3, job.finished ? 1 : 0);
  upsert_job_.bind_text(4, job.body);
  const int rc = upsert_job_.step();
  if (rc != SQLITE_DONE) return sqlite::error_of(db_.get(), rc, "writing job " + job.job_id);
  return {};
}

// ---- reads ----

void SqliteStore::read_failed(const char* what, const Error& e) {
  ++stats_.read_failures;
  FL_WARN("store: %s failed: %s", what, e.detail.c_str());
}

Expected<void> SqliteStore::read_commands(sqlite::Stmt& st, std::vector<CommandRow>& out) {
  sqlite::StmtReset done(st);
  int rc = 0;
  while ((rc = st.step()) == SQLITE_ROW) {
    CommandRow& row = out.emplace_back();
    row.cmd_id.assign(st.text(0));
    row.rig_id.assign(st.text(1));
    row.state = st.i64(2);
    row.job_id.assign(st.text(3));
    row.idempotency_key.assign(st.text(4));
    row.enqueued_at = st.u64(5);
    row.attempts = static_cast<std::uint32_t>(st.i64(6));
    row.sent_at = st.opt(7);
    row.acked_at = st.opt(8);
    row.running_at = st.opt(9);
    row.finished_at = st.opt(10);
    row.body.assign(st.blob(11));
    row.has_result = !st.is_null(12);
    if (row.has_result) row.result_body.assign(st.blob(12));
    row.committed = true;
  }
  if (rc != SQLITE_DONE) return sqlite::error_of(db_.get(), rc, "reading commands");
  return {};
}

// Lays this store's pending writes over `rows` (read from the file), as
// commit() would: a pending row combines with its stored one (read here if the
// query did not return it, e.g. because it no longer matched), and rows that
// no longer match go. `filter`, or (open_only) the open commands of `rig_id`
// (all rigs if empty).
void SqliteStore::overlay(std::vector<CommandRow>& rows, const CommandQuery* filter, bool open_only,
                          std::string_view rig_id) {
  const std::size_t n = pending_.command_count();
  if (n > 0) {
    std::unordered_map<std::string_view, std::size_t> at;
    at.reserve(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) at.emplace(rows[i].cmd_id, i);
    const CommandRow* pending = pending_.commands();
    std::vector<CommandRow> added;
    for (std::size_t i = 0; i < n; ++i) {
      const CommandRow& p = pending[i];
      if (open_only && !rig_id.empty() && p.rig_id != rig_id) continue;
      if (auto it = at.find(p.cmd_id); it != at.end()) {
        store_rows::combine(rows[it->second], p);
        continue;
      }
      std::vector<CommandRow> stored;
      find_.bind_text(1, p.cmd_id);
      if (auto r = read_commands(find_, stored); !r) read_failed("reading a pending command's row", r.error());
      if (!stored.empty()) {
        store_rows::combine(stored.front(), p);
        added.push_back(std::move(stored.front()));
      } else {
        added.push_back(p);
      }
    }
    // Only now: `at` points into the rows' strings.
    for (CommandRow& r : added) rows.push_back(std::move(r));
  }
  const std::string since_key = filter && filter->since_ms ? key_of_ms(filter->since_ms) : std::string();
  auto keep = [&](const CommandRow& r) {
    if (open_only) return !is_final_code(r.state) && (rig_id.empty() || r.rig_id == rig_id);
    return filter == nullptr || matches(r, *filter, since_key);
  };
  rows.erase(std::remove_if(rows.begin(), rows.end(), [&](const CommandRow& r) { return !keep(r); }), rows.end());
}

std::vector<CommandView> SqliteStore::to_views(const std::vector<CommandRow>& rows, const char* what) {
  std::vector<CommandView> out;
  out.reserve(rows.size());
  for (const CommandRow& row : rows) {
    auto v = store_rows::to_view(row);
    if (v) {
      out.push_back(std::move(*v));
    } else {
      ++stats_.unreadable_rows;
      FL_WARN("store: %s: left out %s", what, v.error().detail.c_str());
    }
  }
  return out;
}

std::optional<CommandView> SqliteStore::find_row(std::string_view cmd_id) {
  std::vector<CommandRow> rows;
  find_.bind_text(1, cmd_id);
  if (auto r = read_commands(find_, rows); !r) {
    read_failed("find", r.error());
    rows.clear();
  }
  if (const CommandRow* p = pending_.find_command(cmd_id)) {
    if (rows.empty()) rows.push_back(*p);
    else store_rows::combine(rows.front(), *p);
  }
  if (rows.empty()) return std::nullopt;
  auto v = store_rows::to_view(rows.front());
  if (!v) {
    ++stats_.unreadable_rows;
    FL_WARN("store: find: %s", v.error().detail.c_str());
    return std::nullopt;
  }
  return std::move(*v);
}

void SqliteStore::find(std::string_view cmd_id, CommandCallback done) {
  std::optional<CommandView> out;
  try {
    out = find_row(cmd_id);
  } catch (const std::exception& e) {
    read_failed("find", make_error(Errc::io, e.what()));
    out.reset();
  }
  done(std::move(out));
}

void SqliteStore::find_by_key(std::string_view key, CommandCallback done) {
  std::optional<CommandView> out;
  try {
    if (!key.empty()) {
      std::vector<CommandRow> rows;
      find_key_.bind_text(1, key);
      if (auto r = read_commands(find_key_, rows); !r) {
        read_failed("find_by_key", r.error());
        rows.clear();
      }
      // The stored owner of the key wins over a pending claim: commit() would
      // keep it, and store the pending one without the key.
      if (!rows.empty()) out = find_row(rows.front().cmd_id);
      else if (const CommandRow* p = pending_.find_command_by_key(key)) out = find_row(p->cmd_id);
    }
  } catch (const std::exception& e) {
    read_failed("find_by_key", make_error(Errc::io, e.what()));
    out.reset();
  }
  done(std::move(out));
}

void SqliteStore::open_commands_of(std::string_view rig_id, CommandsCallback done) {
  std::vector<CommandView> out;
  try {
    std::vector<CommandRow> rows;
    open_of_.bind_text(1, rig_id);
    if (auto r = read_commands(open_of_, rows); !r) {
      read_failed("open_commands_of", r.error());
      rows.clear();
    }
    if (pending_.command_count() > 0) {
      overlay(rows, nullptr, true, rig_id);
      std::sort(rows.begin(), rows.end(), [](const CommandRow& a, const CommandRow& b) { return a.cmd_id < b.cmd_id; });
    }
    out = to_views(rows, "open_commands_of");
  } catch (const std::exception& e) {
    read_failed("open_commands_of", make_error(Errc::io, e.what()));
    out.clear();
  }
  done(std::move(out));
}

sqlite::Stmt* SqliteStore::list_statement(unsigned mask) {
  auto it = list_.find(mask);
  if (it != list_.end()) return &it->second;
  // ?1 rig, ?2 state, ?3 job, ?4 since (as a key), ?5 since (ms), ?6 before, ?7 limit
  std::string sql = std::string("SELECT ") + kCommandColumns +
                    ", r.body FROM commands c LEFT JOIN results r ON r.cmd_id = c.cmd_id WHERE 1";
  if (mask & 1) sql += " AND c.rig_id = ?1";
  if (mask & 2) sql += " AND c.state = ?2";
  if (mask & 32) sql += " AND c.is_open = 1";  // an open state: lets the planner take commands_open
  if (mask & 4) sql += " AND c.job_id = ?3 AND c.job_id <> ''";
  if (mask & 8) sql += " AND c.cmd_id >= ?4 AND c.enqueued_at >= ?5";
  if (mask & 16) sql += " AND c.cmd_id < ?6";
  sql += " ORDER BY c.cmd_id DESC LIMIT ?7";
  auto st = sqlite::prepare(db_.get(), sql);
  if (!st) {
    read_failed("list_commands", st.error());
    return nullptr;
  }
  return &list_.emplace(mask, std::move(*st)).first->second;
}

void SqliteStore::list_commands(const CommandQuery& q, CommandsCallback done) {
  std::vector<CommandView> out;
  try {
    const std::size_t limit = std::min(q.limit, kMaxListLimit);
    if (limit > 0) {
      unsigned mask = 0;
      if (!q.rig_id.empty()) mask |= 1;
      if (q.state) mask |= 2 | (is_final(*q.state) ? 0 : 32);
      if (!q.job_id.empty()) mask |= 4;
      if (q.since_ms) mask |= 8;
      if (!q.before_cmd_id.empty()) mask |= 16;
      std::vector<CommandRow> rows;
      if (sqlite::Stmt* st = list_statement(mask)) {
        const std::string since_key = key_of_ms(q.since_ms);
        st->bind_text(1, q.rig_id);
        st->bind_int(2, q.state ? store_codec::state_code(*q.state) : 0);
        st->bind_text(3, q.job_id);
        st->bind_text(4, since_key);
        st->bind_u64(5, q.since_ms);
        st->bind_text(6, q.before_cmd_id);
        // A pending write can take a stored row out of the answer: read as many
        // more as there are pending rows, so the page is still full after.
        st->bind_u64(7, limit + pending_.command_count());
        if (auto r = read_commands(*st, rows); !r) {
          read_failed("list_commands", r.error());
          rows.clear();
        }
      }
      overlay(rows, &q, false, {});
      std::sort(rows.begin(), rows.end(), [](const CommandRow& a, const CommandRow& b) { return a.cmd_id > b.cmd_id; });
      if (rows.size() > limit) rows.resize(limit);
      out = to_views(rows, "list_commands");
    }
  } catch (const std::exception& e) {
    read_failed("list_commands", make_error(Errc::io, e.what()));
    out.clear();
  }
  done(std::move(out));
}

Expected<std::vector<JobRecord>> SqliteStore::read_jobs(sqlite::Stmt& st) {
  std::vector<JobRecord> out;
  sqlite::StmtReset done(st);
  int rc = 0;
  while ((rc = st.step()) == SQLITE_ROW) {
    JobRecord& j = out.emplace_back();
    j.job_id.assign(st.text(0));
    j.created_at_ms = st.u64(1);
    j.finished = st.i64(2) != 0;
    j.body.assign(st.text(3));
  }
  if (rc != SQLITE_DONE) return sqlite::error_of(db_.get(), rc, "reading jobs");
  return out;
}

void SqliteStore::find_job(std::string_view job_id, JobCallback done) {
  std::optional<JobRecord> out;
  try {
    find_job_.bind_text(1, job_id);
    auto jobs = read_jobs(find_job_);
    if (!jobs) read_failed("find_job", jobs.error());
    else if (!jobs->empty()) out = std::move(jobs->front());
    if (const JobRecord* p = pending_.find_job(job_id)) {
      if (out) store_rows::combine(*out, *p);
      else out = *p;
    }
  } catch (const std::exception& e) {
    read_failed("find_job", make_error(Errc::io, e.what()));
    out.reset();
  }
  done(std::move(out));
}

sqlite::Stmt* SqliteStore::list_jobs_statement(unsigned mask) {
  auto it = list_jobs_.find(mask);
  if (it != list_jobs_.end()) return &it->second;
  // ?1 finished, ?2 since, ?3 before, ?4 limit
  std::string sql = std::string("SELECT ") + kJobColumns + " FROM jobs WHERE 1";
  if (mask & 1) sql += " AND finished = ?1";
  if (mask & 2) sql += " AND created_at >= ?2";
  if (mask & 4) sql += " AND job_id < ?3";
  sql += " ORDER BY job_id DESC LIMIT ?4";
  auto st = sqlite::prepare(db_.get(), sql);
  if (!st) {
    read_failed("list_jobs", st.error());
    return nullptr;
  }
  return &list_jobs_.emplace(mask, std::move(*st)).first->second;
}

void SqliteStore::list_jobs(const JobQuery& q, JobsCallback done) {
  std::vector<JobRecord> out;
  try {
    const std::size_t limit = std::min(q.limit, kMaxListLimit);
    if (limit > 0) {
      const unsigned mask = (q.finished ? 1U : 0U) | (q.since_ms ? 2U : 0U) | (q.before_job_id.empty() ? 0U : 4U);
      if (sqlite::Stmt* st = list_jobs_statement(mask)) {
        st->bind_int(1, q.finished.value_or(false) ? 1 : 0);
        st->bind_u64(2, q.since_ms);
        st->bind_text(3, q.before_job_id);
        st->bind_u64(4, limit + pending_.jobs().size());
        auto jobs = read_jobs(*st);
        if (!jobs) read_failed("list_jobs", jobs.error());
        else out = std::move(*jobs);
      }
      std::unordered_map<std::string_view, std::size_t> at;
      for (std::size_t i = 0; i < out.size(); ++i) at.emplace(out[i].job_id, i);
      std::vector<JobRecord> added;
      for (const JobRecord& p : pending_.jobs()) {
        if (auto it = at.find(p.job_id); it != at.end()) {
          store_rows::combine(out[it->second], p);
          continue;
        }
        find_job_.bind_text(1, p.job_id);
        auto stored = read_jobs(find_job_);
        if (stored && !stored->empty()) {
          store_rows::combine(stored->front(), p);
          added.push_back(std::move(stored->front()));
        } else {
          added.push_back(p);
        }
      }
      for (JobRecord& j : added) out.push_back(std::move(j));
      out.erase(std::remove_if(out.begin(), out.end(), [&](const JobRecord& j) { return !matches(j, q); }),
                out.end());
      std::sort(out.begin(), out.end(), [](const JobRecord& a, const JobRecord& b) { return a.job_id > b.job_id; });
      if (out.size() > limit) out.resize(limit);
    }
  } catch (const std::exception& e) {
    read_failed("list_jobs", make_error(Errc::io, e.what()));
    out.clear();
  }
  done(std::move(out));
}

Expected<StoreSnapshot> SqliteStore::load() {
  try {
    StoreSnapshot snap;
    std::vector<CommandRow> rows;
    if (auto r = read_commands(load_open_, rows); !r)
      return make_error(Errc::io, "cannot load the open commands of " + path_ + ": " + r.error().detail);
    if (pending_.command_count() > 0) {
      overlay(rows, nullptr, true, {});
      std::sort(rows.begin(), rows.end(), [](const CommandRow& a, const CommandRow& b) { return a.cmd_id < b.cmd_id; });
    }
    snap.open_commands.reserve(rows.size());
    for (const CommandRow& row : rows) {
      // Refused rather than left out: an open command dropped here would never
      // be delivered nor finished, and nobody would know.
      auto v = store_rows::to_view(row);
      if (!v) return make_error(Errc::malformed, "cannot load " + path_ + ": " + v.error().detail);
      snap.open_commands.push_back(std::move(*v));
    }

    std::vector<RigRow> rigs;
    {
      sqlite::StmtReset done(load_rigs_);
      int rc = 0;
      while ((rc = load_rigs_.step()) == SQLITE_ROW) {
        RigRow& row = rigs.emplace_back();
        row.rig.rig_id.assign(load_rigs_.text(0));
        row.rig.first_seen_ms = load_rigs_.u64(1);
        row.rig.last_seen_ms = load_rigs_.u64(2);
        row.body.assign(load_rigs_.blob(3));
        if (auto r = store_codec::decode_rig_body(row.body, row.rig); !r)
          return make_error(Errc::malformed, "cannot load " + path_ + ": rig " + row.rig.rig_id + ": " + r.error().detail);
      }
      if (rc != SQLITE_DONE)
        return make_error(Errc::io, "cannot load the rigs of " + path_ + ": " + sqlite::describe(db_.get(), rc));
    }
    {
      std::unordered_map<std::string_view, std::size_t> at;
      for (std::size_t i = 0; i < rigs.size(); ++i) at.emplace(rigs[i].rig.rig_id, i);
      std::vector<RigRow> added;
      for (const RigRow& p : pending_.rigs()) {
        if (auto it = at.find(p.rig.rig_id); it != at.end()) store_rows::combine(rigs[it->second], p);
        else added.push_back(p);
      }
      for (RigRow& r : added) rigs.push_back(std::move(r));
    }
    snap.rigs.reserve(rigs.size());
    for (RigRow& r : rigs) snap.rigs.push_back(std::move(r.rig));
    std::sort(snap.rigs.begin(), snap.rigs.end(), [](const RigRecord& a, const RigRecord& b) { return a.rig_id < b.rig_id; });

    auto jobs = read_jobs(load_jobs_);
    if (!jobs) return make_error(Errc::io, "cannot load the open jobs of " + path_ + ": " + jobs.error().detail);
    snap.open_jobs = std::move(*jobs);
    for (const JobRecord& p : pending_.jobs()) {
      auto it = std::find_if(snap.open_jobs.begin(), snap.open_jobs.end(),
                             [&](const JobRecord& j) { return j.job_id == p.job_id; });
      if (it != snap.open_jobs.end()) store_rows::combine(*it, p);
      else if (!p.finished) snap.open_jobs.push_back(p);
    }
    snap.open_jobs.erase(std::remove_if(snap.open_jobs.begin(), snap.open_jobs.end(),
                                        [](const JobRecord& j) { return j.finished; }),
                         snap.open_jobs.end());
    std::sort(snap.open_jobs.begin(), snap.open_jobs.end(),
              [](const JobRecord& a, const JobRecord& b) { return a.job_id < b.job_id; });
    return snap;
  } catch (const std::exception& e) {
    return make_error(Errc::io, "cannot load " + path_ + ": " + e.what());
  }
}

// ---- sharing, upkeep ----

std::uint64_t SqliteStore::foreign_writes() {
  sqlite::StmtReset done(data_version_);
  const int rc = data_version_.step();
  if (rc == SQLITE_ROW) return data_version_.u64(0);
  read_failed("foreign_writes", sqlite::error_of(db_.get(), rc, "PRAGMA data_version"));
  // A value no read answers: the caller takes it for a change and reads again.
  return ~0ULL;
}

std::size_t SqliteStore::prune_commands(std::string_view sql_select, const std::string& bound, std::size_t want) {
  auto select = sqlite::prepare(db_.get(), sql_select, false);
  auto del_result = sqlite::prepare(db_.get(), "DELETE FROM results WHERE cmd_id = ?1", false);
  auto del_command = sqlite::prepare(db_.get(), "DELETE FROM commands WHERE cmd_id = ?1 AND state >= 4", false);
  if (!select || !del_result || !del_command) {
    read_failed("prune", !select ? select.error() : !del_result ? del_result.error() : del_command.error());
    return 0;
  }
  std::size_t deleted = 0;
  std::vector<std::string> ids;
  while (deleted < want) {
    const std::size_t chunk = std::min(options_.prune_chunk, want - deleted);
    int rc = begin_.step();
    begin_.reset();
    if (rc != SQLITE_DONE) {
      read_failed("prune", sqlite::error_of(db_.get(), rc, "BEGIN"));
      break;
    }
    ids.clear();
    {
      sqlite::StmtReset done(*select);
      if (!bound.empty()) select->bind_text(1, bound);
      select->bind_u64(2, chunk);
      while ((rc = select->step()) == SQLITE_ROW) ids.emplace_back(select->text(0));
    }
    bool ok = rc == SQLITE_DONE;
    std::size_t gone = 0;
    for (const std::string& id : ids) {
      if (!ok) break;
      for (sqlite::Stmt* st : {&*del_result, &*del_command}) {
        sqlite::StmtReset done(*st);
        st->bind_text(1, id);
        rc = st->step();
        if (rc != SQLITE_DONE) ok = false;
      }
      gone += static_cast<std::size_t>(sqlite3_changes(db_.get()));
    }
    if (ok) {
      rc = commit_.step();
      commit_.reset();
      ok = rc == SQLITE_DONE;
    }
    if (!ok) {
      read_failed("prune", sqlite::error_of(db_.get(), rc, "deleting old commands"));
      if (!sqlite3_get_autocommit(db_.get())) {
        rollback_.step();
        rollback_.reset();
      }
      break;
    }
    deleted += gone;
    if (ids.size() < chunk) break;
  }
  return deleted;
}

std::size_t SqliteStore::prune(const RetentionPolicy& policy, std::uint64_t now_ms) {
  std::size_t total = 0;
  try {
    const std::size_t budget = options_.prune_max_per_call;
    if (policy.max_age_ms > 0 && now_ms > policy.max_age_ms) {
      total += prune_commands(
          "SELECT cmd_id FROM commands WHERE cmd_id < ?1 AND state >= 4 ORDER BY cmd_id LIMIT ?2",
          key_of_ms(now_ms - policy.max_age_ms), budget);
    }
    if (total < budget) {
      // A walk of the table's pages (about 45 ms for a million commands): prune
      // runs from a timer, not per command.
      auto count = sqlite::query_int(db_.get(), "SELECT count(*) FROM commands");
      if (!count) {
        read_failed("prune", count.error());
      } else if (static_cast<std::uint64_t>(*count) > policy.max_commands) {
        const std::uint64_t excess = static_cast<std::uint64_t>(*count) - policy.max_commands;
        total += prune_commands("SELECT cmd_id FROM commands WHERE state >= 4 ORDER BY cmd_id LIMIT ?2", {},
                                static_cast<std::size_t>(std::min<std::uint64_t>(excess, budget - total)));
      }
    }
    if (total < budget && policy.max_age_ms > 0 && now_ms > policy.max_age_ms) {
      auto select = sqlite::prepare(
          db_.get(), "SELECT job_id FROM jobs WHERE finished = 1 AND created_at < ?1 LIMIT ?2", false);
      auto del = sqlite::prepare(db_.get(), "DELETE FROM jobs WHERE job_id = ?1", false);
      if (!select || !del) {
        read_failed("prune", !select ? select.error() : del.error());
        return total;
      }
      while (total < budget) {
        const std::size_t chunk = std::min(options_.prune_chunk, budget - total);
        int rc = begin_.step();
        begin_.reset();
        if (rc != SQLITE_DONE) {
          read_failed("prune", sqlite::error_of(db_.get(), rc, "BEGIN"));
          break;
        }
        std::vector<std::string> ids;
        {
          sqlite::StmtReset done(*select);
          select->bind_u64(1, now_ms - policy.max_age_ms);
          select->bind_u64(2, chunk);
          while ((rc = select->step()) == SQLITE_ROW) ids.emplace_back(select->text(0));
        }
        bool ok = rc == SQLITE_DONE;
        std::size_t gone = 0;
        for (const std::string& id : ids) {
          if (!ok) break;
          sqlite::StmtReset done(*del);
          del->bind_text(1, id);
          ok = del->step() == SQLITE_DONE;
          gone += static_cast<std::size_t>(sqlite3_changes(db_.get()));
        }
        if (ok) {
          rc = commit_.step();
          commit_.reset();
          ok = rc == SQLITE_DONE;
        }
        if (!ok) {
          read_failed("prune", sqlite::error_of(db_.get(), rc, "deleting old jobs"));
          if (!sqlite3_get_autocommit(db_.get())) {
            rollback_.step();
            rollback_.reset();
          }
          break;
        }
        total += gone;
        if (ids.size() < chunk) break;
      }
    }
  } catch (const std::exception& e) {
    read_failed("prune", make_error(Errc::io, e.what()));
    if (db_ && !sqlite3_get_autocommit(db_.get())) {
      rollback_.step();
      rollback_.reset();
    }
  }
  return total;
}

SqliteStats SqliteStore::stats() const noexcept {
  SqliteStats s = stats_;
  if (checkpointer_) s.checkpoint = checkpointer_->stats();
  return s;
}

void SqliteStore::checkpoint_now() {
  if (checkpointer_) checkpointer_->run_once();
}

}  // namespace fleetlink::broker
