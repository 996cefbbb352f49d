// Opening the store: what it creates, and every file it refuses, with a sentence
// naming the file.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <fstream>

#include "store/sqlite_schema.hpp"
#include "store_test_support.hpp"

using namespace store_test;
namespace fs = std::filesystem;

namespace {

unsigned mode_of(const fs::path& p) {
  struct stat st{};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

Error open_error(const std::string& dir) {
  auto s = SqliteStore::open(dir, quick_options());
  REQUIRE_FALSE(s);
  return s.error();
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}

}  // namespace

TEST_CASE("open: creates the state directory (0750) and commands.db (0640), and finds it again") {
  TempDir tmp;
  const fs::path dir = tmp.path / "var" / "lib" / "fleetlink-broker";
  const std::string id = id_at(1'733'000'000'000);
  {
    auto store = open_store(dir.string());
    CHECK(store->name() == "sqlite");
    CHECK(store->durable());
    CHECK(store->up());
    CHECK(store->path() == (dir / "commands.db").string());
    CHECK(mode_of(dir) == 0750);
    CHECK(mode_of(dir / "commands.db") == 0640);
    store->put_command(command(id, "rig-1", CommandState::queued), false);
    REQUIRE(store->commit());
    // SQLite gives its WAL and shared-memory files the database's mode.
    CHECK(mode_of(dir / "commands.db-wal") == 0640);
    CHECK(mode_of(dir / "commands.db-shm") == 0640);
  }
  auto again = open_store(dir.string());
  auto v = find(*again, id);
  REQUIRE(v);
  CHECK(v->rig_id == "rig-1");
  CHECK(v->recorded);
  RawDb raw(tmp.path / "var" / "lib" / "fleetlink-broker" / "commands.db");
  CHECK(raw.integer("PRAGMA user_version") == sqlite_schema::current_version());
  CHECK(raw.integer("PRAGMA application_id") == sqlite_schema::kApplicationId);
}

TEST_CASE("open: a state directory that is a file is refused") {
  TempDir tmp;
  write_file(tmp.path / "state", "x");
  auto e = open_error((tmp.path / "state").string());
  CHECK(e.detail.find((tmp.path / "state").string()) != std::string::npos);
}

TEST_CASE("open: a file that is not an SQLite database is refused, naming it") {
  TempDir tmp;
  std::string junk(8192, 'j');
  write_file(tmp.path / "commands.db", "this is the broker's old JSON state, not a database\n" + junk);
  auto e = open_error(tmp.str());
  INFO(e.detail);
  CHECK(e.detail.find(tmp.db()) != std::string::npos);
  CHECK(e.detail.find("not an SQLite database") != std::string::npos);
  // Left as it was.
  CHECK(fs::file_size(tmp.path / "commands.db") > 8192);
}

TEST_CASE("open: a corrupt database is refused (quick_check)") {
  TempDir tmp;
  {
    auto store = open_store(tmp.str());
    for (int i = 0; i < 2000; ++i) {
      auto v = command(id_at(1'733'000'000'000 + static_cast<std::uint64_t>(i)), "rig-" + std::to_string(i % 50),
                       CommandState::succeeded);
      v.detail = std::string(100, 'd');
      store->put_command(v, false);
    }
    REQUIRE(store->commit());
  }  // closing checkpoints everything into the file and removes the WAL
  REQUIRE_FALSE(fs::exists(tmp.path / "commands.db-wal"));
  {
    // Garbage over the middle pages (the header, page 1, stays intact).
    std::fstream f(tmp.db(), std::ios::binary | std::ios::in | std::ios::out);
    const auto size = fs::file_size(tmp.db());
    REQUIRE(size > 40 * 4096);
    for (std::uint64_t off = 8 * 4096; off < size - 4096; off += 4096 * 3) {
      f.seekp(static_cast<std::streamoff>(off + 8));
      f << std::string(600, '\xA5');
    }
  }
  auto e = open_error(tmp.str());
  CHECK(e.detail.find(tmp.db()) != std::string::npos);
  CHECK(e.detail.find("corrupt") != std::string::npos);
}

TEST_CASE("open: a schema newer than this code is refused; the file is left alone") {
  TempDir tmp;
  { open_store(tmp.str()); }
  {
    RawDb raw(tmp.db());
    REQUIRE(raw.exec("PRAGMA user_version = 7") == SQLITE_OK);
  }
  auto e = open_error(tmp.str());
  CHECK(e.code == Errc::unsupported_version);
  CHECK(e.detail.find(tmp.db()) != std::string::npos);
  CHECK(e.detail.find("schema version 7") != std::string::npos);
  CHECK(e.detail.find("newer") != std::string::npos);
  RawDb raw(tmp.db());
  CHECK(raw.integer("PRAGMA user_version") == 7);
}

TEST_CASE("open: someone else's SQLite database is refused") {
  SUBCASE("tables but no schema version") {
    TempDir tmp;
    {
      RawDb raw(tmp.db());
      REQUIRE(raw.exec("CREATE TABLE settings (k TEXT, v TEXT)") == SQLITE_OK);
    }
    auto e = open_error(tmp.str());
    CHECK(e.detail.find("some other program") != std::string::npos);
    RawDb raw(tmp.db());
    CHECK(raw.integer("SELECT count(*) FROM sqlite_schema WHERE name = 'commands'") == 0);
  }
  SUBCASE("a schema version but another application id") {
    TempDir tmp;
    {
      RawDb raw(tmp.db());
      REQUIRE(raw.exec("PRAGMA application_id = 1234; PRAGMA user_version = 1") == SQLITE_OK);
    }
    auto e = open_error(tmp.str());
    CHECK(e.detail.find("some other program") != std::string::npos);
  }
}

TEST_CASE("migrations: an older schema is brought forward once, in one transaction") {
  TempDir tmp;
  { open_store(tmp.str()); }  // version 1
  static const sqlite_schema::Migration next[] = {
      sqlite_schema::migrations()[0],
      {2, "CREATE TABLE notes (cmd_id TEXT PRIMARY KEY, note TEXT) WITHOUT ROWID;"
          "INSERT INTO notes VALUES ('x', 'added by version 2')"},
  };
  RawDb raw(tmp.db());
  const std::string path = tmp.db();
  REQUIRE(sqlite_schema::migrate(raw.db, path, next));
  CHECK(raw.integer("PRAGMA user_version") == 2);
  CHECK(raw.integer("SELECT count(*) FROM notes") == 1);
  // Again: nothing to do (a second broker that opens it after the first).
  REQUIRE(sqlite_schema::migrate(raw.db, path, next));
  CHECK(raw.integer("SELECT count(*) FROM notes") == 1);
  // This code knows version 1 only: it refuses the migrated file.
  auto e = open_error(tmp.str());
  CHECK(e.detail.find("schema version 2") != std::string::npos);
}

TEST_CASE("migrations: a failing step leaves the older version intact") {
  TempDir tmp;
  { open_store(tmp.str()); }
  static const sqlite_schema::Migration broken[] = {
      sqlite_schema::migrations()[0],
      {2, "CREATE TABLE half_done (x INTEGER); INSERT INTO no_such_table VALUES (1)"},
  };
  RawDb raw(tmp.db());
  auto r = sqlite_schema::migrate(raw.db, tmp.db(), broken);
  REQUIRE_FALSE(r);
  CHECK(r.error().detail.find("from schema version 1 to 2") != std::string::npos);
  CHECK(raw.integer("PRAGMA user_version") == 1);
  CHECK(raw.integer("SELECT count(*) FROM sqlite_schema WHERE name = 'half_done'") == 0);
  // And the store still opens it.
  auto store = SqliteStore::open(tmp.str(), quick_options());
  CHECK(store);
}

TEST_CASE("open: an empty file (made by a previous start that died at once) becomes a store") {
  TempDir tmp;
  write_file(tmp.path / "commands.db", "");
  auto store = open_store(tmp.str());
  store->put_command(command(id_at(1'733'000'000'000), "r", CommandState::queued), false);
  CHECK(store->commit());
}
