#pragma once
// The default command store: one SQLite file, <state_dir>/commands.db.
//
// Durability. The file is in WAL mode with synchronous=NORMAL: commit() writes
// the turn's rows to the WAL (a write(2), no fsync) and returns; the fsyncs
// happen on the checkpoint thread (store/wal_checkpointer.hpp), about once a
// second, never on the event loop.
//  - A crash of the broker (kill -9, abort, OOM kill) loses nothing commit()
//    returned for: the WAL is in the kernel's page cache and the next open
//    replays it. What was put but not yet committed is lost, which is why the
//    broker commits before it answers 202 or writes a command to a rig.
//  - A power cut or kernel crash can lose the commits since the last
//    checkpoint's fsync of the WAL: about the last second (the checkpoint
//    interval plus the time the fsync takes). What survives is a prefix of the
//    commits, each whole (the WAL's frames are checksummed and chained): never
//    a torn transaction, never a corrupt file, provided the disk honours
//    flushes. A command recorded in that last second may be gone after the
//    reboot although it was answered 202, and so may its later steps and its
//    result. If it had reached its rig and is posted again under its own
//    cmd_id, the rig's dedup answers instead of running it; posted again under
//    an idempotency key only, it is a new command to the rig.
//
// Sharing. Normal locking, so two brokers may open one state directory at once
// (one draining while the other takes its rigs; on one host: WAL needs shared
// memory, so not over NFS). Writers take turns: commit() waits up to
// busy_timeout for the other's write lock and then answers an Error, keeping
// its writes buffered for the next commit(). put_command never moves a command
// back to an earlier state nor changes a finished one, whichever broker writes
// last (see combine() in store/store_rows.hpp for the exact rules).
// foreign_writes() is `PRAGMA data_version` (about 2 us): it changes when
// another connection committed, never for this store's own commits. It also
// changes, once, when the checkpoint thread cuts an oversized WAL to zero
// (SQLite reports the WAL's restart to every connection): a needless re-read,
// never a missed write. (SQLITE_FCNTL_DATA_VERSION costs 0.04 us but counts
// this store's own commits and sees others' only after a read: not usable.)
//
// Schema (version 1, store/sqlite_schema.cpp):
//   commands  cmd_id (PK, UUIDv7 text: key order is creation order), rig_id,
//             state (code, store/record_codec.hpp), job_id, idempotency_key,
//             enqueued_at, attempts, sent_at, acked_at, running_at,
//             finished_at, body (the rest, a versioned blob) -- WITHOUT ROWID
//   results   cmd_id (PK), body: RESULT, NACK and the streamed output's tail,
//             written once, when the command ends (put_command with_result)
//   rigs      rig_id (PK), first_seen, last_seen, body
//   jobs      job_id (PK), created_at, finished, body (the control plane's JSON)
// cmd_ids are expected to be UUIDv7 (the broker's, or a client's): since= and
// prune's age are key ranges on their leading 48 bits (Unix ms). Another kind
// of id is stored and found all the same, only sorted and aged by its bytes.
//
// Reads see this store's pending writes over what is committed (as commit()
// would leave it): a command put this turn is found before the commit. They
// answer before they return; a read that fails is logged and answers empty.
// Nothing throws out of any method (the callbacks' own exceptions are theirs).
//
// Cost (fleetlink-store-bench on the 2-core development VM, medians): a row
// written in commits of 50-100 rows costs 3.6-4.0 us of the loop's time (0.25
// of it put_command, the rest commit()), plus about 0.5 us on the checkpoint
// thread. Most of it is SQLite's own (the same statements alone cost about
// 2.7 us), a fifth the WAL's write(2)s; commit() never fsyncs (strace: the
// loop's fdatasync count does not grow with commits). A commit of one row:
// about 18 us. Rows spread over more pages than a commit has rows (20,000 open
// commands answered in random order, 100 per commit) cost about a page each:
// about 8 us per step and 25 us per ending (a page each of commands, results
// and commands_open).
//
// Single-threaded like the interface, apart from the checkpoint thread, which
// has its own connection.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "store/command_store.hpp"
#include "store/sqlite_db.hpp"
#include "store/store_rows.hpp"
#include "store/wal_checkpointer.hpp"

namespace fleetlink::broker {

struct SqliteOptions {
  // How long commit() (and a read) waits for another broker's lock before it
  // answers an Error. The loop is blocked meanwhile: keep it short.
  std::chrono::milliseconds busy_timeout{2000};
  std::chrono::milliseconds checkpoint_interval{1000};
  // A WAL larger than this is cut back to zero (when no reader is in it), and
  // cut back to this size whenever SQLite restarts it.
  std::uint64_t wal_truncate_bytes = 64ULL << 20;
  // prune(): rows deleted per transaction (the write lock is held that long:
  // about a millisecond per 500), and at most this many per call (the rest
  // goes at the next call).
  std::size_t prune_chunk = 500;
  std::size_t prune_max_per_call = 20'000;
  // Page cache of the connection, KiB.
  std::size_t cache_kib = 8192;
  // Reads of the database file through mmap instead of read(2), up to this
  // many bytes of it (0: none).
  std::uint64_t mmap_bytes = 0;
};

// Upper bounds (seconds) of the commit-duration histogram.
inline constexpr double kCommitBuckets[] = {0.00001, 0.00002, 0.00003, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1};

struct SqliteStats {
  std::uint64_t commits = 0;
  std::uint64_t commit_buckets[std::size(kCommitBuckets) + 1] = {};  // +Inf last
  double commit_seconds = 0;                                          // their sum
  std::uint64_t commit_failures = 0;   // busy or I/O: the writes stayed pending
  std::uint64_t rows_written = 0;      // command rows, after coalescing
  std::uint64_t key_conflicts = 0;     // idempotency keys another command already held
  std::uint64_t read_failures = 0;
  std::uint64_t unreadable_rows = 0;   // rows whose blobs could not be decoded
  CheckpointStats checkpoint;
};

class SqliteStore final : public CommandStore {
 public:
  // Creates `state_dir` (0750) and commands.db in it (0640) if missing, checks
  // the file (an SQLite database, PRAGMA quick_check, a schema version this
  // code knows), migrates an older schema, starts the checkpoint thread. The
  // Error's detail is a sentence naming the path.
  static Expected<std::unique_ptr<SqliteStore>> open(const std::string& state_dir, SqliteOptions options = {});
  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  std::string_view name() const noexcept override { return "sqlite"; }
  bool durable() const noexcept override { return true; }
  // False after a commit() failed, until one succeeds.
  bool up() const noexcept override { return up_; }

