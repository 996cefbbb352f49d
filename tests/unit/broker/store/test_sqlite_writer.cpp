// The SQLite store's writer thread: batches handed over without waiting,
// their outcomes, group commit while the disk (here: another connection's
// write lock) holds the writer back, reads over what is not yet in the file,
// foreign writes, and the drain when the store closes.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "store_test_support.hpp"

using namespace store_test;

namespace {

constexpr std::uint64_t kT0 = 1'733'000'000'000ULL;

// Waits (bounded) until the store says batch `n` is durable.
bool durable_soon(SqliteStore& s, std::uint64_t n, std::chrono::milliseconds within = std::chrono::milliseconds(5000)) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (s.durable_through() < n) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

std::vector<BatchOutcome> outcomes_soon(SqliteStore& s, std::size_t want) {
  std::vector<BatchOutcome> all;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (all.size() < want && std::chrono::steady_clock::now() < until) {
    for (auto& o : s.take_outcomes()) all.push_back(std::move(o));
    if (all.size() < want) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return all;
}

}  // namespace

TEST_CASE("writer: submit() numbers the batches, returns at once, and each batch's outcome comes once, in order") {
  TempDir tmp;
  SqliteOptions o = quick_options();
  o.commit_here_max_rows = 0;  // every batch to the thread (the loop's commits: the next case)
  auto store = open_store(tmp.str(), o);
  std::atomic<int> wakeups{0};
  store->set_wakeup([&] { wakeups.fetch_add(1); });

  CHECK(store->submit() == 0);  // nothing put: no batch
  std::vector<std::uint64_t> numbers;
  for (int i = 0; i < 5; ++i) {
    store->put_command(command(id_at(kT0 + static_cast<std::uint64_t>(i)), "r", CommandState::queued), false);
    numbers.push_back(store->submit());
  }
  CHECK(numbers == std::vector<std::uint64_t>{1, 2, 3, 4, 5});
  CHECK(store->submit() == 5);  // nothing new: the last number again
  CHECK_FALSE(store->pending());

  REQUIRE(durable_soon(*store, 5));
  const auto out = outcomes_soon(*store, 5);
  REQUIRE(out.size() == 5);
  for (std::size_t i = 0; i < out.size(); ++i) {
    CHECK(out[i].batch == i + 1);
    CHECK(out[i].result);
  }
  CHECK(store->take_outcomes().empty());
  CHECK(wakeups.load() >= 1);
  CHECK(store->backlog() == 0);
  RawDb raw(tmp.db());
  CHECK(raw.integer("SELECT count(*) FROM commands") == 5);
  store->set_wakeup({});
}

TEST_CASE("writer: a small batch while the thread is idle is committed by submit() itself; any other goes to the thread") {
  TempDir tmp;
  auto store = open_store(tmp.str());
  std::atomic<int> wakeups{0};
  store->set_wakeup([&] { wakeups.fetch_add(1); });

  SUBCASE("one command at a time: durable when submit() returns, outcome in hand, no wakeup") {
    for (std::uint64_t i = 0; i < 3; ++i) {
      store->put_command(command(id_at(kT0 + i), "r", CommandState::queued), false);
      const std::uint64_t n = store->submit();
      CHECK(n == i + 1);
      CHECK(store->durable_through() == n);
      const auto out = store->take_outcomes();
      REQUIRE(out.size() == 1);
      CHECK(out[0].batch == n);
      CHECK(out[0].result);
    }
    CHECK(wakeups.load() == 0);
    CHECK(store->stats().commits_on_loop == 3);
    CHECK(store->counters().commits_on_loop == 3);
    CHECK(store->backlog() == 0);
    RawDb raw(tmp.db());
    CHECK(raw.integer("SELECT count(*) FROM commands") == 3);
  }

  SUBCASE("a piece of an interval is committed here up to its own limit") {
    const std::size_t rows = SqliteOptions{}.interval_slice_rows;
    REQUIRE(rows > SqliteOptions{}.commit_here_max_rows);
    CHECK(store->interval_slice_rows() == rows);
    for (std::uint64_t i = 0; i < rows; ++i)
      store->put_command(command(id_at(kT0 + i), "r", CommandState::queued), false);
    const std::uint64_t n = store->submit_piece();
    CHECK(store->durable_through() == n);
    CHECK(store->stats().commits_on_loop == 1);
    for (std::uint64_t i = 0; i <= rows; ++i)
      store->put_command(command(id_at(kT0 + 100 + i), "r", CommandState::queued), false);
    const std::uint64_t m = store->submit_piece();  // one over: the thread's
    REQUIRE(durable_soon(*store, m));
    CHECK(store->stats().commits_on_loop == 1);
  }

  SUBCASE("a batch over the limit goes to the thread") {
    for (std::uint64_t i = 0; i < 5; ++i) store->put_command(command(id_at(kT0 + i), "r", CommandState::queued), false);
    const std::uint64_t n = store->submit();
    REQUIRE(durable_soon(*store, n));
    CHECK(store->stats().commits_on_loop == 0);
    CHECK(outcomes_soon(*store, 1).size() == 1);
  }

  SUBCASE("another connection holds the write lock: no wait on the loop, the thread writes it once the lock is free") {
    RawDb other(tmp.db());
    REQUIRE(other.exec("BEGIN IMMEDIATE") == SQLITE_OK);
    store->put_command(command(id_at(kT0), "r", CommandState::queued), false);
    const auto began = std::chrono::steady_clock::now();
    const std::uint64_t first = store->submit();
    CHECK(std::chrono::steady_clock::now() - began < std::chrono::milliseconds(100));  // declined at once
    CHECK(store->durable_through() < first);
    // Behind it, a small batch must not overtake the thread's: it goes to the thread too.
    store->put_command(command(id_at(kT0 + 1), "r", CommandState::queued), false);
    const std::uint64_t second = store->submit();
    CHECK(store->durable_through() < first);
    REQUIRE(other.exec("COMMIT") == SQLITE_OK);
    REQUIRE(durable_soon(*store, second));
    const auto out = outcomes_soon(*store, 2);
    REQUIRE(out.size() == 2);
    CHECK(out[0].batch == first);
    CHECK(out[1].batch == second);
    CHECK(store->stats().commits_on_loop == 0);
    // The thread idle again: the loop commits the next one itself.
    store->put_command(command(id_at(kT0 + 2), "r", CommandState::queued), false);
    CHECK(store->durable_through() == store->submit());
    CHECK(store->stats().commits_on_loop == 1);
    RawDb raw(tmp.db());
    CHECK(raw.integer("SELECT count(*) FROM commands") == 3);
  }
  store->set_wakeup({});
}

TEST_CASE("writer: while another connection holds the write lock, batches wait, reads see them, and then go in few transactions") {
  TempDir tmp;
  SqliteOptions o = quick_options();
  o.busy_timeout = std::chrono::milliseconds(2000);  // longer than the lock is held: no failure
  auto store = open_store(tmp.str(), o);
  const std::uint64_t commits_before = store->stats().commits;

  RawDb other(tmp.db());
  REQUIRE(other.exec("BEGIN IMMEDIATE") == SQLITE_OK);
  const std::string first = id_at(kT0);
  std::uint64_t last = 0;
  for (int i = 0; i < 20; ++i) {
    store->put_command(command(id_at(kT0 + static_cast<std::uint64_t>(i)), "r", CommandState::queued), false);
    const auto t0 = std::chrono::steady_clock::now();
    last = store->submit();
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(100));  // never waits for the lock
  }
  store->put_command(command(first, "r", CommandState::sent), false);
  last = store->submit();
  CHECK(last == 21);
  CHECK(store->durable_through() == 0);
  CHECK(store->backlog() == 21);

