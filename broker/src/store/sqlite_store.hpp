#pragma once
// The default command store: one SQLite file, <state_dir>/commands.db.
//
// Threads. The event loop puts writes into a buffer (put_*) and hands it over
// with submit(), which only queues it (about a microsecond); the writer thread
// (store/sqlite_writer.hpp) owns the one writing connection and commits every
// queued batch in one transaction, batch by batch, then reports each batch's
// outcome (take_outcomes(), durable_through(), the wakeup). commit() is
// submit() and a wait for it. Reads stay on the loop, on a connection of their
// own (WAL: readers never wait for the writer), and see the file with every
// write not yet in it laid over it: the batches in flight, oldest first, then
// the loop's buffer, combined as the upserts will combine them. The checkpoint
// thread (store/wal_checkpointer.hpp) has a third connection.
//
// Durability. The file is in WAL mode with synchronous=NORMAL: a transaction
// writes its batches to the WAL (a write(2), no fsync); the fsyncs happen on
// the checkpoint thread, about once a second.
//  - A crash of the broker (kill -9, abort, OOM kill) loses nothing that was
//    reported durable: the WAL is in the kernel's page cache and the next open
//    replays it. What was submitted and not yet durable, and what was put and
//    not submitted, is lost, which is why the broker promises nothing about a
//    command (a 202, a write to its rig) before its batch is durable.
//  - A power cut or kernel crash can lose the transactions since the last
//    checkpoint's fsync of the WAL: about the last second (the checkpoint
//    interval plus the time the fsync takes). What survives is a prefix of the
//    transactions, each whole (the WAL's frames are checksummed and chained):
//    never a torn transaction, never a corrupt file, provided the disk honours
//    flushes. A command recorded in that last second may be gone after the
//    reboot although it was answered 202, and so may its later steps and its
//    result. If it had reached its rig and is posted again under its own
//    cmd_id, the rig's dedup answers instead of running it; posted again under
//    an idempotency key only, it is a new command to the rig.
//
// Failures. A transaction that fails (another broker holds the write lock
// longer than busy_timeout, an I/O error, a full disk) is rolled back and its
// batches are tried again, first, after 20 ms doubling to 1 s: nothing
// submitted is dropped while the store is open. Each batch's outcome is
// reported once (ok, or its first failure; a later success shows in
// durable_through()); up() is false from the first failure until a
// transaction succeeds; one log line when a streak of failures begins and one
// when it ends. backlog() says how much waits. The destructor writes what was
// submitted (and put) for at most drain_timeout, and says what it could not.
//
// Sharing. Normal locking, so two brokers may open one state directory at once
// (one draining while the other takes its rigs; on one host: WAL needs shared
// memory, so not over NFS). Writers take turns: the writer thread waits up to
// busy_timeout for the other's write lock, then fails and tries again.
// put_command never moves a command back to an earlier state nor changes a
// finished one, whichever broker writes last (see combine() in
// store/store_rows.hpp for the exact rules). foreign_writes() is `PRAGMA
// data_version` of the writer's connection, which changes when another
// connection committed and never for its own transactions (the read
// connection's would change with this store's own commits): the loop samples
// the read connection's (about 2 us); only when that changed does it sample
// the writer's, and if the writer is in a transaction just then, it answers
// the value the writer sampled after its last one and looks again next time.
// It also changes, once, when the checkpoint thread cuts an oversized WAL to
// zero (SQLite reports the WAL's restart to every connection): a needless
// re-read, never a missed write.
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
// Reads answer before they return; a read that fails is logged and answers
// empty. Nothing throws out of any method (the callbacks' own exceptions are
// theirs).
//
// Cost: see tests/bench/store/store_bench.cpp and docs/PERFORMANCE.md for the
// figures (the loop's time per row of put+submit, the writer's rows per
// second, reads).
//
// Called from the event loop only, like the interface.
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "store/command_store.hpp"
#include "store/sqlite_db.hpp"
#include "store/sqlite_row_writer.hpp"
#include "store/sqlite_writer.hpp"
#include "store/store_rows.hpp"
#include "store/wal_checkpointer.hpp"

