// The Redis command store against a real redis-server: writes and the rank
// guard, results written once, idempotency keys, every read and list filter
// (compared with the SQLite store on the same data), jobs, rigs, load() and
// foreign writes with two brokers sharing one Redis, prune, a batch that fails
// while Redis is away and becomes durable when it is back, commit(), NOSCRIPT,
// and records that do not decode.
#include <doctest/doctest.h>
#include <uv.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../redis/redis_server.hpp"
#include "../store/store_test_support.hpp"
#include "redis/redis_store.hpp"
#include "store/record_codec.hpp"

using namespace fleetlink;
using namespace fleetlink::broker;
using namespace fleetlink::broker::redis;
using redis_test::RedisServer;
using store_test::command;
using store_test::id_at;
using store_test::result_of;

namespace {

constexpr std::uint64_t kT0 = 1'733'000'000'000;

struct Loop {
  uv_loop_t loop{};
  uv_timer_t tick{};
  Loop() {
    uv_loop_init(&loop);
    uv_timer_init(&loop, &tick);
    uv_timer_start(&tick, [](uv_timer_t*) {}, 5, 5);
  }
  ~Loop() {
    uv_close(reinterpret_cast<uv_handle_t*>(&tick), nullptr);
    for (int i = 0; i < 100 && uv_loop_alive(&loop); ++i) uv_run(&loop, UV_RUN_NOWAIT);
    uv_loop_close(&loop);
  }
  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds within = std::chrono::seconds(5)) {
    const auto until = std::chrono::steady_clock::now() + within;
    while (!done()) {
      if (std::chrono::steady_clock::now() > until) return false;
      uv_run(&loop, UV_RUN_ONCE);
    }
    return true;
  }
};

// One broker: its connection and its store.
struct Broker {
  std::unique_ptr<RedisConnection> conn;
  std::unique_ptr<RedisStore> store;
};

struct Fixture {
  RedisServer server;
  Loop loop;
  Broker a, b;

  Fixture() {
    a = make_broker();
    b = make_broker();
  }
  ~Fixture() {
    for (Broker* x : {&a, &b}) {
      x->store.reset();
      x->conn.reset();
    }
  }
  Broker make_broker() {
    Broker x;
    ConnectionOptions c;
    c.port = server.port();
    c.retry_min = std::chrono::milliseconds(20);
    c.retry_max = std::chrono::milliseconds(100);
    x.conn = std::make_unique<RedisConnection>(&loop.loop, c);
    RedisStoreOptions o;
    o.port = server.port();
    o.retry_min = std::chrono::milliseconds(20);
    o.retry_max = std::chrono::milliseconds(100);
    o.rows_per_call = 7;  // batches of several calls
    x.store = std::make_unique<RedisStore>(&loop.loop, *x.conn, o);
    RedisStore* s = x.store.get();
    x.conn->set_on_up([s] { s->connection_up(); });
    x.conn->start();
    REQUIRE(loop.run_until([&] { return x.conn->up(); }));
    return x;
  }
  RedisStore& sa() { return *a.store; }
  RedisStore& sb() { return *b.store; }

  // submit() and wait until that batch is durable.
  void flush(RedisStore& s) {
    const std::uint64_t n = s.submit();
    REQUIRE(loop.run_until([&] { return s.durable_through() >= n; }));
  }
  void write(RedisStore& s, const CommandView& v, bool with_result = false) {
    s.put_command(v, with_result);
    flush(s);
  }

  template <class T, class Call>
  T wait(Call&& call) {
    std::optional<T> out;
    call([&](T v) { out = std::move(v); });
    CHECK_FALSE(out.has_value());  // never answered before the call returns
    REQUIRE(loop.run_until([&] { return out.has_value(); }));
    return std::move(*out);
  }
  std::optional<CommandView> find(RedisStore& s, const std::string& id) {
    return wait<std::optional<CommandView>>([&](auto cb) { s.find(id, cb); });
  }
  std::optional<CommandView> find_by_key(RedisStore& s, const std::string& key) {
    return wait<std::optional<CommandView>>([&](auto cb) { s.find_by_key(key, cb); });
  }
  std::vector<CommandView> open_of(RedisStore& s, const std::string& rig) {
    return wait<std::vector<CommandView>>([&](auto cb) { s.open_commands_of(rig, cb); });
  }
  std::vector<CommandView> list(RedisStore& s, const CommandQuery& q) {
    return wait<std::vector<CommandView>>([&](auto cb) { s.list_commands(q, cb); });
  }
  std::optional<JobRecord> find_job(RedisStore& s, const std::string& id) {
    return wait<std::optional<JobRecord>>([&](auto cb) { s.find_job(id, cb); });
  }
  std::vector<JobRecord> list_jobs(RedisStore& s, const JobQuery& q) {
    return wait<std::vector<JobRecord>>([&](auto cb) { s.list_jobs(q, cb); });
  }
  Expected<std::size_t> prune(RedisStore& s, const RetentionPolicy& p, std::uint64_t now) {
    return wait<Expected<std::size_t>>([&](auto cb) { s.prune_then(p, now, cb); });
  }
  Reply raw(const std::vector<std::string>& argv) {
    std::optional<Expected<Reply>> out;
    a.conn->command(argv, [&](Expected<Reply> r) { out = std::move(r); });
    REQUIRE(loop.run_until([&] { return out.has_value(); }));
    REQUIRE(out->has_value());
    return **out;
  }
};

