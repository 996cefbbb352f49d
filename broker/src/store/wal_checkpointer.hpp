#pragma once
// The SQLite store's checkpoints, on a thread of their own with a connection of
// their own, so the event loop's commits never wait for an fsync.
//
// With synchronous=NORMAL a commit only appends to the WAL; the WAL is fsynced,
// and its pages copied into the database file (which is fsynced too), by a
// checkpoint. The store turns SQLite's automatic checkpoints off (they would
// run inside a commit, on the loop) and this thread runs one about every
// `interval`:
//  - PASSIVE: copies what no reader still needs, never waits for a reader or a
//    writer, so the loop's commits go on meanwhile;
//  - TRUNCATE once the WAL file is larger than `truncate_bytes`, without
//    waiting: if a reader (say, the other broker) still uses the WAL it fails at
//    once and is tried again next time. It runs after a PASSIVE that copied
//    everything, so it holds the write lock only to cut the file to zero;
//  - when a reader kept PASSIVE from copying all of it, the WAL is also
//    fdatasynced directly (PASSIVE syncs it only when it has frames to copy),
//    so what a power cut can lose stays about one interval's commits even
//    while checkpoints cannot progress;
//  - at start, the WAL file is given its working size (32 MiB) up front, so
//    the commits of the first busy minutes write inside the file instead of
//    extending it (wal_checkpointer.cpp says why).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "fleetlink/expected.hpp"
#include "store/sqlite_db.hpp"

namespace fleetlink::broker {

struct CheckpointStats {
  std::uint64_t checkpoints = 0;  // PASSIVE runs that found new frames in the WAL
  std::uint64_t truncates = 0;
  std::uint64_t wal_syncs = 0;    // the direct fdatasync of a pinned WAL
  std::uint64_t failures = 0;     // errors other than a busy reader or writer
  std::uint64_t cpu_ns = 0;       // the thread's CPU time
};

class WalCheckpointer {
 public:
  struct Options {
    std::chrono::milliseconds interval{1000};
    std::uint64_t truncate_bytes = 64ULL << 20;
    // Allocated for the WAL at start (at most half of truncate_bytes); see preallocate_wal().
    std::uint64_t preallocate_bytes = 32ULL << 20;
  };

  // Opens its own connection to `db_path` and starts the thread.
  static Expected<std::unique_ptr<WalCheckpointer>> start(const std::string& db_path, Options options);
  // Stops the thread (at most one checkpoint's time) and closes the connection.
  ~WalCheckpointer();
  WalCheckpointer(const WalCheckpointer&) = delete;
  WalCheckpointer& operator=(const WalCheckpointer&) = delete;

  CheckpointStats stats() const noexcept;
  // Runs one round now, on the caller's thread, and waits for it (tests).
  void run_once();

 private:
  WalCheckpointer(sqlite::Db db, std::string db_path, Options options);
  void loop();
  void round();

  sqlite::Db db_;
  std::string wal_path_;
  Options options_;
  std::mutex mu_;  // one round at a time (the thread's, or run_once's)
  std::mutex wake_mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  int last_log_ = 0, last_copied_ = 0;  // the previous round's counts (under mu_)
  std::atomic<std::uint64_t> checkpoints_{0}, truncates_{0}, wal_syncs_{0}, failures_{0}, cpu_ns_{0};
  std::thread thread_;
};

}  // namespace fleetlink::broker
