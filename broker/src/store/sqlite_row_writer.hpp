#pragma once
// The upserts that put a buffer of writes (store_rows::PendingWrites) into the
// file, inside a transaction the caller opened: the SQL side of combine()
// (store/store_rows.hpp), so what a batch leaves in the file is what combining
// it in memory would have left.
//
// Used by the writer thread only (store/sqlite_writer.hpp), on its connection.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <sqlite3.h>

#include "fleetlink/expected.hpp"
#include "store/sqlite_db.hpp"
#include "store/store_rows.hpp"

namespace fleetlink::broker {

class SqliteRowWriter {
 public:
  // The most rows one upsert statement carries (measured: 32 rows per
  // statement cost about 3/4 of one statement per row).
  static constexpr std::size_t kRowsPerStatement = 32;

  explicit SqliteRowWriter(sqlite3* db) noexcept : db_(db) {}
  SqliteRowWriter(const SqliteRowWriter&) = delete;
  SqliteRowWriter& operator=(const SqliteRowWriter&) = delete;

  // Prepares the statements every batch uses; the multi-row ones are prepared
  // when a batch first needs their size.
  Expected<void> prepare();
  // Every row of `w`, in a transaction that is open. An Error leaves the
  // transaction to be rolled back by the caller.
  Expected<void> write(const store_rows::PendingWrites& w);

  // Idempotency keys another command already held (the command was written without it).
  std::uint64_t key_conflicts() const noexcept { return key_conflicts_.load(std::memory_order_relaxed); }

 private:
  Expected<void> write_commands(const store_rows::CommandRow* const* rows, std::size_t n, bool ending);
  Expected<void> write_command_alone(const store_rows::CommandRow& row, bool ending);
  Expected<void> write_results(const store_rows::CommandRow* const* rows, std::size_t n);
  Expected<void> write_rig(const store_rows::RigRow& row);
  Expected<void> write_job(const JobRecord& job);
  sqlite::Stmt* upsert_statement(std::size_t rows, bool ending);
  sqlite::Stmt* results_statement(std::size_t rows);
  // Prepares `sql` into `st` (kept for the next batch of that size); null and a warning if it cannot.
  sqlite::Stmt* prepare_into(sqlite::Stmt& st, const std::string& sql);

  sqlite3* db_;
  // By rows per statement: commands going to an open state, commands ending,
  // results.
  sqlite::Stmt upsert_opening_[kRowsPerStatement + 1];
  sqlite::Stmt upsert_ending_[kRowsPerStatement + 1];
  sqlite::Stmt insert_results_[kRowsPerStatement + 1];
  sqlite::Stmt upsert_rig_, upsert_job_;
  std::vector<const store_rows::CommandRow*> opening_, ending_, results_;  // write()'s, kept for their capacity
  std::atomic<std::uint64_t> key_conflicts_{0};  // read by stats() on the loop
};

}  // namespace fleetlink::broker