namespace fleetlink::broker {

struct SqliteOptions {
  // How long the writer thread waits for another broker's write lock before
  // its transaction fails (and is tried again). Off the loop: it may be long.
  std::chrono::milliseconds busy_timeout{5000};
  // How long a read, on the loop, waits for a lock (in WAL mode only while
  // another process recovers the WAL, rarely). Keep it short.
  std::chrono::milliseconds read_busy_timeout{100};
  // A failed transaction is tried again after retry_min, doubling to retry_max.
  std::chrono::milliseconds retry_min{20};
  std::chrono::milliseconds retry_max{1000};
  // The destructor goes on writing what was submitted for at most this long.
  std::chrono::milliseconds drain_timeout{5000};
  // Rows per transaction, about (a backlog goes in pieces).
  std::size_t max_group_rows = 10'000;
  // A batch of at most this many rows is committed on the loop itself when
  // the writer thread is idle (SqliteWriter::commit_here): one command's
  // creation and the step before it, as a client sending one command at a
  // time makes them. Larger batches, and every batch while the thread is
  // busy, go to the thread and are grouped there. 0: never on the loop.
  std::size_t commit_here_max_rows = 4;
  // A light interval's steps go in pieces of this many rows
  // (interval_slice_rows(), submit_piece()), each committed on the loop the
  // same way while the thread is idle. 0: an interval goes whole, to the thread.
  std::size_t interval_slice_rows = 8;
  // The writer thread's scheduling (store/sqlite_writer.hpp).
  int writer_nice = 0;
  bool writer_sched_batch = true;
  std::chrono::milliseconds checkpoint_interval{1000};
  // A WAL larger than this is cut back to zero (when no reader is in it), and
  // cut back to this size whenever SQLite restarts it.
  std::uint64_t wal_truncate_bytes = 64ULL << 20;
  // prune(): rows deleted per transaction (the write lock is held that long:
  // about a millisecond per 500), and at most this many per call (the rest
  // goes at the next call).
  std::size_t prune_chunk = 500;
  std::size_t prune_max_per_call = 20'000;
  // Page cache of each connection (the reader's and the writer's), KiB.
  std::size_t cache_kib = 8192;
  // Reads of the database file through mmap instead of read(2), up to this
  // many bytes of it (0: none).
  std::uint64_t mmap_bytes = 0;
};

struct SqliteStats {
  std::uint64_t commits = 0;  // the writer's transactions (each of one or more batches)
  std::uint64_t batches = 0;  // batches made durable
  // How long the transactions took (on the writer thread).
  std::uint64_t commit_buckets[kCommitBucketCount] = {};  // +Inf last
  double commit_seconds = 0;                               // their sum
  std::uint64_t commit_failures = 0;   // transactions that failed (busy or I/O): their batches were tried again
  std::uint64_t rows_written = 0;      // command rows, after coalescing within each batch
  std::uint64_t key_conflicts = 0;     // idempotency keys another command already held
  std::uint64_t read_failures = 0;
  std::uint64_t unreadable_rows = 0;   // rows whose blobs could not be decoded
  std::uint64_t prune_failures = 0;
  std::uint64_t writer_cpu_ns = 0;     // the writer thread's CPU time
  std::uint64_t commits_on_loop = 0;   // of `commits`: small batches committed on the loop (commit_here_max_rows)
  CheckpointStats checkpoint;
};

class SqliteStore final : public CommandStore {
 public:
  // Creates `state_dir` (0750) and commands.db in it (0640) if missing, checks
  // the file (an SQLite database, PRAGMA quick_check, a schema version this
  // code knows), migrates an older schema, then starts the writer and the
  // checkpoint threads. The Error's detail is a sentence naming the path.
  static Expected<std::unique_ptr<SqliteStore>> open(const std::string& state_dir, SqliteOptions options = {});
  // Writes what was put and submitted (for at most drain_timeout), then stops
  // the threads.
  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  std::string_view name() const noexcept override { return "sqlite"; }
  bool durable() const noexcept override { return true; }
  // False from a failed transaction until one succeeds.
  bool up() const noexcept override;

  Expected<StoreSnapshot> load() override;

  void put_command(const CommandView& v, bool with_result) override;
  void put_rig(const RigRecord& r) override;
  void put_job(const JobRecord& j) override;
  Expected<void> commit() override;
  bool pending() const noexcept override { return !current_->writes.empty() || current_->lost_writes; }

  std::uint64_t submit() override;
  std::uint64_t durable_through() const noexcept override;
  std::vector<BatchOutcome> take_outcomes() override;
  void set_wakeup(std::function<void()> wake) override;
  std::size_t backlog() const noexcept override;
  std::size_t interval_slice_rows() const noexcept override { return options_.interval_slice_rows; }
  std::uint64_t submit_piece() override { return hand_over(options_.interval_slice_rows); }

