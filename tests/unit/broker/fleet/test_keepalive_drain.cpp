#include <doctest/doctest.h>

#include <algorithm>

#include "fleet/drain.hpp"
#include "store/embedded_registry.hpp"
#include "fleet/keepalive.hpp"

using namespace fleetlink::broker;

TEST_CASE("keepalive: ping every interval, dead after N consecutive misses") {
  KeepaliveSettings s{100, 50, 3};
  KeepaliveState k;
  k.start(0, s);
  CHECK(k.tick(50, s) == KeepaliveAction::none);
  CHECK(k.tick(100, s) == KeepaliveAction::send_ping);
  k.ping_sent(100, s);
  CHECK(k.tick(149, s) == KeepaliveAction::none);
  CHECK(k.tick(150, s) == KeepaliveAction::none);  // miss 1, next ping at 200
  CHECK(k.missed == 1);
  CHECK(k.tick(200, s) == KeepaliveAction::send_ping);
  k.ping_sent(200, s);
  CHECK(k.tick(250, s) == KeepaliveAction::none);  // miss 2
  CHECK(k.tick(300, s) == KeepaliveAction::send_ping);
  k.ping_sent(300, s);
  CHECK(k.tick(350, s) == KeepaliveAction::dead);  // miss 3
}

TEST_CASE("keepalive: a pong resets the miss count") {
  KeepaliveSettings s{100, 50, 3};
  KeepaliveState k;
  k.start(0, s);
  k.ping_sent(100, s);
  k.tick(150, s);
  CHECK(k.missed == 1);
  k.ping_sent(200, s);
  k.pong(210, s);
  CHECK(k.missed == 0);
  CHECK(k.tick(260, s) == KeepaliveAction::none);
  CHECK(k.tick(300, s) == KeepaliveAction::send_ping);
}

TEST_CASE("keepalive: the 32-bit ms clock may wrap") {
  KeepaliveSettings s{100, 50, 1};
  KeepaliveState k;
  std::uint32_t t0 = 0xFFFFFFF0u;
  k.start(t0, s);
  CHECK(k.tick(t0 + 50, s) == KeepaliveAction::none);
  CHECK(k.tick(t0 + 100, s) == KeepaliveAction::send_ping);
  k.ping_sent(t0 + 100, s);
  CHECK(k.tick(t0 + 160, s) == KeepaliveAction::dead);
}

TEST_CASE("keepalive: sweep interval is a quarter of the shortest deadline, bounded") {
  KeepaliveSettings s{20000, 10000, 3};
  CHECK(s.sweep_interval_ms(10000) == 1000);
  KeepaliveSettings fast{100, 40, 3};
  CHECK(fast.sweep_interval_ms(1000) == 10);
  KeepaliveSettings tiny{2, 1, 3};
  CHECK(tiny.sweep_interval_ms(1) == 1);
}

TEST_CASE("drain spread: every slot of the window gets exactly one rig") {
  std::mt19937_64 rng(42);
  const std::size_t n = 200;
  const std::uint32_t window = 2000;
  auto d = drain_spread(n, window, rng);
  REQUIRE(d.size() == n);
  std::vector<int> buckets(n, 0);
  for (auto ms : d) {
    CHECK(ms <= window);
    ++buckets[std::min<std::size_t>(n - 1, ms * n / window)];
  }
  for (int b : buckets) CHECK(b == 1);
  // Shuffled: not handed out in slot order.
  CHECK_FALSE(std::is_sorted(d.begin(), d.end()));
  CHECK(drain_spread(0, window, rng).empty());
}

TEST_CASE("embedded registry: newer boot wins, exact owner refreshes, TTL expires") {
  EmbeddedRegistry r(1000);
  CHECK(r.claim_now("rig", "b1", "brokerA", false, 0).outcome == ClaimOutcome::won);
  CHECK(r.claim_now("rig", "b1", "brokerA", false, 10).outcome == ClaimOutcome::won);
  const ClaimResult lost = r.claim_now("rig", "b0", "brokerB", false, 10);
  CHECK(lost.outcome == ClaimOutcome::lost);
  CHECK(lost.before == RegistryEntry{"b1", "brokerA"});
  const ClaimResult taken = r.claim_now("rig", "b2", "brokerB", false, 10);
  CHECK(taken.outcome == ClaimOutcome::superseded);
  CHECK(taken.before == RegistryEntry{"b1", "brokerA"});
  const RefreshResult stale = r.refresh_now("rig", "b1", "brokerA", 20);
  CHECK(stale.outcome == RefreshOutcome::superseded);
  CHECK(stale.owner == RegistryEntry{"b2", "brokerB"});
  CHECK(r.refresh_now("rig", "b2", "brokerB", 20).outcome == RefreshOutcome::extended);
  r.release("rig", "b1", "brokerA");  // not the owner: no effect
  CHECK(r.lookup_now("rig", 30).has_value());
  CHECK_FALSE(r.lookup_now("rig", 2000).has_value());
  CHECK(r.claim_now("rig", "b0", "brokerA", false, 2000).outcome == ClaimOutcome::superseded);  // expired
  r.release("rig", "b0", "brokerA");
  CHECK(r.size() == 0);
  // A refresh for an entry that went (a registry restarted empty) writes it again.
  CHECK(r.refresh_now("rig", "b3", "brokerA", 3000).outcome == RefreshOutcome::restored);
  CHECK(r.lookup_now("rig", 3001) == RegistryEntry{"b3", "brokerA"});
  // The callback forms answer before they return.
  bool answered = false;
  r.claim("rig", "b3", "brokerA", false, 3002, [&](fleetlink::Expected<ClaimResult> c) {
    answered = c && c->outcome == ClaimOutcome::won;
  });
  CHECK(answered);
}

#include "fleet/rate_limiter.hpp"

TEST_CASE("rate limiter: burst, then rate per second") {
  RateLimiter r(3, 0);
  CHECK(r.try_take(0, 10, 3));
  CHECK(r.try_take(0, 10, 3));
  CHECK(r.try_take(0, 10, 3));
  CHECK_FALSE(r.try_take(0, 10, 3));
  CHECK_FALSE(r.try_take(50, 10, 3));  // half a token
  CHECK(r.try_take(100, 10, 3));       // one token after 100 ms at 10/s
  CHECK(r.try_take(10'000, 10, 3));    // capped at burst
  CHECK(r.try_take(10'000, 10, 3));
  CHECK(r.try_take(10'000, 10, 3));
  CHECK_FALSE(r.try_take(10'000, 10, 3));
  CHECK(sizeof(RateLimiter) == 8);
}

TEST_CASE("rate limiter: available() peeks without taking") {
  RateLimiter r(1, 0);
  CHECK(r.available(0, 10, 1) == doctest::Approx(1.0));
  CHECK(r.try_take(0, 10, 1));
  CHECK(r.available(0, 10, 1) == doctest::Approx(0.0));
  CHECK(r.available(50, 10, 1) == doctest::Approx(0.5));
  CHECK(r.available(500, 10, 1) == doctest::Approx(1.0));  // capped at burst
  CHECK(r.available(50, 10, 1) == doctest::Approx(0.5));   // still not taken
}
