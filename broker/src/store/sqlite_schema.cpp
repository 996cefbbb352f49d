#include "store/sqlite_schema.hpp"

#include "store/sqlite_db.hpp"

namespace fleetlink::broker::sqlite_schema {
namespace {

// Version 1. Why each index exists (and why there are not more): every one is
// written on the broker's hot path, and one ordered by rig dirties a page of
// its own per row once it spans more pages than a commit has rows (an index
// of every command by rig, 20,000 rigs, 100-row commits: 1.8 -> 7 us per row,
// measured), so only the queries of the hot path get one.
//   commands_open  the open commands of a rig (its HELLO), and all open ones at
//                  start-up; partial, so it holds only what is in flight. Its
//                  condition is `is_open`, not `state < 4`: SQLite rewrites a
//                  partial index entry whenever a column of its condition is
//                  assigned, and only the write that ends a command assigns
//                  is_open, so queued -> sent -> acked -> running leave the
//                  index alone (the CHECK keeps the two columns agreeing)
//   commands_key   a repeated POST names its command by idempotency key
//   commands_job   a job's commands; rows of one job are appended in key order
// The history of one rig (GET /v1/commands?rig=) walks the table newest first:
// about 15 ms per 100,000 commands (fleetlink-store-bench), bounded by since=
// when given.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE commands (
  cmd_id          TEXT    NOT NULL PRIMARY KEY,
  rig_id          TEXT    NOT NULL,
  state           INTEGER NOT NULL,
  is_open         INTEGER NOT NULL CHECK (is_open = (state < 4)),
  job_id          TEXT    NOT NULL,
  idempotency_key TEXT    NOT NULL,
  enqueued_at     INTEGER NOT NULL,
  attempts        INTEGER NOT NULL,
  sent_at         INTEGER,
  acked_at        INTEGER,
  running_at      INTEGER,
  finished_at     INTEGER,
  body            BLOB    NOT NULL
) WITHOUT ROWID;
CREATE INDEX commands_open ON commands (cmd_id) WHERE is_open = 1;
CREATE UNIQUE INDEX commands_key ON commands (idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX commands_job ON commands (job_id, cmd_id) WHERE job_id <> '';

CREATE TABLE results (
  cmd_id TEXT NOT NULL PRIMARY KEY,
  body   BLOB NOT NULL
) WITHOUT ROWID;

CREATE TABLE rigs (
  rig_id     TEXT    NOT NULL PRIMARY KEY,
  first_seen INTEGER NOT NULL,
  last_seen  INTEGER NOT NULL,
  body       BLOB    NOT NULL
) WITHOUT ROWID;

CREATE TABLE jobs (
  job_id     TEXT    NOT NULL PRIMARY KEY,
  created_at INTEGER NOT NULL,
  finished   INTEGER NOT NULL,
  body       TEXT    NOT NULL
) WITHOUT ROWID;
CREATE INDEX jobs_open ON jobs (job_id) WHERE finished = 0;

-- For people reading the file with sqlite3(1): what the codes of commands.state
-- mean (store/record_codec.cpp). Nothing reads it.
CREATE TABLE command_states (
  code  INTEGER PRIMARY KEY,
  name  TEXT    NOT NULL UNIQUE,
  final INTEGER NOT NULL
);
INSERT INTO command_states VALUES
  (0, 'queued', 0), (1, 'sent', 0), (2, 'acked', 0), (3, 'running', 0),
  (4, 'succeeded', 1), (5, 'failed', 1), (6, 'timed_out', 1), (7, 'cancelled', 1),
  (8, 'undeliverable', 1), (9, 'rejected', 1), (10, 'interrupted', 1);
)sql";

constexpr Migration kMigrations[] = {
    {1, kSchemaV1},
};

Error refuse(const std::string& path, const std::string& why) {
  return make_error(Errc::unsupported_version, path + " " + why);
}

}  // namespace

std::span<const Migration> migrations() noexcept { return kMigrations; }
std::int64_t current_version() noexcept { return kMigrations[std::size(kMigrations) - 1].to_version; }

Expected<void> migrate(sqlite3* db, const std::string& path, std::span<const Migration> steps) {
  const std::int64_t newest = steps.empty() ? 0 : steps.back().to_version;
  auto check = [&](std::int64_t version, std::int64_t app_id) -> Expected<void> {
    if (version > newest) {
      return refuse(path, "has schema version " + std::to_string(version) + ", newer than this broker knows (" +
                              std::to_string(newest) + "): it was written by a newer fleetlink-broker");
    }
    if (version > 0 && app_id != kApplicationId)
      return refuse(path, "is an SQLite database of some other program (application_id " +
                              std::to_string(app_id) + "), not a fleetlink command store");
    return {};
  };
  auto read = [&](std::int64_t& version, std::int64_t& app_id) -> Expected<void> {
    auto v = sqlite::query_int(db, "PRAGMA user_version");
    if (!v) return make_error(Errc::io, "cannot read the schema version of " + path + ": " + v.error().detail);
    auto a = sqlite::query_int(db, "PRAGMA application_id");
    if (!a) return make_error(Errc::io, "cannot read the application id of " + path + ": " + a.error().detail);
    version = *v;
    app_id = *a;
    return {};
  };

  std::int64_t version = 0, app_id = 0;
  if (auto r = read(version, app_id); !r) return r;
  if (auto r = check(version, app_id); !r) return r;
  if (version == newest) return {};

  if (auto r = sqlite::exec(db, "BEGIN IMMEDIATE"); !r)
    return make_error(Errc::io, "cannot lock " + path + " to bring its schema up to date: " + r.error().detail);
  auto fail = [&](Error e) -> Expected<void> {
    sqlite::exec(db, "ROLLBACK");
    return e;
  };
  // Another broker may have migrated it while this one waited for the lock.
  if (auto r = read(version, app_id); !r) return fail(r.error());
  if (auto r = check(version, app_id); !r) return fail(r.error());
  if (version == 0) {
    auto tables = sqlite::query_int(db, "SELECT count(*) FROM sqlite_schema");
    if (!tables) return fail(tables.error());
    if (*tables > 0 || (app_id != 0 && app_id != kApplicationId))
      return fail(refuse(path, "is an SQLite database of some other program (it has tables but no fleetlink "
                               "schema version), not a fleetlink command store"));
  }
  for (const Migration& m : steps) {
    if (m.to_version <= version) continue;
    if (auto r = sqlite::exec(db, m.sql); !r) {
      return fail(make_error(Errc::io, "cannot bring " + path + " from schema version " + std::to_string(version) +
                                           " to " + std::to_string(m.to_version) + ": " + r.error().detail));
    }
    version = m.to_version;
  }
  const std::string stamp = "PRAGMA application_id = " + std::to_string(kApplicationId) +
                            "; PRAGMA user_version = " + std::to_string(version);
  if (auto r = sqlite::exec(db, stamp.c_str()); !r) return fail(r.error());
  if (auto r = sqlite::exec(db, "COMMIT"); !r)
    return fail(make_error(Errc::io, "cannot commit the schema of " + path + ": " + r.error().detail));
  return {};
}

}  // namespace fleetlink::broker::sqlite_schema