std::vector<std::string> ids(const std::vector<CommandView>& v) {
  std::vector<std::string> out;
  for (const auto& c : v) out.push_back(c.cmd_id);
  return out;
}

std::vector<std::string> job_ids(const std::vector<JobRecord>& v) {
  std::vector<std::string> out;
  for (const auto& j : v) out.push_back(j.job_id);
  return out;
}

CommandView finished(const std::string& id, const std::string& rig, CommandState s, const std::string& output) {
  CommandView v = command(id, rig, s);
  v.result = result_of(id, output);
  v.streamed_output = "tail:" + output;
  v.detail = "done";
  return v;
}

std::string output_of(const CommandView& v) {
  return v.result ? std::string(v.result->output.begin(), v.result->output.end()) : std::string("<none>");
}

}  // namespace

TEST_CASE("redis store: a command and its later steps, every field, answered later on the loop") {
  Fixture f;
  const std::string id = id_at(kT0);
  CHECK(f.sa().name() == "redis");
  CHECK(f.sa().durable());
  CHECK(f.sa().up());
  CHECK_FALSE(f.sa().pending());
  CHECK(f.sa().submit() == 0);  // nothing put: the previous number

  f.write(f.sa(), command(id, "rig-1", CommandState::queued));
  CHECK(f.sa().durable_through() == 1);
  auto outcomes = f.sa().take_outcomes();
  REQUIRE(outcomes.size() == 1);
  CHECK(outcomes[0].batch == 1);
  CHECK(outcomes[0].result);
  CHECK(f.raw({"HGET", "fl:cmd:" + id, "s"}).str == "0");
  CHECK(f.raw({"ZSCORE", "fl:open", id}).type == Reply::Type::string);

  CommandView v = finished(id, "rig-1", CommandState::failed, "boom");
  v.idempotency_key = "k1";  // identity stays the first write's: no key
  v.job_id = "job-ignored";
  v.args = {{"a", "1"}, {"b", "2"}};
  v.acked_boot_id = "boot-1";
  v.running_at_ms = kT0 + 5;
  v.cancel_requested_at_ms = kT0 + 6;
  v.duplicate = true;
  v.nack = msg::Nack{3, id, msg::NackReason::busy, "busy", 0};
  v.streamed_bytes = 10;
  v.stream_next_offset = 10;
  f.write(f.sa(), v, true);
  CHECK(f.sa().durable_through() == 2);
  CHECK(f.sa().backlog() == 0);

  // Read by the other broker: all from Redis.
  auto got = f.find(f.sb(), id);
  REQUIRE(got);
  CHECK(got->recorded);
  CHECK(got->state == CommandState::failed);
  CHECK(got->rig_id == "rig-1");
  CHECK(got->idempotency_key.empty());
  CHECK(got->job_id.empty());
  CHECK(got->args.size() == 2);
  CHECK(got->acked_boot_id == "boot-1");
  CHECK(got->running_at_ms == kT0 + 5);
  CHECK(got->finished_at_ms == kT0 + 3);
  CHECK(got->cancel_requested_at_ms == kT0 + 6);
  CHECK(got->duplicate);
  CHECK(output_of(*got) == "boom");
  REQUIRE(got->nack);
  CHECK(got->nack->reason == msg::NackReason::busy);
  CHECK(got->streamed_output == "tail:boom");
  CHECK(got->streamed_bytes == 10);
  CHECK_FALSE(f.find(f.sb(), id_at(kT0 + 1)));
  // Finished: out of the open indexes, in the finished one.
  CHECK(f.raw({"ZSCORE", "fl:open", id}).type == Reply::Type::nil);
  CHECK(f.raw({"ZSCORE", "fl:rigopen:rig-1", id}).type == Reply::Type::nil);
  CHECK(f.raw({"ZSCORE", "fl:done", id}).type == Reply::Type::string);
  CHECK(f.raw({"ZCARD", "fl:state:0"}).integer == 0);
  CHECK(f.raw({"ZCARD", "fl:state:5"}).integer == 1);
  const StoreCounters c = f.sa().counters();
  CHECK(c.commits == 2);
  CHECK(c.commit_failures == 0);
  CHECK(c.rows_written == 2);
}