  // The loop's reads see every submitted write, combined, though none is in the file.
  auto v = find(*store, first);
  REQUIRE(v);
  CHECK(v->state == CommandState::sent);
  CHECK(open_of(*store, "r").size() == 20);
  CommandQuery q;
  q.rig_id = "r";
  q.limit = 100;
  CHECK(list(*store, q).size() == 20);

  REQUIRE(other.exec("COMMIT") == SQLITE_OK);
  REQUIRE(durable_soon(*store, last));
  const SqliteStats s = store->stats();
  CHECK(s.batches >= 21);
  // The first transaction waited for the lock with one batch or a few; the
  // rest went together, not one transaction each.
  CHECK(s.commits - commits_before <= 4);
  CHECK(s.commit_failures == 0);
  CHECK(other.integer("SELECT count(*) FROM commands") == 20);
  CHECK(other.integer("SELECT state FROM commands WHERE cmd_id = '" + first + "'") == 1);
  CHECK(store->backlog() == 0);
}

TEST_CASE("writer: a failed transaction reports each of its batches once, keeps them, and writes them when it can") {
  QuietLog quiet;
  TempDir tmp;
  SqliteOptions o = quick_options();
  o.busy_timeout = std::chrono::milliseconds(50);
  o.retry_min = std::chrono::milliseconds(10);
  o.retry_max = std::chrono::milliseconds(40);
  auto store = open_store(tmp.str(), o);

  RawDb other(tmp.db());
  REQUIRE(other.exec("BEGIN IMMEDIATE") == SQLITE_OK);
  store->put_command(command(id_at(kT0), "r", CommandState::queued), false);
  CHECK(store->submit() == 1);
  store->put_command(command(id_at(kT0 + 1), "r", CommandState::queued), false);
  CHECK(store->submit() == 2);

  auto failed = outcomes_soon(*store, 2);
  REQUIRE(failed.size() == 2);
  CHECK(failed[0].batch == 1);
  CHECK(failed[1].batch == 2);
  CHECK_FALSE(failed[0].result);
  CHECK(failed[0].result.error().detail.find("write lock") != std::string::npos);
  CHECK_FALSE(failed[1].result);
  CHECK_FALSE(store->up());
  // Tried again and again meanwhile, but reported once.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(store->take_outcomes().empty());
  CHECK(store->stats().commit_failures >= 2);
  CHECK(store->durable_through() == 0);
  CHECK(store->backlog() == 2);

  REQUIRE(other.exec("COMMIT") == SQLITE_OK);
  REQUIRE(durable_soon(*store, 2));
  CHECK(store->up());
  CHECK(store->take_outcomes().empty());  // a later success shows in durable_through() only
  CHECK(other.integer("SELECT count(*) FROM commands") == 2);

  // A batch after the streak is reported as usual.
  store->put_command(command(id_at(kT0 + 2), "r", CommandState::queued), false);
  CHECK(store->submit() == 3);
  auto ok = outcomes_soon(*store, 1);
  REQUIRE(ok.size() == 1);
  CHECK(ok[0].batch == 3);
  CHECK(ok[0].result);
}

