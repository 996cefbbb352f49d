#pragma once
// The SQLite store's writer: a thread with the store's only writing connection,
// so no fsync, busy wait or large transaction ever holds the event loop
// (store/sqlite_store.hpp). The loop may borrow the connection for a small
// batch while the thread is idle (commit_here).
//
// The loop hands over batches (enqueue); the thread takes every batch queued
// when it looks and commits them in one transaction, batch by batch in order
// (group commit: one BEGIN, COMMIT and WAL append for many turns of the loop
// when the disk is slower than the loop). Then, per batch, an outcome; then
// durable_through() moves; then the wakeup is called.
//
// A transaction that fails (another broker holding the write lock longer than
// busy_timeout, an I/O error, a full disk) is rolled back and its batches stay
// at the head: they are tried again after a backoff (retry_min doubling to
// retry_max), with whatever was queued meanwhile, before anything later. Each
// batch's outcome is reported once: ok, or its first failure. up() is false
// from the first failure until a transaction succeeds; one warning per streak
// of failures, one line when it ends.
//
// Prunes run here too, between batches, one chunk's transaction at a time.
//
// The batches are shared with the loop (which reads them for its reads over
// what is not yet in the file) and never changed while queued: the writer
// drops its references before it publishes durable_through(), so once the loop
// sees a batch durable it is the batch's only owner and may reuse its buffers.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "store/command_store.hpp"
#include "store/sqlite_db.hpp"
#include "store/sqlite_pruner.hpp"
#include "store/sqlite_row_writer.hpp"
#include "store/store_rows.hpp"

namespace fleetlink::broker {

// Writes handed over together by one submit().
struct WriteBatch {
  std::uint64_t number = 0;
  store_rows::PendingWrites writes;
  bool lost_writes = false;  // a put could not be buffered (out of memory): the batch reports an Error
  std::size_t rows = 0;      // writes.row_count(), set when submitted
};

struct WriterOptions {
  std::chrono::milliseconds busy_timeout{5000};
  std::chrono::milliseconds retry_min{20};
  std::chrono::milliseconds retry_max{1000};
  // A transaction takes batches up to about this many rows (a backlog after a
  // stall goes in pieces, each holding the write lock a bounded time).
  std::size_t max_group_rows = 10'000;
  std::size_t prune_chunk = 500;
  std::size_t prune_max_per_call = 20'000;
  std::size_t cache_kib = 8192;
  std::uint64_t mmap_bytes = 0;
  std::uint64_t wal_truncate_bytes = 64ULL << 20;
  // The thread's nice value (added to the process's; 0: the same) and whether
  // it runs as SCHED_BATCH (never preempts the loop when it wakes).
  int nice = 0;
  bool sched_batch = true;
};

// Upper bounds (seconds) of the commit-duration histogram.
inline constexpr double kCommitBuckets[] = {0.00001, 0.00002, 0.00003, 0.00005, 0.0001, 0.00025, 0.0005,
                                            0.001,   0.0025,  0.005,   0.01,    0.025,   0.1,    1};
inline constexpr std::size_t kCommitBucketCount = std::size(kCommitBuckets) + 1;  // +Inf last

struct WriterStats {
  std::uint64_t commits = 0;          // transactions that wrote batches
  std::uint64_t batches = 0;          // batches made durable
  std::uint64_t commit_failures = 0;  // transactions that failed (their batches were tried again)
  std::uint64_t rows_written = 0;     // command rows, after coalescing within each batch
  std::uint64_t commit_buckets[kCommitBucketCount] = {};
  double commit_seconds = 0;
  std::uint64_t key_conflicts = 0;
  std::uint64_t prune_failures = 0;
  std::uint64_t cpu_ns = 0;  // the thread's CPU time
  std::uint64_t commits_here = 0;  // of `commits`: those made by commit_here() on the loop
};

class SqliteWriter {
 public:
  // Opens the writing connection to `db_path` (a file already in WAL mode, its
  // schema current) and starts the thread.
  static Expected<std::unique_ptr<SqliteWriter>> start(const std::string& db_path, const WriterOptions& options);
  // stop(0) if stop() was not called.
  ~SqliteWriter();
  SqliteWriter(const SqliteWriter&) = delete;
  SqliteWriter& operator=(const SqliteWriter&) = delete;

  // ---- from the loop ----
  // Queues a batch (numbered by the caller, in order). Returns a ticket for
  // wait(): every transaction that begins after it includes this batch. Throws
  // only std::bad_alloc, having queued nothing.
  std::uint64_t enqueue(std::shared_ptr<const WriteBatch> batch);
  // Commits `batch` on the calling thread (the loop) instead, when that cannot
  // wait or reorder anything: the thread has nothing queued or being tried,
  // nothing is stopping, the connection is free, and no other connection holds
  // the write lock (no busy wait: SQLITE_BUSY declines at once). True: the
  // batch is durable and its outcome is out, exactly as if the thread had
  // written it (no wakeup: the caller takes the outcomes). False: nothing was
  // written and the caller enqueue()s it. The transaction has no fsync
  // (synchronous = NORMAL in WAL mode), so it costs the loop only SQLite's own
  // work and one write(2) of the WAL frames; and it spares a small batch the
  // two thread handoffs, which on a busy machine take longer than the commit.
  bool commit_here(const std::shared_ptr<const WriteBatch>& batch);
  // The ticket of a wait() for what is queued already.
  std::uint64_t ticket() const;
  // Waits until batch `through` is durable (Ok), or a transaction that began
  // after `ticket` failed (its Error), or the writer stopped.
  Expected<void> wait(std::uint64_t through, std::uint64_t ticket);
  std::uint64_t durable_through() const noexcept { return durable_through_.load(std::memory_order_acquire); }
  std::uint64_t rows_durable() const noexcept { return rows_durable_.load(std::memory_order_acquire); }
  std::vector<BatchOutcome> take_outcomes();
  // Called on the writer thread after outcomes were added; it must not call
  // into the store (uv_async_send, a condition variable).
  void set_wakeup(std::function<void()> wake);
  bool up() const noexcept { return up_.load(std::memory_order_relaxed); }

