#pragma once
// Helpers of the SQLite store's tests: a temporary state directory, commands
// with UUIDv7 ids at chosen times, and the store's reads as plain calls (the
// SQLite store answers before it returns).
#include <doctest/doctest.h>
#include <stdlib.h>
#include <sqlite3.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "store/sqlite_store.hpp"

namespace store_test {

using namespace fleetlink;
using namespace fleetlink::broker;

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fleetlink-store-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) FAIL("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path.string(); }
  std::string db() const { return (path / "commands.db").string(); }
};

// Short timeouts: a test that waits for a lock should not wait 2 s.
inline SqliteOptions quick_options() {
  SqliteOptions o;
  o.busy_timeout = std::chrono::milliseconds(200);
  o.checkpoint_interval = std::chrono::milliseconds(50);
  return o;
}

inline std::unique_ptr<SqliteStore> open_store(const std::string& dir, SqliteOptions o = quick_options()) {
  auto s = SqliteStore::open(dir, o);
  if (!s) FAIL("open: " << s.error().detail);
  return std::move(*s);
}

// A UUIDv7 of Unix millisecond `ms` with a fixed tail: the same ms gives the same id.
inline std::string id_at(std::uint64_t ms) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%08llx-%04llx-7000-8000-000000000000",
                static_cast<unsigned long long>((ms >> 16) & 0xFFFF'FFFFULL), static_cast<unsigned long long>(ms & 0xFFFF));
  return buf;
}

inline CommandView command(const std::string& cmd_id, const std::string& rig, CommandState state,
                           std::uint64_t enqueued_at = 1'733'000'000'000) {
  CommandView v;
  v.cmd_id = cmd_id;
  v.rig_id = rig;
  v.kind = "noop";
  v.args = {{"n", "1"}};
  v.state = state;
  v.enqueued_at_ms = enqueued_at;
  v.deliver_by_ms = enqueued_at + 60'000;
  v.timeout_s = 30;
  if (state >= CommandState::sent) {
    v.sent_at_ms = enqueued_at + 1;
    v.attempts = 1;
    v.seq = 1;
  }
  if (state >= CommandState::acked && state != CommandState::undeliverable && state != CommandState::rejected)
    v.acked_at_ms = enqueued_at + 2;
  if (is_final(state)) v.finished_at_ms = enqueued_at + 3;
  return v;
}

inline msg::Result result_of(const std::string& cmd_id, const std::string& output) {
  msg::Result r;
  r.cmd_id = cmd_id;
  r.status = msg::Status::ok;
  r.output.assign(output.begin(), output.end());
  r.started_at_ms = 1;
  r.finished_at_ms = 2;
  return r;
}

inline std::optional<CommandView> find(CommandStore& s, std::string_view id) {
  std::optional<CommandView> out;
  bool called = false;
  s.find(id, [&](std::optional<CommandView> v) {
    out = std::move(v);
    called = true;
  });
  CHECK(called);
  return out;
}

inline std::optional<CommandView> find_by_key(CommandStore& s, std::string_view key) {
  std::optional<CommandView> out;
  s.find_by_key(key, [&](std::optional<CommandView> v) { out = std::move(v); });
  return out;
}

inline std::vector<CommandView> open_of(CommandStore& s, std::string_view rig) {
  std::vector<CommandView> out;
  s.open_commands_of(rig, [&](std::vector<CommandView> v) { out = std::move(v); });
  return out;
}

inline std::vector<CommandView> list(CommandStore& s, const CommandQuery& q) {
  std::vector<CommandView> out;
  s.list_commands(q, [&](std::vector<CommandView> v) { out = std::move(v); });
  return out;
}

inline std::optional<JobRecord> find_job(CommandStore& s, std::string_view id) {
  std::optional<JobRecord> out;
  s.find_job(id, [&](std::optional<JobRecord> j) { out = std::move(j); });
  return out;
}

inline std::vector<JobRecord> list_jobs(CommandStore& s, const JobQuery& q) {
  std::vector<JobRecord> out;
  s.list_jobs(q, [&](std::vector<JobRecord> v) { out = std::move(v); });
  return out;
}

inline std::vector<std::string> ids(const std::vector<CommandView>& v) {
  std::vector<std::string> out;
  for (const auto& c : v) out.push_back(c.cmd_id);
  return out;
}

// For tests that make the store warn on purpose, many times.
struct QuietLog {
  fleetlink::log::Level was = fleetlink::log::level();
  QuietLog() { fleetlink::log::set_level(fleetlink::log::Level::error); }
  ~QuietLog() { fleetlink::log::set_level(was); }
  QuietLog(const QuietLog&) = delete;
  QuietLog& operator=(const QuietLog&) = delete;
};

// A connection of the test's own, for what a broker would not do to the file.
struct RawDb {
  sqlite3* db = nullptr;
  explicit RawDb(const std::string& path) {
    REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) == SQLITE_OK);
    sqlite3_busy_timeout(db, 2000);
  }
  ~RawDb() { sqlite3_close_v2(db); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;
  int exec(const std::string& sql) { return sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr); }
  std::string error() const { return sqlite3_errmsg(db); }
  long long integer(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK);
    long long v = -1;
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
  }
};

}  // namespace store_test
