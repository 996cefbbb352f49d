#pragma once
// Owning handles for SQLite's C API: a connection, a prepared statement, and a
// guard that resets a statement when a read is done with it. A statement left
// stepped-but-not-reset keeps its read transaction open, which pins the WAL
// (no checkpoint can pass it) and hides other processes' commits: every read
// path holds a StmtReset for as long as it steps.
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "fleetlink/expected.hpp"

namespace fleetlink::broker::sqlite {

struct DbClose {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
using Db = std::unique_ptr<sqlite3, DbClose>;

// "database is locked (SQLITE_BUSY)": sqlite3_errmsg with the code's name.
std::string describe(sqlite3* db, int rc);
Error error_of(sqlite3* db, int rc, std::string_view doing);

// Waits for a lock held by another connection up to `timeout`, polling from
// 20 us up to 2 ms: SQLite's own busy handler sleeps a full millisecond first,
// which is longer than the whole commit the other broker is usually in.
// `give_up`, when set from another thread, ends a wait within one poll (a
// store closing does not sit out the writer's long timeout).
class BusyWait {
 public:
  explicit BusyWait(std::chrono::milliseconds timeout, const std::atomic<bool>* give_up = nullptr)
      : timeout_(timeout), give_up_(give_up) {}
  void install(sqlite3* db) noexcept;
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  // While set, a lock held by another connection fails the statement at once
  // (SQLITE_BUSY) instead of waiting: for a transaction tried on the event loop.
  void set_no_wait(bool on) noexcept { no_wait_.store(on, std::memory_order_relaxed); }

 private:
  static int on_busy(void* self, int count) noexcept;
  std::chrono::milliseconds timeout_;
  const std::atomic<bool>* give_up_;
  std::atomic<bool> no_wait_{false};
  std::chrono::steady_clock::time_point started_{};
};

class Stmt {
 public:
  Stmt() = default;
  explicit Stmt(sqlite3_stmt* s) noexcept : s_(s) {}
  Stmt(Stmt&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  Stmt& operator=(Stmt&& o) noexcept {
    if (this != &o) {
      sqlite3_finalize(s_);
      s_ = o.s_;
      o.s_ = nullptr;
    }
    return *this;
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt() { sqlite3_finalize(s_); }

  explicit operator bool() const noexcept { return s_ != nullptr; }
  sqlite3_stmt* get() const noexcept { return s_; }

  // Binding copies nothing (SQLITE_STATIC): the caller keeps the bytes alive
  // until the statement is stepped and reset, which every caller here does
  // within one function.
  // An empty view may have no data pointer, which SQLite would bind as NULL.
  void bind_text(int i, std::string_view v) noexcept {
    sqlite3_bind_text(s_, i, v.data() ? v.data() : "", static_cast<int>(v.size()), SQLITE_STATIC);
  }
  void bind_blob(int i, std::string_view v) noexcept {
    sqlite3_bind_blob(s_, i, v.data() ? v.data() : "", static_cast<int>(v.size()), SQLITE_STATIC);
  }
  void bind_int(int i, std::int64_t v) noexcept { sqlite3_bind_int64(s_, i, v); }
  void bind_u64(int i, std::uint64_t v) noexcept { sqlite3_bind_int64(s_, i, static_cast<std::int64_t>(v)); }
  void bind_opt(int i, const std::optional<std::uint64_t>& v) noexcept {
    if (v) bind_u64(i, *v);
    else sqlite3_bind_null(s_, i);
  }

  int step() noexcept { return sqlite3_step(s_); }
  void reset() noexcept { sqlite3_reset(s_); }

  std::string_view text(int col) const noexcept {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, col));
    return p ? std::string_view(p, static_cast<std::size_t>(sqlite3_column_bytes(s_, col))) : std::string_view();
  }
  std::string_view blob(int col) const noexcept {
    const auto* p = static_cast<const char*>(sqlite3_column_blob(s_, col));
    return p ? std::string_view(p, static_cast<std::size_t>(sqlite3_column_bytes(s_, col))) : std::string_view();
  }
  bool is_null(int col) const noexcept { return sqlite3_column_type(s_, col) == SQLITE_NULL; }
  std::int64_t i64(int col) const noexcept { return sqlite3_column_int64(s_, col); }
  std::uint64_t u64(int col) const noexcept { return static_cast<std::uint64_t>(sqlite3_column_int64(s_, col)); }
  std::optional<std::uint64_t> opt(int col) const noexcept {
    if (is_null(col)) return std::nullopt;
    return u64(col);
  }

 private:
  sqlite3_stmt* s_ = nullptr;
};

class StmtReset {
 public:
  explicit StmtReset(Stmt& s) noexcept : s_(s) {}
  StmtReset(const StmtReset&) = delete;
  StmtReset& operator=(const StmtReset&) = delete;
  ~StmtReset() { s_.reset(); }

 private:
  Stmt& s_;
};

// `persistent`: kept for the store's life (SQLite allocates it apart from its
// lookaside memory).
Expected<Stmt> prepare(sqlite3* db, std::string_view sql, bool persistent = true);
// One statement (or several separated by ';'), no result rows wanted.
Expected<void> exec(sqlite3* db, const char* sql);
// A statement whose first row's first column is an integer (PRAGMA user_version, ...).
Expected<std::int64_t> query_int(sqlite3* db, const char* sql);

}  // namespace fleetlink::broker::sqlite
