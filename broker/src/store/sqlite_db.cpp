#include "store/sqlite_db.hpp"

#include <algorithm>
#include <thread>

namespace fleetlink::broker::sqlite {

std::string describe(sqlite3* db, int rc) {
  std::string text = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  if (text.empty()) text = sqlite3_errstr(rc);
  const char* name = sqlite3_errstr(rc & 0xFF);
  if (name && text != name) text += std::string(" (") + name + ")";
  return text;
}

Error error_of(sqlite3* db, int rc, std::string_view doing) {
  return make_error(Errc::io, std::string(doing) + ": " + describe(db, rc));
}

void BusyWait::install(sqlite3* db) noexcept { sqlite3_busy_handler(db, &BusyWait::on_busy, this); }

int BusyWait::on_busy(void* self, int count) noexcept {
  auto* w = static_cast<BusyWait*>(self);
  if (w->no_wait_.load(std::memory_order_relaxed)) return 0;
  const auto now = std::chrono::steady_clock::now();
  if (count == 0) w->started_ = now;
  if (now - w->started_ >= w->timeout_) return 0;
  if (w->give_up_ && w->give_up_->load(std::memory_order_relaxed)) return 0;
  const auto step = std::chrono::microseconds(20LL << std::min(count, 7));
  std::this_thread::sleep_for(std::min<std::chrono::microseconds>(step, std::chrono::microseconds(2000)));
  return 1;
}

Expected<Stmt> prepare(sqlite3* db, std::string_view sql, bool persistent) {
  sqlite3_stmt* s = nullptr;
  const int rc = sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()),
                                    persistent ? SQLITE_PREPARE_PERSISTENT : 0, &s, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(s);
    return error_of(db, rc, "preparing '" + std::string(sql.substr(0, 60)) + "'");
  }
  return Stmt(s);
}

Expected<void> exec(sqlite3* db, const char* sql) {
  char* msg = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &msg);
  if (rc == SQLITE_OK) return {};
  std::string text = msg ? msg : sqlite3_errstr(rc);
  sqlite3_free(msg);
  const char* name = sqlite3_errstr(rc & 0xFF);
  if (name && text != name) text += std::string(" (") + name + ")";
  return make_error(Errc::io, text);
}

Expected<std::int64_t> query_int(sqlite3* db, const char* sql) {
  auto st = prepare(db, sql, false);
  if (!st) return st.error();
  StmtReset done(*st);
  const int rc = st->step();
  if (rc == SQLITE_ROW) return st->i64(0);
  if (rc == SQLITE_DONE) return make_error(Errc::io, std::string(sql) + ": no row");
  return error_of(db, rc, sql);
}

}  // namespace fleetlink::broker::sqlite
