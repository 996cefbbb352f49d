#pragma once
// The SQLite store's schema and how a database file gets to it.
//
// `PRAGMA user_version` is the schema version, `PRAGMA application_id` says the
// file is fleetlink's. A file at an older version is brought forward by the
// migrations in order, each in the same write transaction as the version bump,
// so a crash mid-way leaves the old version intact and two brokers opening the
// same file at once migrate it once (the second sees the new version once it
// has the write lock). A file at a newer version is refused: this code cannot
// know what the newer one's rows mean.
#include <cstdint>
#include <span>
#include <string>

#include <sqlite3.h>

#include "fleetlink/expected.hpp"

namespace fleetlink::broker::sqlite_schema {

inline constexpr std::int64_t kApplicationId = 0x464C4B31;  // "FLK1"

struct Migration {
  std::int64_t to_version;  // the schema version once `sql` ran on the one before it
  const char* sql;
};

// This code's migrations, version 0 (an empty file) to the newest.
std::span<const Migration> migrations() noexcept;
std::int64_t current_version() noexcept;

// Brings the database at `db` (the file `path`, for messages) to the newest
// version of `steps`, or says in a sentence naming the file why it will not:
// a newer version, someone else's database, a migration that failed.
Expected<void> migrate(sqlite3* db, const std::string& path, std::span<const Migration> steps);

}  // namespace fleetlink::broker::sqlite_schema