TEST_CASE("redis store: the rank guard -- never back to an earlier state, nothing changes a finished one") {
  Fixture f;
  const std::string id = id_at(kT0);
  f.write(f.sa(), command(id, "r", CommandState::acked));
  f.write(f.sb(), command(id, "r", CommandState::sent));  // the other broker, late
  CHECK(f.find(f.sa(), id)->state == CommandState::acked);
  f.write(f.sa(), command(id, "r", CommandState::queued));
  CHECK(f.find(f.sa(), id)->state == CommandState::acked);
  f.write(f.sa(), command(id, "r", CommandState::acked));
  f.write(f.sa(), command(id, "r", CommandState::running));
  CHECK(f.find(f.sb(), id)->state == CommandState::running);

  CommandView done = finished(id, "r", CommandState::succeeded, "first");
  done.detail = "the first word";
  f.write(f.sa(), done, true);
  CommandView other = finished(id, "r", CommandState::timed_out, "second");
  other.detail = "too late";
  f.write(f.sb(), other, true);
  f.write(f.sb(), command(id, "r", CommandState::running));
  auto v = f.find(f.sb(), id);
  REQUIRE(v);
  CHECK(v->state == CommandState::succeeded);
  CHECK(v->detail == "the first word");
  CHECK(output_of(*v) == "first");
  CHECK(f.raw({"ZCARD", "fl:state:4"}).integer == 1);
  CHECK(f.raw({"ZCARD", "fl:state:6"}).integer == 0);
  CHECK(f.raw({"ZCARD", "fl:rigopen:r"}).integer == 0);

  // Step times combine as the SQLite store's do.
  const std::string id2 = id_at(kT0 + 1);
  CommandView a = command(id2, "r", CommandState::sent);
  a.attempts = 2;
  a.sent_at_ms = kT0 + 100;
  f.write(f.sa(), a);
  CommandView b = command(id2, "r", CommandState::acked);
  b.attempts = 1;
  b.sent_at_ms = kT0 + 50;
  b.acked_at_ms = kT0 + 200;
  f.write(f.sb(), b);
  CommandView c = command(id2, "r", CommandState::running);
  c.attempts = 1;
  c.sent_at_ms.reset();
  c.acked_at_ms = kT0 + 300;
  c.running_at_ms = kT0 + 310;
  f.write(f.sa(), c);
  auto got = f.find(f.sb(), id2);
  REQUIRE(got);
  CHECK(got->attempts == 2);
  CHECK(got->sent_at_ms == kT0 + 100);
  CHECK(got->acked_at_ms == kT0 + 200);
  CHECK(got->running_at_ms == kT0 + 310);
}

TEST_CASE("redis store: a result is written once, with the final state it came with") {
  Fixture f;
  const std::string a = id_at(kT0), b = id_at(kT0 + 1), c = id_at(kT0 + 2);
  f.write(f.sa(), command(a, "r", CommandState::succeeded));
  CHECK_FALSE(f.find(f.sa(), a)->result);
  f.write(f.sa(), finished(a, "r", CommandState::succeeded, "late"), true);
  CHECK(output_of(*f.find(f.sa(), a)) == "late");
  f.write(f.sb(), finished(a, "r", CommandState::succeeded, "again"), true);
  CHECK(output_of(*f.find(f.sa(), a)) == "late");

  f.write(f.sa(), command(b, "r", CommandState::timed_out));
  f.write(f.sb(), finished(b, "r", CommandState::succeeded, "lost the race"), true);
  auto vb = f.find(f.sa(), b);
  CHECK(vb->state == CommandState::timed_out);
  CHECK_FALSE(vb->result);

  CommandView open = command(c, "r", CommandState::running);
  open.result = result_of(c, "premature");
  f.write(f.sa(), open, true);
  CHECK_FALSE(f.find(f.sa(), c)->result);
  CHECK(f.raw({"HEXISTS", "fl:cmd:" + c, "res"}).integer == 0);
}

TEST_CASE("redis store: idempotency keys name the first command; a clash keeps the record, not the name") {
  Fixture f;
  const std::string a = id_at(kT0), b = id_at(kT0 + 1);
  CommandView va = command(a, "r", CommandState::queued);
  va.idempotency_key = "nightly-42";
  f.sa().put_command(va, false);
  // Pending: found by its key already.
  auto pending = f.find_by_key(f.sa(), "nightly-42");
  REQUIRE(pending);
  CHECK(pending->cmd_id == a);
  CHECK_FALSE(pending->recorded);
  f.flush(f.sa());
  va.state = CommandState::sent;
  f.write(f.sa(), va);
  CHECK(f.sa().stats().key_conflicts == 0);
  CHECK(f.find_by_key(f.sb(), "nightly-42")->state == CommandState::sent);
  CHECK_FALSE(f.find_by_key(f.sb(), ""));
  CHECK_FALSE(f.find_by_key(f.sb(), "other"));

  // The other broker took the same POST: its command is written without the key.
  CommandView vb = command(b, "r", CommandState::queued);
  vb.idempotency_key = "nightly-42";
  f.sb().put_command(vb, false);
  for (int i = 2; i < 20; ++i)
    f.sb().put_command(command(id_at(kT0 + static_cast<std::uint64_t>(i)), "r", CommandState::queued), false);
  CHECK(f.find_by_key(f.sb(), "nightly-42")->cmd_id == a);  // the stored owner wins over the pending claim
  f.flush(f.sb());
  CHECK(f.sb().stats().key_conflicts == 1);
  CHECK(f.find_by_key(f.sb(), "nightly-42")->cmd_id == a);
  auto stored_b = f.find(f.sa(), b);
  REQUIRE(stored_b);
  CHECK(stored_b->idempotency_key.empty());
  CHECK(f.raw({"ZCARD", "fl:cmds"}).integer == 20);
  CHECK(f.raw({"GET", "fl:idem:nightly-42"}).str == a);
}

