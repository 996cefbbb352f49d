// The registry script and its client against a real redis-server: who wins a
// HELLO, who may refresh, the race the seeds describe (a stale refresh landing
// after the new owner's HELLO), a HELLO that loses to a newer boot, TTLs, a
// NOSCRIPT after the server forgot the script, and Redis going away and back.
#include <doctest/doctest.h>
#include <uv.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "redis/redis_registry.hpp"
#include "redis_server.hpp"

using namespace fleetlink;
using namespace fleetlink::broker;
using namespace fleetlink::broker::redis;
using redis_test::RedisServer;

namespace {

// UUIDv7 text: later boots sort later.
const std::string kBootOld = "01937ed9-7200-7000-8000-000000000001";
const std::string kBootNew = "01937ed9-7300-7000-8000-000000000002";
const std::string kBootNewer = "01937ed9-7400-7000-8000-000000000003";

struct Loop {
  uv_loop_t loop{};
  uv_timer_t tick{};
  Loop() {
    uv_loop_init(&loop);
    uv_timer_init(&loop, &tick);
    uv_timer_start(&tick, [](uv_timer_t*) {}, 5, 5);  // the loop wakes to look at the predicate
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

struct Fixture {
  RedisServer server;
  Loop loop;
  std::unique_ptr<RedisConnection> conn;
  std::unique_ptr<RedisRegistry> reg;

  explicit Fixture(RegistryOptions options = {}) {
    ConnectionOptions c;
    c.port = server.port();
    c.retry_min = std::chrono::milliseconds(20);
    c.retry_max = std::chrono::milliseconds(100);
    conn = std::make_unique<RedisConnection>(&loop.loop, c);
    conn->start();
    REQUIRE(loop.run_until([&] { return conn->up(); }));
    reg = std::make_unique<RedisRegistry>(*conn, options);
  }
  ~Fixture() {
    reg.reset();
    conn.reset();
  }

  Expected<ClaimReply> claim(const std::string& rig, const std::string& boot, const std::string& broker,
                             bool force = false) {
    std::optional<Expected<ClaimReply>> out;
    reg->claim(rig, boot, broker, force, 0, [&](Expected<ClaimReply> r) { out = std::move(r); });
    REQUIRE(loop.run_until([&] { return out.has_value(); }));
    return std::move(*out);
  }
  Expected<RefreshReply> refresh(const std::string& rig, const std::string& boot, const std::string& broker) {
    std::optional<Expected<RefreshReply>> out;
    reg->refresh(rig, boot, broker, 0, [&](Expected<RefreshReply> r) { out = std::move(r); });
    REQUIRE(loop.run_until([&] { return out.has_value(); }));
    return std::move(*out);
  }
  Expected<bool> release(const std::string& rig, const std::string& boot, const std::string& broker) {
    std::optional<Expected<bool>> out;
    reg->release_then(rig, boot, broker, [&](Expected<bool> r) { out = std::move(r); });
    REQUIRE(loop.run_until([&] { return out.has_value(); }));
    return std::move(*out);
  }
  std::optional<RegistryEntry> lookup(const std::string& rig) {
    std::optional<Expected<std::optional<RegistryEntry>>> out;
    reg->lookup(rig, 0, [&](Expected<std::optional<RegistryEntry>> r) { out = std::move(r); });
    REQUIRE(loop.run_until([&] { return out.has_value(); }));
    REQUIRE(out->has_value());
    return **out;
  }
  Expected<ClaimReply> claim_job(const std::string& job, const std::string& broker, bool force = false) {
    std::optional<Expected<ClaimReply>> out;
    reg->claim_job(job, broker, force, 0, [&](Expected<ClaimReply> r) { out = std::move(r); });
    REQUIRE(loop.run_until([&] { return out.has_value(); }));
    return std::move(*out);
  }
  Expected<RefreshReply> refresh_job(const std::string& job, const std::string& broker) {
    std::optional<Expected<RefreshReply>> out;
    reg->refresh_job(job, broker, 0, [&](Expected<RefreshReply> r) { out = std::move(r); });
    REQUIRE(loop.run_until([&] { return out.has_value(); }));
    return std::move(*out);
  }
  Reply raw(const std::vector<std::string>& argv) {
    std::optional<Expected<Reply>> out;
    conn->command(argv, [&](Expected<Reply> r) { out = std::move(r); });
    REQUIRE(loop.run_until([&] { return out.has_value(); }));
    REQUIRE(out->has_value());
    return **out;
  }
};

}  // namespace

TEST_CASE("redis registry: HELLO wins a free key, again for the same owner, and only with a newer boot_id") {
  Fixture f;
  auto r = f.claim("rig-1", kBootNew, "broker-a");
  REQUIRE(r);
  CHECK(r->outcome == ClaimOutcome::won);
  CHECK(f.raw({"GET", "rig:rig-1"}).str == kBootNew + "|broker-a");
  const Reply ttl = f.raw({"PTTL", "rig:rig-1"});
  CHECK(ttl.integer > 55'000);
  CHECK(ttl.integer <= 60'000);

  r = f.claim("rig-1", kBootNew, "broker-a");  // the same connection's HELLO again
  REQUIRE(r);
  CHECK(r->outcome == ClaimOutcome::won);

  // An older boot, or the same boot on another broker (a clone), loses; the key stays.
  for (const auto& [boot, broker] : {std::pair{kBootOld, std::string("broker-b")}, std::pair{kBootNew, std::string("broker-b")}}) {
    r = f.claim("rig-1", boot, broker);
    REQUIRE(r);
    CHECK(r->outcome == ClaimOutcome::lost);
    REQUIRE(r->before);
    CHECK(r->before->boot_id == kBootNew);
    CHECK(r->before->broker_id == "broker-a");
  }
  CHECK(f.raw({"GET", "rig:rig-1"}).str == kBootNew + "|broker-a");

  // A newer boot on another broker supersedes, and says whom.
  r = f.claim("rig-1", kBootNewer, "broker-b");
  REQUIRE(r);
  CHECK(r->outcome == ClaimOutcome::superseded);
  REQUIRE(r->before);
  CHECK(r->before->broker_id == "broker-a");
  auto owner = f.lookup("rig-1");
  REQUIRE(owner);
  CHECK(owner->boot_id == kBootNewer);
  CHECK(owner->broker_id == "broker-b");
  CHECK_FALSE(f.lookup("rig-none"));
}

TEST_CASE("redis registry: a HELLO that loses to a newer boot leaves the newer owner in place") {
  Fixture f;
  REQUIRE(f.claim("rig-2", kBootNewer, "broker-b")->outcome == ClaimOutcome::won);
  auto late = f.claim("rig-2", kBootNew, "broker-a");  // an older process reconnecting late
  REQUIRE(late);
  CHECK(late->outcome == ClaimOutcome::lost);
  CHECK(late->before->boot_id == kBootNewer);
  CHECK(f.lookup("rig-2")->broker_id == "broker-b");
  // Forced (the calling broker knows the other connection is dead): it takes it.
  auto forced = f.claim("rig-2", kBootNew, "broker-a", true);
  REQUIRE(forced);
  CHECK(forced->outcome == ClaimOutcome::superseded);
  CHECK(f.lookup("rig-2")->broker_id == "broker-a");
}

TEST_CASE("redis registry: the seeds' race -- a stale refresh after the new owner's HELLO is superseded") {
  Fixture f;
  REQUIRE(f.claim("rig-3", kBootOld, "broker-a")->outcome == ClaimOutcome::won);
  auto ok = f.refresh("rig-3", kBootOld, "broker-a");
  REQUIRE(ok);
  CHECK(ok->outcome == RefreshOutcome::extended);
  // The rig rebooted and said HELLO on broker B; broker A's refresh timer fires afterwards.
  REQUIRE(f.claim("rig-3", kBootNew, "broker-b")->outcome == ClaimOutcome::superseded);
  auto stale = f.refresh("rig-3", kBootOld, "broker-a");
  REQUIRE(stale);
  CHECK(stale->outcome == RefreshOutcome::superseded);
  REQUIRE(stale->owner);
  CHECK(stale->owner->broker_id == "broker-b");
  // The stale refresh changed nothing: B still owns it, with B's TTL.
  CHECK(f.raw({"GET", "rig:rig-3"}).str == kBootNew + "|broker-b");
  // Nor does a stale release.
  auto kept = f.release("rig-3", kBootOld, "broker-a");
  REQUIRE(kept);
  CHECK_FALSE(*kept);
  CHECK(f.lookup("rig-3"));
  auto gone = f.release("rig-3", kBootNew, "broker-b");
  REQUIRE(gone);
  CHECK(*gone);
  CHECK_FALSE(f.lookup("rig-3"));
}

TEST_CASE("redis registry: the TTL ends an unrefreshed key; a refresh of a live connection writes it again") {
  RegistryOptions o;
  o.ttl = std::chrono::milliseconds(300);
  Fixture f(o);
  REQUIRE(f.claim("rig-4", kBootNew, "broker-a")->outcome == ClaimOutcome::won);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) {  // refreshed every 150 ms: alive past its 300 ms TTL
    f.loop.run_until([&] { return std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(150 * (i + 1)); },
                     std::chrono::seconds(2));
    REQUIRE(f.refresh("rig-4", kBootNew, "broker-a")->outcome == RefreshOutcome::extended);
  }
  CHECK(f.lookup("rig-4"));
  // Left alone, it expires; anyone's HELLO then wins it.
  REQUIRE(f.loop.run_until([&] { return !f.lookup("rig-4"); }, std::chrono::seconds(3)));
  // Redis lost the key (expiry, a restart without persistence) under a live connection: restored.
  auto back = f.refresh("rig-4", kBootNew, "broker-a");
  REQUIRE(back);
  CHECK(back->outcome == RefreshOutcome::restored);
  CHECK(f.lookup("rig-4")->broker_id == "broker-a");
}

TEST_CASE("redis registry: a job's hold -- one broker drives it; another takes it only when forced") {
  Fixture f;
  auto a = f.claim_job("job-1", "broker-a");
  REQUIRE(a);
  CHECK(a->outcome == ClaimOutcome::won);
  CHECK(f.raw({"GET", "jobhold:job-1"}).str == "job|broker-a");
  CHECK(f.raw({"PTTL", "jobhold:job-1"}).integer > 55'000);
  CHECK(f.claim_job("job-1", "broker-a")->outcome == ClaimOutcome::won);  // its own again (a restart)
  // Another broker's claim loses, naming the holder, and changes nothing.
  auto b = f.claim_job("job-1", "broker-b");
  REQUIRE(b);
  CHECK(b->outcome == ClaimOutcome::lost);
  REQUIRE(b->before);
  CHECK(b->before->broker_id == "broker-a");
  CHECK(f.refresh_job("job-1", "broker-a")->outcome == RefreshOutcome::extended);
  // The holder is gone (its channel is empty): forced, B holds it; A's late renewal is superseded.
  CHECK(f.claim_job("job-1", "broker-b", true)->outcome == ClaimOutcome::superseded);
  auto late = f.refresh_job("job-1", "broker-a");
  REQUIRE(late);
  CHECK(late->outcome == RefreshOutcome::superseded);
  REQUIRE(late->owner);
  CHECK(late->owner->broker_id == "broker-b");
  CHECK(f.raw({"GET", "jobhold:job-1"}).str == "job|broker-b");
  // A rig of the same name is another key.
  CHECK(f.claim("job-1", kBootNew, "broker-a")->outcome == ClaimOutcome::won);
}

TEST_CASE("redis registry: the script is loaded once, called by SHA, and loaded again after NOSCRIPT") {
  Fixture f;
  REQUIRE(f.claim("rig-5", kBootNew, "broker-a")->outcome == ClaimOutcome::won);
  REQUIRE(f.refresh("rig-5", kBootNew, "broker-a"));
  CHECK(f.reg->script_loads() == 1);
  CHECK(f.raw({"SCRIPT", "FLUSH"}).str == "OK");
  auto r = f.refresh("rig-5", kBootNew, "broker-a");
  REQUIRE(r);
  CHECK(r->outcome == RefreshOutcome::extended);
  CHECK(f.reg->script_loads() == 2);
  // Nothing but the script writes a rig key: an unknown op is an error reply, not a write.
  const Reply bad = f.raw({"EVAL", kRegistryScript, "1", "rig:rig-5", "drop", kBootNew, "broker-a", "1000", "0"});
  CHECK(bad.is_error());
  CHECK(bad.str.find("unknown op") != std::string::npos);
}

TEST_CASE("redis registry: Redis away -- every call answers an Error at once; back -- the connection is made again") {
  Fixture f;
  REQUIRE(f.claim("rig-6", kBootNew, "broker-a")->outcome == ClaimOutcome::won);
  f.server.stop();
  REQUIRE(f.loop.run_until([&] { return !f.conn->up(); }));
  bool answered = false;
  f.reg->claim("rig-6", kBootNew, "broker-a", false, 0, [&](Expected<ClaimReply> r) {
    answered = true;
    CHECK_FALSE(r);
    CHECK(r.error().detail.find("not connected") != std::string::npos);
  });
  CHECK(answered);
  f.server.start();  // the same port, an empty server (no persistence): the key and the script are gone
  REQUIRE(f.loop.run_until([&] { return f.conn->up(); }, std::chrono::seconds(5)));
  CHECK(f.conn->connects() == 2);
  auto r = f.refresh("rig-6", kBootNew, "broker-a");
  REQUIRE(r);
  CHECK(r->outcome == RefreshOutcome::restored);  // re-registered, with the script loaded again
  CHECK(f.reg->script_loads() == 2);
}

TEST_CASE("registry script replies: malformed ones are errors") {
  CHECK_FALSE(parse_claim_reply("won"));
  CHECK_FALSE(parse_claim_reply("maybe|x|y"));
  CHECK_FALSE(parse_claim_reply("lost|no-separator"));
  CHECK(parse_claim_reply("lost|b|k")->before->broker_id == "k");
  CHECK_FALSE(parse_refresh_reply("superseded|"));
  CHECK(parse_refresh_reply("restored|")->outcome == RefreshOutcome::restored);
  CHECK_FALSE(parse_release_reply("deleted|"));
  CHECK(*parse_release_reply("released|"));
  CHECK(parse_entry("b|broker|with|bars")->broker_id == "broker|with|bars");
  CHECK(entry_value("b", "k") == "b|k");
}