  // `PRAGMA data_version` of the writing connection: it changes when another
  // connection committed (never for this writer's own transactions). Sampled
  // after each transaction; sample_data_version() samples it now unless the
  // thread is using the connection (then: nullopt, and data_version() is the
  // value after the transaction before).
  std::uint64_t data_version() const noexcept { return data_version_.load(std::memory_order_acquire); }
  std::optional<std::uint64_t> sample_data_version();

  // Queues a prune (replacing one not begun); returns its ticket for
  // wait_prune(). take_pruned(): rows deleted by prunes finished since the
  // last call.
  std::uint64_t request_prune(const RetentionPolicy& policy, std::uint64_t now_ms);
  void wait_prune(std::uint64_t ticket);
  std::size_t take_pruned() noexcept { return pruned_.exchange(0, std::memory_order_acq_rel); }

  WriterStats stats() const noexcept;

  // Writes what is queued (retrying failures with the usual backoff) for at
  // most `drain`, then ends the thread. Returns how many rows were left
  // unwritten (logged too).
  std::size_t stop(std::chrono::milliseconds drain);

 private:
  SqliteWriter(sqlite::Db db, std::string path, const WriterOptions& options);
  Expected<void> prepare();
  void run() noexcept;
  void lower_priority() noexcept;
  // Takes what is queued into group_ (under mu_); false if nothing.
  bool take_queued();
  // One transaction of group_, then its outcomes: called without mu_.
  bool attempt();
  Expected<void> write_group(std::chrono::steady_clock::duration& took);
  void finish_attempt(const Expected<void>& result, std::chrono::steady_clock::duration took);
  // Counts a transaction that succeeded in the commit figures.
  void count_commit(std::chrono::steady_clock::duration took) noexcept;
  void run_prune(const RetentionPolicy& policy, std::uint64_t now_ms) noexcept;
  void prune_steps(const RetentionPolicy& policy, std::uint64_t now_ms);
  void sample_locked() noexcept;  // under conn_mu_
  void wake() noexcept;
  void rollback() noexcept;

  struct Entry {
    std::shared_ptr<const WriteBatch> batch;
    bool reported = false;  // its outcome is out (its first failure, or ok)
  };

  std::string path_;
  WriterOptions options_;
  std::atomic<bool> give_up_{false};  // ends a busy wait at the drain's deadline
  sqlite::BusyWait busy_;
  sqlite::Db db_;

  // The connection and what is prepared on it: the thread's, and
  // sample_data_version()'s when it gets the lock.
  std::mutex conn_mu_;
  sqlite::Stmt begin_, commit_, rollback_, data_version_stmt_;
  SqliteRowWriter rows_;
  SqlitePruner pruner_;

  // Between the loop and the thread.
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // the thread waits for work
  std::condition_variable done_cv_;  // wait() and wait_prune() wait for the thread
  std::deque<std::shared_ptr<const WriteBatch>> queue_;
  std::vector<BatchOutcome> outcomes_;
  std::uint64_t attempts_begun_ = 0, attempts_ended_ = 0;
  bool last_attempt_ok_ = true;
  Error last_error_;
  bool kick_ = false;  // a wait() is waiting: retry now, not after the backoff
  bool group_held_ = false;  // the thread holds batches (being written, or waiting to be tried again)
  bool stop_ = false, stopped_ = false;
  std::chrono::steady_clock::time_point drain_deadline_{};
  std::optional<std::pair<RetentionPolicy, std::uint64_t>> prune_request_;
  std::uint64_t prune_requested_ = 0, prune_done_ = 0;
  std::size_t abandoned_rows_ = 0;

  std::mutex wake_mu_;
  std::function<void()> wake_;

  // The thread's own.
  std::deque<Entry> group_;  // the batches of the transaction being tried, oldest first
  std::chrono::milliseconds backoff_{0};
  std::chrono::steady_clock::time_point retry_at_{};
  std::chrono::steady_clock::time_point streak_began_{};
  std::uint64_t streak_failures_ = 0;

  // Published.
  std::atomic<std::uint64_t> durable_through_{0}, rows_durable_{0}, data_version_{0};
  std::atomic<bool> up_{true};
  std::atomic<std::size_t> pruned_{0};
  std::atomic<std::uint64_t> commits_{0}, batches_{0}, commit_failures_{0}, rows_written_{0}, commit_ns_{0},
      prune_failures_{0}, cpu_ns_{0}, commits_here_{0};
  std::atomic<std::uint64_t> buckets_[kCommitBucketCount] = {};

  std::thread thread_;
};

}  // namespace fleetlink::broker