TEST_CASE("redis store: open_commands_of -- a rig's open commands, oldest first, pending ones laid over") {
  Fixture f;
  std::vector<std::string> id;
  for (int i = 0; i < 8; ++i) id.push_back(id_at(kT0 + static_cast<std::uint64_t>(i)));
  f.sa().put_command(command(id[5], "rig-a", CommandState::sent), false);
  f.sa().put_command(command(id[4], "rig-a", CommandState::succeeded), false);
  f.sa().put_command(command(id[3], "rig-b", CommandState::queued), false);
  f.sa().put_command(command(id[2], "rig-a", CommandState::acked), false);
  f.sa().put_command(command(id[1], "rig-a", CommandState::queued), false);
  f.flush(f.sa());
  CHECK(ids(f.open_of(f.sb(), "rig-a")) == std::vector<std::string>{id[1], id[2], id[5]});
  CHECK(ids(f.open_of(f.sb(), "rig-b")) == std::vector<std::string>{id[3]});
  CHECK(f.open_of(f.sb(), "rig-c").empty());
  f.sa().put_command(command(id[2], "rig-a", CommandState::rejected), false);
  f.sa().put_command(command(id[6], "rig-a", CommandState::queued), false);
  f.sa().put_command(command(id[7], "rig-b", CommandState::queued), false);
  f.sa().put_command(command(id[4], "rig-a", CommandState::running), false);  // finished: stays so
  CHECK(ids(f.open_of(f.sa(), "rig-a")) == std::vector<std::string>{id[1], id[5], id[6]});
  CHECK(ids(f.open_of(f.sb(), "rig-a")) == std::vector<std::string>{id[1], id[2], id[5]});  // not written yet
  f.flush(f.sa());
  CHECK(ids(f.open_of(f.sb(), "rig-a")) == std::vector<std::string>{id[1], id[5], id[6]});
  CHECK(ids(f.open_of(f.sb(), "rig-b")) == std::vector<std::string>{id[3], id[7]});
}