  void find(std::string_view cmd_id, CommandCallback done) override;
  void find_by_key(std::string_view idempotency_key, CommandCallback done) override;
  void open_commands_of(std::string_view rig_id, CommandsCallback done) override;
  void list_commands(const CommandQuery& q, CommandsCallback done) override;
  void find_job(std::string_view job_id, JobCallback done) override;
  void list_jobs(const JobQuery& q, JobsCallback done) override;

  std::uint64_t foreign_writes() override;
  // Queues the deletes for the writer thread (after what was submitted) and
  // returns how many rows the prunes finished since the last call deleted: the
  // count of a prune comes with the next call.
  std::size_t prune(const RetentionPolicy& policy, std::uint64_t now_ms) override;
  // The same, waiting for this prune (tests, tools).
  std::size_t prune_now(const RetentionPolicy& policy, std::uint64_t now_ms);

  const std::string& path() const noexcept { return path_; }
  SqliteStats stats() const noexcept;
  StoreCounters counters() const noexcept override;
  // One checkpoint round now, on this thread (tests, benchmarks).
  void checkpoint_now();

  static constexpr std::size_t kRowsPerStatement = SqliteRowWriter::kRowsPerStatement;
  // list_commands / list_jobs answer at most this many, whatever the limit.
  static constexpr std::size_t kMaxListLimit = 10'000;

 private:
  SqliteStore(std::string path, SqliteOptions options);
  Expected<void> init();
  // Forgets the batches in flight that are durable now (their buffers become
  // spares for the next turns').
  void retire() noexcept;
  // submit(): the buffer becomes the next batch, committed on the loop if it
  // has at most `here_max_rows` rows and the writer thread is idle.
  std::uint64_t hand_over(std::size_t here_max_rows);
  // Every buffer of writes not yet in the file, oldest first: the batches in
  // flight, then the loop's.
  template <class F>
  void each_unwritten(F&& f) const {
    for (const auto& b : in_flight_) f(b->writes);
    f(current_->writes);
  }
  std::size_t unwritten_commands() const noexcept;

  // Reading: rows of the file, with the unwritten writes laid over them.
  Expected<void> read_commands(sqlite::Stmt& st, std::vector<store_rows::CommandRow>& out);
  void overlay(std::vector<store_rows::CommandRow>& rows, const CommandQuery* filter, bool open_only,
               std::string_view rig_id);
  std::vector<CommandView> to_views(const std::vector<store_rows::CommandRow>& rows, const char* what);
  std::optional<CommandView> find_row(std::string_view cmd_id);
  Expected<std::vector<JobRecord>> read_jobs(sqlite::Stmt& st);
  void overlay_jobs(std::vector<JobRecord>& jobs, bool read_missing);
  sqlite::Stmt* list_statement(unsigned mask);
  sqlite::Stmt* list_jobs_statement(unsigned mask);
  void read_failed(const char* what, const Error& e);
  void buffer_failed(const char* what, const std::string& id, const std::exception& e) noexcept;

  std::string path_;
  SqliteOptions options_;
  // Declared first, so closed last: the last connection to close checkpoints
  // the WAL into the file and removes it, and that is the writing one's job.
  std::unique_ptr<SqliteWriter> writer_;
  std::unique_ptr<WalCheckpointer> checkpointer_;

  // The batches.
  std::shared_ptr<WriteBatch> current_;                // the loop's buffer, until submit()
  std::deque<std::shared_ptr<WriteBatch>> in_flight_;  // submitted, not yet seen durable, oldest first
  std::vector<std::shared_ptr<WriteBatch>> spare_;     // durable ones kept for their buffers
  static constexpr std::size_t kMaxSpares = 4;
  std::uint64_t last_batch_ = 0;      // the number of the last one submitted
  std::uint64_t last_ticket_ = 0;     // its ticket for SqliteWriter::wait()
  std::uint64_t submitted_rows_ = 0;  // every batch's rows, for backlog()

  // The read connection (query_only once the schema is current) and its statements.
  sqlite::BusyWait busy_;
  sqlite::Db db_;
  sqlite::Stmt find_, find_key_, open_of_, data_version_;
  sqlite::Stmt load_open_, load_rigs_, load_jobs_, find_job_;
  std::map<unsigned, sqlite::Stmt> list_, list_jobs_;
  std::uint64_t read_version_seen_ = 0;  // the read connection's data_version when the writer's was last sampled

  std::uint64_t read_failures_ = 0, unreadable_rows_ = 0;
};

}  // namespace fleetlink::broker
