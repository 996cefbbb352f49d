#include "store/sqlite_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
using store_rows::CommandRow;
using store_rows::matches;
using store_rows::key_of_ms;
using store_rows::PendingWrites;
using store_rows::RigRow;

namespace {

// The columns every command read selects, in CommandRow order; the 13th is the
// results row's body (NULL when there is none or the query does not join it).
constexpr const char* kCommandColumns =
    "c.cmd_id, c.rig_id, c.state, c.job_id, c.idempotency_key, c.enqueued_at, c.attempts, "
    "c.sent_at, c.acked_at, c.running_at, c.finished_at, c.body";

constexpr const char* kJobColumns = "job_id, created_at, finished, body";

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
    : path_(std::move(path)),
      options_(options),
      current_(std::make_shared<WriteBatch>()),
      busy_(options.read_busy_timeout) {
  spare_.reserve(kMaxSpares);
}

SqliteStore::~SqliteStore() {
  if (writer_) {
    // What was put is written too: nothing is promised about it, but a store
    // closing in order keeps what it can.
    if (pending()) submit();
    writer_->stop(options_.drain_timeout);
  }
  // Then the checkpointer's connection and the reader's close, and the
  // writer's last (the member order).
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
  const std::string settings = "PRAGMA temp_store = MEMORY; PRAGMA cache_size = -" +
                               std::to_string(options_.cache_kib) +
                               "; PRAGMA mmap_size = " + std::to_string(options_.mmap_bytes);
  if (auto r = sqlite::exec(db_.get(), settings.c_str()); !r)
    return make_error(Errc::io, "cannot configure " + path_ + ": " + r.error().detail);
  // The schema is made or migrated here, at open, before the writer starts:
  // the only write this connection does.
  if (auto r = sqlite_schema::migrate(db_.get(), path_, sqlite_schema::migrations()); !r) return r;
  if (auto r = sqlite::exec(db_.get(), "PRAGMA query_only = 1"); !r)
    return make_error(Errc::io, "cannot configure " + path_ + ": " + r.error().detail);

  auto prep = [&](sqlite::Stmt& into, const std::string& sql) -> Expected<void> {
    auto st = sqlite::prepare(db_.get(), sql);
    if (!st) return make_error(Errc::io, "cannot use " + path_ + ": " + st.error().detail);
    into = std::move(*st);
    return {};
  };
  const std::string cols = kCommandColumns;
  const std::pair<sqlite::Stmt*, std::string> statements[] = {
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
  {
    sqlite::StmtReset done(data_version_);
    if (data_version_.step() == SQLITE_ROW) read_version_seen_ = data_version_.u64(0);
  }

  WriterOptions w;
  w.busy_timeout = options_.busy_timeout;
  w.retry_min = options_.retry_min;
  w.retry_max = std::max(options_.retry_max, options_.retry_min);
  w.max_group_rows = options_.max_group_rows;
  w.prune_chunk = options_.prune_chunk;
  w.prune_max_per_call = options_.prune_max_per_call;
  w.cache_kib = options_.cache_kib;
  w.mmap_bytes = options_.mmap_bytes;
  w.wal_truncate_bytes = options_.wal_truncate_bytes;
  w.nice = options_.writer_nice;
  w.sched_batch = options_.writer_sched_batch;
  auto writer = SqliteWriter::start(path_, w);
  if (!writer) return make_error(Errc::io, "cannot start writing to " + path_ + ": " + writer.error().detail);
  writer_ = std::move(*writer);

  auto cp = WalCheckpointer::start(path_, {options_.checkpoint_interval, options_.wal_truncate_bytes});
  if (!cp) return make_error(Errc::io, "cannot start checkpoints of " + path_ + ": " + cp.error().detail);
  checkpointer_ = std::move(*cp);
  return {};
}

// ---- writes ----

void SqliteStore::buffer_failed(const char* what, const std::string& id, const std::exception& e) noexcept {
  current_->lost_writes = true;
  FL_ERROR("store: %s %s could not be buffered: %s", what, id.c_str(), e.what());
}

void SqliteStore::put_command(const CommandView& v, bool with_result) {
  try {
    current_->writes.put(v, with_result);
  } catch (const std::exception& e) {
    buffer_failed("command", v.cmd_id, e);
  }
}

void SqliteStore::put_rig(const RigRecord& r) {
  try {
    current_->writes.put(r);
  } catch (const std::exception& e) {
    buffer_failed("rig", r.rig_id, e);
  }
}

void SqliteStore::put_job(const JobRecord& j) {
  try {
    current_->writes.put(j);
  } catch (const std::exception& e) {
    buffer_failed("job", j.job_id, e);
  }
}

void SqliteStore::retire() noexcept {
  const std::uint64_t through = writer_->durable_through();
  while (!in_flight_.empty() && in_flight_.front()->number <= through) {
    std::shared_ptr<WriteBatch> b = std::move(in_flight_.front());
    in_flight_.pop_front();
    if (spare_.size() < kMaxSpares) {  // capacity reserved: no allocation
      b->writes.clear();
      b->lost_writes = false;
      b->rows = 0;
      spare_.push_back(std::move(b));
    }
  }
}

std::uint64_t SqliteStore::submit() { return hand_over(options_.commit_here_max_rows); }

std::uint64_t SqliteStore::hand_over(std::size_t here_max_rows) {
  retire();
  if (!pending()) return last_batch_;
  try {
    std::shared_ptr<WriteBatch> next;
    if (!spare_.empty()) {
      next = std::move(spare_.back());
      spare_.pop_back();
    } else {
      next = std::make_shared<WriteBatch>();
    }
    current_->number = last_batch_ + 1;
    current_->rows = current_->writes.row_count();
    try {
      in_flight_.push_back(current_);
      try {
        if (current_->rows > here_max_rows || !writer_->commit_here(current_))
          last_ticket_ = writer_->enqueue(current_);
      } catch (...) {
        in_flight_.pop_back();
        throw;
      }
    } catch (...) {
      if (spare_.size() < kMaxSpares) spare_.push_back(std::move(next));
      throw;
    }
    ++last_batch_;
    submitted_rows_ += current_->rows;
    current_ = std::move(next);
  } catch (const std::exception& e) {
    // Nothing is lost: the writes stay in the buffer for the next submit().
    FL_ERROR("store: the writes could not be handed to the writer thread: %s", e.what());
  }
  return last_batch_;
}

Expected<void> SqliteStore::commit() {
  const bool lost = current_->lost_writes;
  std::uint64_t ticket = 0;
  if (pending()) {
    const std::uint64_t before = last_batch_;
    submit();
    if (last_batch_ == before)
      return make_error(Errc::io, "cannot commit to " + path_ + ": out of memory handing the writes over; they stay pending");
    ticket = last_ticket_;
  } else {
    ticket = writer_->ticket();
  }
  Expected<void> r = writer_->wait(last_batch_, ticket);
  retire();
  if (!r) return r;
  if (lost) return make_error(Errc::io, "a write could not be buffered (out of memory) and is lost; see the log");
  return {};
}

std::uint64_t SqliteStore::durable_through() const noexcept { return writer_->durable_through(); }

std::vector<BatchOutcome> SqliteStore::take_outcomes() {
  retire();
  try {
    return writer_->take_outcomes();
  } catch (const std::exception& e) {
    FL_ERROR("store: outcomes could not be taken: %s", e.what());
    return {};
  }
}

void SqliteStore::set_wakeup(std::function<void()> wake) { writer_->set_wakeup(std::move(wake)); }

std::size_t SqliteStore::backlog() const noexcept {
  return static_cast<std::size_t>(submitted_rows_ - std::min(submitted_rows_, writer_->rows_durable()));
}

bool SqliteStore::up() const noexcept { return writer_->up(); }

StoreCounters SqliteStore::counters() const noexcept {
  const WriterStats w = writer_->stats();
  StoreCounters c{w.commits, w.commit_failures, w.rows_written, w.commits_here, {}, {}, w.commit_seconds};
  try {
    c.commit_bounds.assign(std::begin(kCommitBuckets), std::end(kCommitBuckets));
    c.commit_buckets.assign(std::begin(w.commit_buckets), std::end(w.commit_buckets));
  } catch (...) {  // out of memory: the histogram is left out
    c.commit_bounds.clear();
    c.commit_buckets.clear();
  }
  return c;
}

SqliteStats SqliteStore::stats() const noexcept {
  const WriterStats w = writer_->stats();
  SqliteStats s;
  s.commits = w.commits;
  s.batches = w.batches;
  std::copy(std::begin(w.commit_buckets), std::end(w.commit_buckets), std::begin(s.commit_buckets));
  s.commit_seconds = w.commit_seconds;
  s.commit_failures = w.commit_failures;
  s.rows_written = w.rows_written;
  s.key_conflicts = w.key_conflicts;
  s.read_failures = read_failures_;
  s.unreadable_rows = unreadable_rows_;
  s.prune_failures = w.prune_failures;
  s.writer_cpu_ns = w.cpu_ns;
  s.commits_on_loop = w.commits_here;
  if (checkpointer_) s.checkpoint = checkpointer_->stats();
  return s;
}

// ---- reads ----

void SqliteStore::read_failed(const char* what, const Error& e) {
  ++read_failures_;
  FL_WARN("store: %s failed: %s", what, e.detail.c_str());
}

std::size_t SqliteStore::unwritten_commands() const noexcept {
  std::size_t n = 0;
  each_unwritten([&](const PendingWrites& w) { n += w.command_count(); });
  return n;
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

// Lays the writes not yet in the file over `rows` (read from it), oldest
// first, as the writer's upserts will: an unwritten row combines with its
// stored one (read here if the query did not return it, e.g. because it no
// longer matched), and rows that no longer match go. `filter`, or (open_only)
// the open commands of `rig_id` (all rigs if empty).
//
// A batch the writer committed after the file was read is laid over a row
// that has it already, which changes nothing: combine() keeps the later of two
// steps and the first of two results.
void SqliteStore::overlay(std::vector<CommandRow>& rows, const CommandQuery* filter, bool open_only,
                          std::string_view rig_id) {
  if (unwritten_commands() > 0) {
    // Into `rows` below `base`, into `added` from it. The keys are the rows'
    // own strings and the buffers', neither of which moves before the end.
    std::unordered_map<std::string_view, std::size_t> at;
    at.reserve(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) at.emplace(rows[i].cmd_id, i);
    const std::size_t base = rows.size();
    std::vector<CommandRow> added;
    each_unwritten([&](const PendingWrites& w) {
      const CommandRow* unwritten = w.commands();
      for (std::size_t i = 0, n = w.command_count(); i < n; ++i) {
        const CommandRow& p = unwritten[i];
        if (open_only && !rig_id.empty() && p.rig_id != rig_id) continue;
        if (auto it = at.find(p.cmd_id); it != at.end()) {
          store_rows::combine(it->second < base ? rows[it->second] : added[it->second - base], p);
          continue;
        }
        std::vector<CommandRow> stored;
        find_.bind_text(1, p.cmd_id);
        if (auto r = read_commands(find_, stored); !r) read_failed("reading an unwritten command's row", r.error());
        if (!stored.empty()) {
          store_rows::combine(stored.front(), p);
          added.push_back(std::move(stored.front()));
        } else {
          added.push_back(p);
        }
        at.emplace(p.cmd_id, base + added.size() - 1);
      }
    });
    // Only now: `at` points into the rows' strings.
    at.clear();
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
      ++unreadable_rows_;
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
  each_unwritten([&](const PendingWrites& w) {
    if (const CommandRow* p = w.find_command(cmd_id)) {
      if (rows.empty()) rows.push_back(*p);
      else store_rows::combine(rows.front(), *p);
    }
  });
  if (rows.empty()) return std::nullopt;
  auto v = store_rows::to_view(rows.front());
  if (!v) {
    ++unreadable_rows_;
    FL_WARN("store: find: %s", v.error().detail.c_str());
    return std::nullopt;
  }
  return std::move(*v);
}

void SqliteStore::find(std::string_view cmd_id, CommandCallback done) {
  std::optional<CommandView> out;
  try {
    retire();
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
    retire();
    if (!key.empty()) {
      std::vector<CommandRow> rows;
      find_key_.bind_text(1, key);
      if (auto r = read_commands(find_key_, rows); !r) {
        read_failed("find_by_key", r.error());
        rows.clear();
      }
      // The stored owner of the key wins over an unwritten claim, and an
      // earlier batch's claim over a later one's: the writer keeps the first
      // and stores the others without the key.
      if (!rows.empty()) {
        out = find_row(rows.front().cmd_id);
      } else {
        const CommandRow* claim = nullptr;
        each_unwritten([&](const PendingWrites& w) {
          if (!claim) claim = w.find_command_by_key(key);
        });
        if (claim) out = find_row(claim->cmd_id);
      }
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
    retire();
    std::vector<CommandRow> rows;
    open_of_.bind_text(1, rig_id);
    if (auto r = read_commands(open_of_, rows); !r) {
      read_failed("open_commands_of", r.error());
      rows.clear();
    }
    if (unwritten_commands() > 0) {
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
    retire();
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
        // An unwritten write can take a stored row out of the answer: read as
        // many more as there are unwritten rows, so the page is still full after.
        st->bind_u64(7, limit + unwritten_commands());
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

// The unwritten writes of jobs over `jobs` (read from the file), oldest first.
// A job not in `jobs` is read from the file (`read_missing`) or taken as the
// writes have it.
void SqliteStore::overlay_jobs(std::vector<JobRecord>& jobs, bool read_missing) {
  std::unordered_map<std::string_view, std::size_t> at;
  for (std::size_t i = 0; i < jobs.size(); ++i) at.emplace(jobs[i].job_id, i);
  const std::size_t base = jobs.size();
  std::vector<JobRecord> added;
  each_unwritten([&](const PendingWrites& w) {
    for (const JobRecord& p : w.jobs()) {
      if (auto it = at.find(p.job_id); it != at.end()) {
        store_rows::combine(it->second < base ? jobs[it->second] : added[it->second - base], p);
        continue;
      }
      std::optional<JobRecord> stored;
      if (read_missing) {
        find_job_.bind_text(1, p.job_id);
        auto got = read_jobs(find_job_);
        if (!got) read_failed("reading an unwritten job's row", got.error());
        else if (!got->empty()) stored = std::move(got->front());
      }
      if (stored) {
        store_rows::combine(*stored, p);
        added.push_back(std::move(*stored));
      } else {
        added.push_back(p);
      }
      at.emplace(p.job_id, base + added.size() - 1);
    }
  });
  at.clear();
  for (JobRecord& j : added) jobs.push_back(std::move(j));
}

void SqliteStore::find_job(std::string_view job_id, JobCallback done) {
  std::optional<JobRecord> out;
  try {
    retire();
    find_job_.bind_text(1, job_id);
    auto jobs = read_jobs(find_job_);
    if (!jobs) read_failed("find_job", jobs.error());
    else if (!jobs->empty()) out = std::move(jobs->front());
    each_unwritten([&](const PendingWrites& w) {
      if (const JobRecord* p = w.find_job(job_id)) {
        if (out) store_rows::combine(*out, *p);
        else out = *p;
      }
    });
  } catch (const std::exception& e) {
    read_failed("find_job", make_error(Errc::io, e.what()));
    out.reset();
  }
  done(std::move(out));
}

sqlite::Stmt* SqliteStore::list_jobs_statement(unsigned mask) {
  auto it = list_jobs_.find(mask);
  if (it != list_jobs_.end()) return &it->second;
  // ?1 finished, ?2 since, ?3 before, ?4 limit; mask 8: the bodies' heads only
  std::string sql = (mask & 8) ? std::string("SELECT job_id, created_at, finished,"
                                             " CASE WHEN instr(body, char(10)) > 0"
                                             " THEN substr(body, 1, instr(body, char(10)) - 1) ELSE body END"
                                             " FROM jobs WHERE 1")
                               : std::string("SELECT ") + kJobColumns + " FROM jobs WHERE 1";
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
    retire();
    const std::size_t limit = std::min(q.limit, kMaxListLimit);
    if (limit > 0) {
      const unsigned mask = (q.finished ? 1U : 0U) | (q.since_ms ? 2U : 0U) | (q.before_job_id.empty() ? 0U : 4U) |
                            (q.head_only ? 8U : 0U);
      if (sqlite::Stmt* st = list_jobs_statement(mask)) {
        std::size_t unwritten = 0;
        each_unwritten([&](const PendingWrites& w) { unwritten += w.jobs().size(); });
        st->bind_int(1, q.finished.value_or(false) ? 1 : 0);
        st->bind_u64(2, q.since_ms);
        st->bind_text(3, q.before_job_id);
        st->bind_u64(4, limit + unwritten);
        auto jobs = read_jobs(*st);
        if (!jobs) read_failed("list_jobs", jobs.error());
        else out = std::move(*jobs);
      }
      overlay_jobs(out, true);
      out.erase(std::remove_if(out.begin(), out.end(), [&](const JobRecord& j) { return !matches(j, q); }),
                out.end());
      std::sort(out.begin(), out.end(), [](const JobRecord& a, const JobRecord& b) { return a.job_id > b.job_id; });
      if (out.size() > limit) out.resize(limit);
      if (q.head_only) {  // the unwritten ones laid over the heads came whole
        for (JobRecord& j : out)
          if (const std::size_t nl = j.body.find('\n'); nl != std::string::npos) j.body.resize(nl);
      }
    }
  } catch (const std::exception& e) {
    read_failed("list_jobs", make_error(Errc::io, e.what()));
    out.clear();
  }
  done(std::move(out));
}

Expected<StoreSnapshot> SqliteStore::load() {
  try {
    retire();
    StoreSnapshot snap;
    std::vector<CommandRow> rows;
    if (auto r = read_commands(load_open_, rows); !r)
      return make_error(Errc::io, "cannot load the open commands of " + path_ + ": " + r.error().detail);
    if (unwritten_commands() > 0) {
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
      const std::size_t base = rigs.size();
      std::vector<RigRow> added;
      each_unwritten([&](const PendingWrites& w) {
        for (const RigRow& p : w.rigs()) {
          if (auto it = at.find(p.rig.rig_id); it != at.end()) {
            store_rows::combine(it->second < base ? rigs[it->second] : added[it->second - base], p);
            continue;
          }
          added.push_back(p);
          at.emplace(p.rig.rig_id, base + added.size() - 1);
        }
      });
      at.clear();
      for (RigRow& r : added) rigs.push_back(std::move(r));
    }
    snap.rigs.reserve(rigs.size());
    for (RigRow& r : rigs) snap.rigs.push_back(std::move(r.rig));
    std::sort(snap.rigs.begin(), snap.rigs.end(), [](const RigRecord& a, const RigRecord& b) { return a.rig_id < b.rig_id; });

    auto jobs = read_jobs(load_jobs_);
    if (!jobs) return make_error(Errc::io, "cannot load the open jobs of " + path_ + ": " + jobs.error().detail);
    snap.open_jobs = std::move(*jobs);
    // A job stored finished is not among the open ones read, and an unwritten
    // write cannot reopen it: read it so the combining knows.
    overlay_jobs(snap.open_jobs, true);
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
  std::uint64_t seen = 0;
  {
    sqlite::StmtReset done(data_version_);
    const int rc = data_version_.step();
    if (rc != SQLITE_ROW) {
      read_failed("foreign_writes", sqlite::error_of(db_.get(), rc, "PRAGMA data_version"));
      // A value no read answers: the caller takes it for a change and reads again.
      return ~0ULL;
    }
    seen = data_version_.u64(0);
  }
  // Unchanged: nobody committed, not even this store's writer, since the
  // writer's was last sampled. Changed: the writer's own says whether it was
  // someone else.
  if (seen != read_version_seen_ && writer_->sample_data_version()) read_version_seen_ = seen;
  return writer_->data_version();
}

std::size_t SqliteStore::prune(const RetentionPolicy& policy, std::uint64_t now_ms) {
  try {
    writer_->request_prune(policy, now_ms);
  } catch (const std::exception& e) {
    FL_WARN("store: prune of %s not queued: %s", path_.c_str(), e.what());
  }
  return writer_->take_pruned();
}

std::size_t SqliteStore::prune_now(const RetentionPolicy& policy, std::uint64_t now_ms) {
  try {
    writer_->wait_prune(writer_->request_prune(policy, now_ms));
  } catch (const std::exception& e) {
    FL_WARN("store: prune of %s not queued: %s", path_.c_str(), e.what());
  }
  return writer_->take_pruned();
}

void SqliteStore::checkpoint_now() {
  if (checkpointer_) checkpointer_->run_once();
}

}  // namespace fleetlink::broker
