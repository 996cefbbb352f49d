#include "store/wal_checkpointer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "common/log.hpp"

namespace fleetlink::broker {
namespace {

std::uint64_t thread_cpu_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t file_size(const std::string& path) noexcept {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_size);
}

// Gives an existing WAL file `bytes` of allocated, zero-filled space. While a
// new WAL grows (the first busy minutes after a start: passive checkpoints
// cannot catch up with commits that never pause, so the WAL is not restarted)
// each commit extends the file, and on ext4 an extending write now and then
// waits for the journal's commit: that was the round trip's p99 right after a
// start (docs/PERFORMANCE.md finding 20). A write inside the file's size does
// not. fallocate(2) without flags never changes data that is there, so another
// broker appending frames meanwhile loses nothing, and SQLite reads a WAL only
// up to its last valid frame: zeros past it are not frames.
void preallocate_wal(const std::string& wal_path, std::uint64_t bytes) noexcept {
  if (bytes == 0) return;
  const int fd = ::open(wal_path.c_str(), O_RDWR | O_CLOEXEC);  // never creates it
  if (fd < 0) return;
  struct stat st{};
  if (::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) < bytes) {
    int rc = 0;
    do {
      rc = ::fallocate(fd, 0, 0, static_cast<off_t>(bytes));
    } while (rc != 0 && errno == EINTR);
    // Not possible here: the WAL grows as it used to. A filesystem without
    // fallocate is no news; a disk too full for it is.
    if (rc != 0 && errno == EOPNOTSUPP) FL_DEBUG("store: the WAL was not preallocated: %s", std::strerror(errno));
    else if (rc != 0) FL_WARN("store: the WAL could not be given its space up front: %s", std::strerror(errno));
  }
  ::close(fd);
}

}  // namespace

Expected<std::unique_ptr<WalCheckpointer>> WalCheckpointer::start(const std::string& db_path, Options options) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(db_path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  sqlite::Db db(raw);
  if (rc != SQLITE_OK) return sqlite::error_of(raw, rc, "opening " + db_path + " for checkpoints");
  // A connection knows its file is in WAL mode only once it has read it; until
  // then a checkpoint is a no-op that reports -1 frames.
  if (auto r = sqlite::exec(db.get(), "SELECT 1 FROM sqlite_schema LIMIT 1"); !r)
    return make_error(Errc::io, "reading " + db_path + " for checkpoints: " + r.error().detail);
  // Below the bound that cuts it back, or every round would cut it. SQLite
  // deletes the WAL only when its last connection closes: this one is open.
  preallocate_wal(db_path + "-wal", std::min(options.preallocate_bytes, options.truncate_bytes / 2));
  // No busy handler on purpose: a checkpoint that would wait gives up at once.
  try {
    std::unique_ptr<WalCheckpointer> c(new WalCheckpointer(std::move(db), db_path, options));
    c->thread_ = std::thread([p = c.get()] { p->loop(); });
    return c;
  } catch (const std::system_error& e) {
    return make_error(Errc::io, std::string("cannot start the checkpoint thread: ") + e.what());
  }
}

WalCheckpointer::WalCheckpointer(sqlite::Db db, std::string db_path, Options options)
    : db_(std::move(db)), wal_path_(std::move(db_path) + "-wal"), options_(options) {}

WalCheckpointer::~WalCheckpointer() {
  {
    std::lock_guard l(wake_mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

CheckpointStats WalCheckpointer::stats() const noexcept {
  return CheckpointStats{checkpoints_.load(), truncates_.load(), wal_syncs_.load(), failures_.load(),
                         cpu_ns_.load()};
}

void WalCheckpointer::run_once() { round(); }

void WalCheckpointer::loop() {
  for (;;) {
    {
      std::unique_lock l(wake_mu_);
      if (wake_.wait_for(l, options_.interval, [this] { return stop_; })) return;
    }
    round();
  }
}

void WalCheckpointer::round() {
  std::lock_guard l(mu_);
  const std::uint64_t cpu0 = thread_cpu_ns();
  int log_frames = 0, copied = 0;
  const int rc = sqlite3_wal_checkpoint_v2(db_.get(), "main", SQLITE_CHECKPOINT_PASSIVE, &log_frames, &copied);
  if (rc == SQLITE_OK && log_frames >= 0) {
    // The counts stay as they are until a writer restarts the WAL: only a
    // change is a round that found something.
    if (log_frames > 0 && (log_frames != last_log_ || copied != last_copied_))
      checkpoints_.fetch_add(1, std::memory_order_relaxed);
    last_log_ = log_frames;
    last_copied_ = copied;
    if (copied < log_frames) {
      // A reader holds frames PASSIVE may not copy; when it could copy none,
      // it did not fsync the WAL either.
      const int fd = ::open(wal_path_.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        if (::fdatasync(fd) == 0) wal_syncs_.fetch_add(1, std::memory_order_relaxed);
        ::close(fd);
      }
    } else if (file_size(wal_path_) > options_.truncate_bytes) {
      const int t = sqlite3_wal_checkpoint_v2(db_.get(), "main", SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr);
      if (t == SQLITE_OK) truncates_.fetch_add(1, std::memory_order_relaxed);
    }
  } else if (rc == SQLITE_OK) {
    failures_.fetch_add(1, std::memory_order_relaxed);  // the file left WAL mode: nothing to checkpoint
  } else if ((rc & 0xFF) != SQLITE_BUSY && (rc & 0xFF) != SQLITE_LOCKED) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    FL_WARN("store: checkpoint failed: %s", sqlite::describe(db_.get(), rc).c_str());
  }
  cpu_ns_.fetch_add(thread_cpu_ns() - cpu0, std::memory_order_relaxed);
}

}  // namespace fleetlink::broker