  Expected<StoreSnapshot> load() override;

  void put_command(const CommandView& v, bool with_result) override;
  void put_rig(const RigRecord& r) override;
  void put_job(const JobRecord& j) override;
  Expected<void> commit() override;
  bool pending() const noexcept override { return !pending_.empty() || buffer_failed_; }

  void find(std::string_view cmd_id, CommandCallback done) override;
  void find_by_key(std::string_view idempotency_key, CommandCallback done) override;
  void open_commands_of(std::string_view rig_id, CommandsCallback done) override;
  void list_commands(const CommandQuery& q, CommandsCallback done) override;
  void find_job(std::string_view job_id, JobCallback done) override;
  void list_jobs(const JobQuery& q, JobsCallback done) override;

  std::uint64_t foreign_writes() override;
  std::size_t prune(const RetentionPolicy& policy, std::uint64_t now_ms) override;

  const std::string& path() const noexcept { return path_; }
  SqliteStats stats() const noexcept;
  StoreCounters counters() const noexcept override;
  // One checkpoint round now, on this thread (tests, benchmarks).
  void checkpoint_now();

  // The most rows one upsert statement carries (measured: 32 rows per
  // statement cost about 3/4 of one statement per row).
  static constexpr std::size_t kRowsPerStatement = 32;
  // list_commands / list_jobs answer at most this many, whatever the limit.
  static constexpr std::size_t kMaxListLimit = 10'000;

 private:
  SqliteStore(std::string path, SqliteOptions options);
  Expected<void> init();
  Expected<void> write_pending();
  void count_commit(std::chrono::steady_clock::time_point began) noexcept;
  Expected<void> write_commands(const store_rows::CommandRow* const* rows, std::size_t n, bool ending);
  Expected<void> write_command_alone(const store_rows::CommandRow& row, bool ending);
  Expected<void> write_results(const store_rows::CommandRow* const* rows, std::size_t n);
  Expected<void> write_rig(const store_rows::RigRow& row);
  Expected<void> write_job(const JobRecord& job);
  sqlite::Stmt* upsert_statement(std::size_t rows, bool ending);
  sqlite::Stmt* results_statement(std::size_t rows);
  void bind_command(sqlite::Stmt& st, int first, const store_rows::CommandRow& row, bool drop_key);

  // Reading: rows of the file, with the pending writes laid over them.
  Expected<void> read_commands(sqlite::Stmt& st, std::vector<store_rows::CommandRow>& out);
  void overlay(std::vector<store_rows::CommandRow>& rows, const CommandQuery* filter, bool open_only,
               std::string_view rig_id);
  std::vector<CommandView> to_views(const std::vector<store_rows::CommandRow>& rows, const char* what);
  std::optional<CommandView> find_row(std::string_view cmd_id);
  Expected<std::vector<JobRecord>> read_jobs(sqlite::Stmt& st);
  sqlite::Stmt* list_statement(unsigned mask);
  sqlite::Stmt* list_jobs_statement(unsigned mask);
  void read_failed(const char* what, const Error& e);
  std::size_t prune_commands(std::string_view sql_select, const std::string& bound, std::size_t want);

  std::string path_;
  SqliteOptions options_;
  sqlite::BusyWait busy_;
  sqlite::Db db_;
  store_rows::PendingWrites pending_;
  bool buffer_failed_ = false;  // a put could not be buffered (out of memory): the next commit says so
  bool up_ = true;

  sqlite::Stmt begin_, commit_, rollback_;
  // By rows per statement: commands going to an open state, commands ending,
  // results. Prepared when first needed.
  sqlite::Stmt upsert_opening_[kRowsPerStatement + 1];
  sqlite::Stmt upsert_ending_[kRowsPerStatement + 1];
  sqlite::Stmt insert_results_[kRowsPerStatement + 1];
  std::vector<const store_rows::CommandRow*> opening_, ending_, results_;  // commit()'s, kept for their capacity
  sqlite::Stmt upsert_rig_, upsert_job_;
  sqlite::Stmt find_, find_key_, open_of_, data_version_;
  sqlite::Stmt load_open_, load_rigs_, load_jobs_, find_job_;
  std::map<unsigned, sqlite::Stmt> list_, list_jobs_;

  SqliteStats stats_;
  std::unique_ptr<WalCheckpointer> checkpointer_;
};

}  // namespace fleetlink::broker