TEST_CASE("writer: foreign_writes() changes for another connection's commit, never for the store's own") {
  TempDir tmp;
  auto store = open_store(tmp.str());
  const std::uint64_t v0 = store->foreign_writes();
  for (int i = 0; i < 10; ++i) {
    store->put_command(command(id_at(kT0 + static_cast<std::uint64_t>(i)), "r", CommandState::queued), false);
    REQUIRE(store->commit());
    CHECK(store->foreign_writes() == v0);
  }
  {
    RawDb other(tmp.db());
    REQUIRE(other.exec("UPDATE commands SET attempts = 3 WHERE rig_id = 'r'") == SQLITE_OK);
  }
  // The writer samples its own connection's version now (it is idle).
  CHECK(store->foreign_writes() != v0);
  const std::uint64_t v1 = store->foreign_writes();
  store->put_command(command(id_at(kT0 + 100), "r", CommandState::queued), false);
  REQUIRE(store->commit());
  CHECK(store->foreign_writes() == v1);
}

TEST_CASE("writer: closing the store writes what was submitted and what was put, then reopening finds it") {
  TempDir tmp;
  {
    auto store = open_store(tmp.str());
    for (int i = 0; i < 200; ++i) {
      store->put_command(command(id_at(kT0 + static_cast<std::uint64_t>(i)), "r", CommandState::queued), false);
      if (i % 10 == 9) store->submit();
    }
    store->put_command(command(id_at(kT0 + 1000), "r", CommandState::queued), false);  // put, never submitted
  }
  auto again = open_store(tmp.str());
  CHECK(open_of(*again, "r").size() == 201);
}

TEST_CASE("writer: set_wakeup({}) while the writer reports outcomes is safe") {
  TempDir tmp;
  auto store = open_store(tmp.str());
  std::atomic<int> calls{0};
  for (int round = 0; round < 50; ++round) {
    store->set_wakeup([&] { calls.fetch_add(1); });
    store->put_command(command(id_at(kT0 + static_cast<std::uint64_t>(round)), "r", CommandState::queued), false);
    store->submit();
    store->set_wakeup({});  // races the writer's call, which must see either the old one or none
  }
  REQUIRE(store->commit());
  const int seen = calls.load();
  store->put_command(command(id_at(kT0 + 999), "r", CommandState::queued), false);
  REQUIRE(store->commit());
  CHECK(calls.load() == seen);  // none set: not called
  (void)store->take_outcomes();
}