TEST_CASE("redis store: list_commands -- newest first, every filter, paging; the same answers as SQLite") {
  Fixture f;
  store_test::TempDir tmp;
  auto sql = store_test::open_store(tmp.str());
  std::vector<std::string> id;
  std::mt19937 rng(7);
  for (int i = 0; i < 60; ++i) {
    const std::uint64_t t = kT0 + static_cast<std::uint64_t>(i) * 1000;
    id.push_back(id_at(t));
    const CommandState states[] = {CommandState::queued, CommandState::sent, CommandState::succeeded,
                                   CommandState::failed, CommandState::running};
    CommandView v = command(id.back(), i % 3 == 0 ? "rig-a" : (i % 3 == 1 ? "rig-b" : "rig-c"),
                            states[rng() % 5], t);
    if (i % 5 == 0) v.job_id = "job-5";
    if (i % 7 == 0) v.job_id = "job-7";
    if (is_final(v.state)) v.result = result_of(id.back(), "out");
    f.sa().put_command(v, true);
    sql->put_command(v, true);
  }
  f.flush(f.sa());
  REQUIRE(sql->commit());

  // The SQLite test's own checks.
  CommandQuery all;
  auto got = f.list(f.sb(), all);
  REQUIRE(got.size() == 60);
  CHECK(got.front().cmd_id == id[59]);
  CHECK(got.back().cmd_id == id[0]);
  CommandQuery since;
  since.since_ms = kT0 + 55'000;
  CHECK(ids(f.list(f.sb(), since)) == std::vector<std::string>{id[59], id[58], id[57], id[56], id[55]});
  since.since_ms = kT0 + 55'001;
  CHECK(f.list(f.sb(), since).size() == 4);
  CommandQuery none;
  none.limit = 0;
  CHECK(f.list(f.sb(), none).empty());

  // Every combination of filters, against SQLite.
  auto sqlite_list = [&](const CommandQuery& q) {
    std::vector<CommandView> out;
    sql->list_commands(q, [&](std::vector<CommandView> v) { out = std::move(v); });
    return ids(out);
  };
  const std::vector<std::string> rigs{"", "rig-a", "rig-c"};
  const std::vector<std::optional<CommandState>> states{std::nullopt, CommandState::queued, CommandState::succeeded,
                                                        CommandState::running, CommandState::cancelled};
  const std::vector<std::string> jobs{"", "job-5", "job-7", "job-none"};
  const std::vector<std::uint64_t> sinces{0, kT0 + 20'000};
  int compared = 0;
  for (const auto& rig : rigs)
    for (const auto& st : states)
      for (const auto& job : jobs)
        for (std::uint64_t s : sinces) {
          CommandQuery q;
          q.rig_id = rig;
          q.state = st;
          q.job_id = job;
          q.since_ms = s;
          q.limit = 1000;
          const auto expect = sqlite_list(q);
          CHECK(ids(f.list(f.sb(), q)) == expect);
          // Paged by 3 with before=: the same, in pieces.
          q.limit = 3;
          std::vector<std::string> seen;
          for (int pages = 0; pages < 100; ++pages) {
            auto p = f.list(f.sb(), q);
            if (p.empty()) break;
            CHECK(p.size() <= 3);
            for (auto& v : p) seen.push_back(v.cmd_id);
            q.before_cmd_id = p.back().cmd_id;
          }
          CHECK(seen == expect);
          ++compared;
        }
  CHECK(compared == 120);

  // Pending writes are in the answer: one leaves the queued ones, one joins.
  CommandQuery queued;
  queued.state = CommandState::queued;
  queued.limit = 3;
  const auto before = ids(f.list(f.sa(), queued));
  REQUIRE(before.size() == 3);
  f.sa().put_command(command(before[0], "rig-b", CommandState::failed), false);
  const std::string fresh = id_at(kT0 + 61'000);
  f.sa().put_command(command(fresh, "rig-b", CommandState::queued, kT0 + 61'000), false);
  const auto after = ids(f.list(f.sa(), queued));
  CHECK(after == std::vector<std::string>{fresh, before[1], before[2]});
  f.flush(f.sa());
  CHECK(ids(f.list(f.sb(), queued)) == after);
}

TEST_CASE("redis store: jobs -- find, list with filters, paging and heads; a finished job stays finished") {
  Fixture f;
  for (int i = 0; i < 10; ++i) {
    JobRecord j;
    j.job_id = id_at(kT0 + static_cast<std::uint64_t>(i) * 10);
    j.created_at_ms = kT0 + static_cast<std::uint64_t>(i) * 10;
    j.finished = i < 4;
    j.body = "{\"n\":" + std::to_string(i) + "}\nrig-1\nrig-2";
    f.sa().put_job(j);
  }
  f.flush(f.sa());
  const std::string j0 = id_at(kT0), j9 = id_at(kT0 + 90);
  auto got = f.find_job(f.sb(), j0);
  REQUIRE(got);
  CHECK(got->finished);
  CHECK(got->created_at_ms == kT0);
  CHECK(got->body == "{\"n\":0}\nrig-1\nrig-2");
  CHECK_FALSE(f.find_job(f.sb(), "nope"));

  JobRecord reopened = *got;
  reopened.finished = false;
  reopened.body = "stale";
  f.sb().put_job(reopened);
  CHECK(f.find_job(f.sb(), j0)->body == "{\"n\":0}\nrig-1\nrig-2");  // pending, combined
  f.flush(f.sb());
  CHECK(f.find_job(f.sa(), j0)->finished);
  CHECK(f.find_job(f.sa(), j0)->body == "{\"n\":0}\nrig-1\nrig-2");

  // An open one finishes.
  JobRecord j5 = *f.find_job(f.sa(), id_at(kT0 + 50));
  CHECK_FALSE(j5.finished);
  j5.finished = true;
  j5.body = "{\"n\":5,\"done\":true}";
  f.sa().put_job(j5);
  f.flush(f.sa());

  JobQuery all;
  auto jobs = f.list_jobs(f.sb(), all);
  REQUIRE(jobs.size() == 10);
  CHECK(jobs.front().job_id == j9);
  CHECK(jobs.back().job_id == j0);
  JobQuery open;
  open.finished = false;
  CHECK(f.list_jobs(f.sb(), open).size() == 5);
  JobQuery done;
  done.finished = true;
  CHECK(job_ids(f.list_jobs(f.sb(), done)) ==
        std::vector<std::string>{id_at(kT0 + 50), id_at(kT0 + 30), id_at(kT0 + 20), id_at(kT0 + 10), j0});
  JobQuery since;
  since.since_ms = kT0 + 70;
  CHECK(job_ids(f.list_jobs(f.sb(), since)) == std::vector<std::string>{j9, id_at(kT0 + 80), id_at(kT0 + 70)});
  JobQuery head;
  head.head_only = true;
  head.limit = 2;
  auto heads = f.list_jobs(f.sb(), head);
  REQUIRE(heads.size() == 2);
  CHECK(heads[0].body == "{\"n\":9}");
  CHECK(heads[1].body == "{\"n\":8}");
  JobQuery page;
  page.limit = 3;
  std::vector<std::string> seen;
  for (;;) {
    auto p = f.list_jobs(f.sb(), page);
    if (p.empty()) break;
    for (auto& j : p) seen.push_back(j.job_id);
    page.before_job_id = p.back().job_id;
  }
  CHECK(seen.size() == 10);
  CHECK(std::is_sorted(seen.rbegin(), seen.rend()));
  JobQuery zero;
  zero.limit = 0;
  CHECK(f.list_jobs(f.sb(), zero).empty());
}

TEST_CASE("redis store: two brokers -- rigs, load() of what the other wrote, foreign writes") {
  Fixture f;
  auto snap0 = f.sa().load();
  REQUIRE(snap0);
  CHECK(snap0->open_commands.empty());
  CHECK(snap0->rigs.empty());
  const std::uint64_t fw0 = f.sa().foreign_writes();

  RigRecord r;
  r.rig_id = "rig-1";
  r.boot_id = "boot-2";
  r.agent_version = "1.1";
  r.labels = {{"site", "lab"}};
  r.kinds = {"noop"};
  r.broker_id = "b";
  r.first_seen_ms = 500;
  r.last_seen_ms = 2000;
  f.sb().put_rig(r);
  f.flush(f.sb());
  RigRecord stale = r;
  stale.boot_id = "boot-1";
  stale.first_seen_ms = 100;
  stale.last_seen_ms = 1000;
  f.sa().put_rig(stale);
  RigRecord other = r;
  other.rig_id = "rig-0";
  f.sa().put_rig(other);
  for (int i = 0; i < 5; ++i)
    f.sb().put_command(command(id_at(kT0 + static_cast<std::uint64_t>(i)), "rig-1",
                               i == 2 ? CommandState::succeeded : CommandState::acked),
                       false);
  JobRecord job{id_at(kT0), kT0, false, "{}"};
  JobRecord done_job{id_at(kT0 + 1), kT0 + 1, true, "{}"};
  f.sb().put_job(job);
  f.sb().put_job(done_job);
  f.flush(f.sb());
  f.flush(f.sa());  // broker A's own write shows it broker B's in the counter
  CHECK(f.sa().stats().foreign_writes_seen >= 1);
  CHECK(f.sa().foreign_writes() != fw0);

  // A third broker starting now: every open command oldest first, every rig, the open jobs.
  Broker c = f.make_broker();
  auto snap = c.store->load();
  REQUIRE(snap);
  REQUIRE(snap->open_commands.size() == 4);
  CHECK(snap->open_commands[0].cmd_id == id_at(kT0));
  CHECK(snap->open_commands[3].cmd_id == id_at(kT0 + 4));
  CHECK(snap->open_commands[1].state == CommandState::acked);
  CHECK(snap->open_commands[1].recorded);
  REQUIRE(snap->rigs.size() == 2);
  CHECK(snap->rigs[0].rig_id == "rig-0");
  const RigRecord& got = snap->rigs[1];
  CHECK(got.boot_id == "boot-2");
  CHECK(got.last_seen_ms == 2000);
  CHECK(got.first_seen_ms == 100);
  CHECK(got.labels == r.labels);
  CHECK(got.kinds == r.kinds);
  CHECK(got.broker_id == "b");
  REQUIRE(snap->open_jobs.size() == 1);
  CHECK(snap->open_jobs[0].job_id == job.job_id);
  // Pending writes of the loading broker are laid over.
  c.store->put_command(command(id_at(kT0), "rig-1", CommandState::failed), false);
  c.store->put_command(command(id_at(kT0 + 9), "rig-1", CommandState::queued), false);
  auto snap2 = c.store->load();
  REQUIRE(snap2);
  CHECK(ids(snap2->open_commands) ==
        std::vector<std::string>{id_at(kT0 + 1), id_at(kT0 + 3), id_at(kT0 + 4), id_at(kT0 + 9)});
  REQUIRE(c.store->commit());
  c.store.reset();
  c.conn.reset();

  // foreign_writes(): a new number each time (documented).
  const std::uint64_t x = f.sa().foreign_writes();
  CHECK(f.sa().foreign_writes() != x);
}

TEST_CASE("redis store: prune by age and by count, finished commands and jobs only, bounded per call") {
  Fixture f;
  for (int i = 0; i < 20; ++i) {
    const std::uint64_t t = kT0 + static_cast<std::uint64_t>(i) * 1000;
    CommandView v = command(id_at(t), "rig-a", i % 4 == 0 ? CommandState::running : CommandState::succeeded, t);
    v.idempotency_key = "key-" + std::to_string(i);
    if (i < 10) v.job_id = "job-x";
    f.sa().put_command(v, false);
  }
  f.sa().put_job(JobRecord{id_at(kT0), kT0, true, "{}"});
  f.sa().put_job(JobRecord{id_at(kT0 + 1), kT0 + 1, false, "{}"});
  f.sa().put_job(JobRecord{id_at(kT0 + 50'000), kT0 + 50'000, true, "{}"});
  f.flush(f.sa());

  // Age: commands made before kT0 + 10 s (ids 0..9): the 7 finished ones; the finished job before it.
  RetentionPolicy age;
  age.max_age_ms = 10'000;
  auto gone = f.prune(f.sa(), age, kT0 + 20'000);
  REQUIRE(gone);
  CHECK(*gone == 8);
  CHECK(f.raw({"ZCARD", "fl:cmds"}).integer == 13);
  CHECK_FALSE(f.find(f.sb(), id_at(kT0 + 1000)));
  CHECK(f.find(f.sb(), id_at(kT0)));  // open: kept
  CHECK_FALSE(f.find_by_key(f.sb(), "key-1"));
  CHECK(f.raw({"EXISTS", "fl:idem:key-1"}).integer == 0);
  CHECK(f.raw({"EXISTS", "fl:idem:key-0"}).integer == 1);
  CHECK_FALSE(f.find_job(f.sb(), id_at(kT0)));
  CHECK(f.find_job(f.sb(), id_at(kT0 + 1)));  // open
  CHECK(f.find_job(f.sb(), id_at(kT0 + 50'000)));
  CHECK(f.raw({"ZCARD", "fl:jobcmds:job-x"}).integer == 3);
  CHECK(f.raw({"ZCARD", "fl:state:4"}).integer == 8);

  // Count: at most 10 commands: the 3 oldest finished go (ids 10, 11 ... not 12: open).
  RetentionPolicy count;
  count.max_age_ms = 0;
  count.max_commands = 10;
  gone = f.prune(f.sa(), count, kT0 + 20'000);
  REQUIRE(gone);
  CHECK(*gone == 3);
  CHECK(f.raw({"ZCARD", "fl:cmds"}).integer == 10);
  CHECK_FALSE(f.find(f.sb(), id_at(kT0 + 10'000)));
  CHECK_FALSE(f.find(f.sb(), id_at(kT0 + 13'000)));
  CHECK(f.find(f.sb(), id_at(kT0 + 14'000)));

  // prune(): sent now, counted at the next call; bounded per call.
  RedisStoreOptions o = f.sa().options();
  o.prune_max_per_call = 2;
  auto small = std::make_unique<RedisStore>(&f.loop.loop, *f.a.conn, o);
  count.max_commands = 0;  // every finished one may go
  CHECK(small->prune(count, kT0) == 0);
  f.loop.run_until([] { return false; }, std::chrono::milliseconds(100));
  CHECK(small->prune(count, kT0) == 2);
  f.loop.run_until([] { return false; }, std::chrono::milliseconds(100));
  CHECK(small->prune(count, kT0) == 2);
  f.loop.run_until([] { return false; }, std::chrono::milliseconds(100));
  CHECK(f.raw({"ZCARD", "fl:cmds"}).integer == 5);  // the open ones
  CHECK(f.raw({"ZCARD", "fl:done"}).integer == 0);
  small.reset();
}

TEST_CASE("redis store: a batch submitted while Redis is away fails, is tried again, and is durable when it is back") {
  Fixture f;
  const std::string id = id_at(kT0);
  f.write(f.sa(), command(id_at(kT0 - 1), "r", CommandState::queued));
  (void)f.sa().take_outcomes();
  bool woken = false;
  f.sa().set_wakeup([&] { woken = true; });

  f.server.stop();
  REQUIRE(f.loop.run_until([&] { return !f.a.conn->up() && !f.b.conn->up(); }));
  CHECK_FALSE(f.sa().up());
  f.sa().put_command(command(id, "r", CommandState::queued), false);
  const std::uint64_t n = f.sa().submit();
  CHECK(n == 2);
  CHECK(f.sa().backlog() == 1);
  REQUIRE(f.loop.run_until([&] { return woken; }));
  auto outcomes = f.sa().take_outcomes();
  REQUIRE(outcomes.size() == 1);
  CHECK(outcomes[0].batch == 2);
  CHECK_FALSE(outcomes[0].result);
  CHECK(f.sa().durable_through() == 1);
  // A later batch queues behind it.
  f.sa().put_command(command(id, "r", CommandState::sent), false);
  CHECK(f.sa().submit() == 3);
  CHECK(f.sa().backlog() == 2);
  // Reads answer empty, later.
  CHECK_FALSE(f.find(f.sa(), id_at(kT0 - 1)));
  CHECK(f.list(f.sa(), CommandQuery{}).empty());
  CHECK(f.sa().counters().commit_failures >= 2);
  outcomes = f.sa().take_outcomes();  // batch 3 failed too, reported once; batch 2 is not reported again
  REQUIRE(outcomes.size() == 1);
  CHECK(outcomes[0].batch == 3);
  CHECK_FALSE(outcomes[0].result);

  f.server.start();  // an empty server (no persistence): the script is gone too
  REQUIRE(f.loop.run_until([&] { return f.sa().durable_through() == 3; }, std::chrono::seconds(5)));
  CHECK(f.sa().backlog() == 0);
  CHECK(f.sa().take_outcomes().empty());  // each batch's outcome once: their successes show in durable_through()
  auto v = f.find(f.sb(), id);
  REQUIRE(v);
  CHECK(v->state == CommandState::sent);
  CHECK(f.sa().stats().script_loads >= 2);
  f.sa().set_wakeup({});
}

TEST_CASE("redis store: commit() writes what was put and submitted, and fails cleanly while Redis is away") {
  Fixture f;
  CHECK(f.sa().commit());  // nothing to do
  f.sa().put_command(command(id_at(kT0), "r", CommandState::queued), false);
  f.sa().submit();  // in flight on the async connection, never waited for
  f.sa().put_command(command(id_at(kT0 + 1), "r", CommandState::queued), false);
  REQUIRE(f.sa().commit());
  CHECK(f.sa().durable_through() == 2);
  CHECK_FALSE(f.sa().pending());
  CHECK(f.raw({"ZCARD", "fl:cmds"}).integer == 2);
  auto outcomes = f.sa().take_outcomes();
  REQUIRE(outcomes.size() == 2);
  CHECK(outcomes[0].result);
  CHECK(outcomes[1].result);

  f.server.stop();
  REQUIRE(f.loop.run_until([&] { return !f.a.conn->up(); }));
  f.sa().put_command(command(id_at(kT0 + 2), "r", CommandState::queued), false);
  auto r = f.sa().commit();
  REQUIRE_FALSE(r);
  CHECK(r.error().detail.find("redis") != std::string::npos);
  CHECK(f.sa().durable_through() == 2);
  CHECK(f.sa().backlog() == 1);
  CHECK_FALSE(f.sa().load());

  f.server.start();
  REQUIRE(f.sa().commit());  // a new synchronous connection
  CHECK(f.sa().durable_through() == 3);
  CHECK(f.sa().backlog() == 0);
  REQUIRE(f.loop.run_until([&] { return f.a.conn->up(); }));
  CHECK(f.find(f.sa(), id_at(kT0 + 2)));
}

TEST_CASE("redis store: the script is loaded again after NOSCRIPT; records that do not decode are left out") {
  Fixture f;
  const std::string good = id_at(kT0), bad = id_at(kT0 + 1), worse = id_at(kT0 + 2);
  f.sa().put_command(command(good, "r", CommandState::queued), false);
  f.sa().put_command(command(bad, "r", CommandState::queued), false);
  f.sa().put_command(command(worse, "r", CommandState::queued), false);
  f.flush(f.sa());
  const auto loads = f.sa().stats().script_loads;
  CHECK(f.raw({"SCRIPT", "FLUSH"}).str == "OK");
  CHECK(f.find(f.sa(), good));
  CHECK(f.sa().stats().script_loads == loads + 1);

  f.raw({"HSET", "fl:cmd:" + bad, "b", "\xff not a blob"});
  f.raw({"HSET", "fl:cmd:" + worse, "e", "yesterday"});
  CHECK_FALSE(f.find(f.sb(), bad));
  CHECK_FALSE(f.find(f.sb(), worse));
  CHECK(ids(f.list(f.sb(), CommandQuery{})) == std::vector<std::string>{good});
  CHECK(ids(f.open_of(f.sb(), "r")) == std::vector<std::string>{good});
  CHECK(f.sb().stats().unreadable_rows >= 4);
  // load() refuses an open command it cannot read, as the SQLite store does.
  auto snap = f.sb().load();
  REQUIRE_FALSE(snap);
  CHECK(snap.error().code == Errc::malformed);

  // A damaged state is overwritten by the next write, not a script error.
  f.raw({"HSET", "fl:cmd:" + bad, "s", "garbage"});
  f.write(f.sa(), command(bad, "r", CommandState::sent));
  CHECK(f.find(f.sb(), bad)->state == CommandState::sent);
  // A damaged rig or job: left out of reads, load() refuses the rig.
  f.raw({"HSET", "fl:job:bogus", "c", "x", "f", "0", "b", "{}"});
  f.raw({"ZADD", "fl:jobs", "0", "bogus"});
  CHECK(f.list_jobs(f.sb(), JobQuery{}).empty());
  CHECK_FALSE(f.find_job(f.sb(), "bogus"));
  f.raw({"DEL", "fl:cmd:" + worse});
  f.raw({"HSET", "fl:rigs", "rig-x", "no times"});
  CHECK_FALSE(f.sb().load());
  f.raw({"HDEL", "fl:rigs", "rig-x"});
  auto ok = f.sb().load();
  REQUIRE_MESSAGE(ok, ok.error().detail);
  CHECK(ok->open_commands.size() == 2);
}
