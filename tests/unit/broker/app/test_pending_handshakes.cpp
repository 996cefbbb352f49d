// The bookkeeping of the accept gate (net/accept_gate.hpp): handshakes in flight,
// per source address, and out-of-descriptor episodes.
#include <doctest/doctest.h>

#include <optional>
#include <string>

#include "net/accept_gate.hpp"

using fleetlink::broker::AddressCounts;
using fleetlink::broker::FdExhaustion;
using fleetlink::broker::PendingHandshakes;

TEST_CASE("pending handshakes: full at the limit, room again when one finishes") {
  PendingHandshakes p(2, 1000);
  int a = 0, b = 0, c = 0;
  p.started(&a, 0);
  CHECK_FALSE(p.full());
  p.started(&b, 0);
  CHECK(p.full());
  CHECK(p.finished(&a).has_value());
  CHECK_FALSE(p.full());
  CHECK_FALSE(p.finished(&a).has_value());   // reported twice (ESTABLISHED then destroy): counted once
  CHECK_FALSE(p.finished(&c).has_value());   // never pending (an established connection's destroy)
  CHECK(p.count() == 1);
}

TEST_CASE("pending handshakes: a reused key is not counted twice") {
  PendingHandshakes p(4, 1000);
  int a = 0;
  p.started(&a, 0);
  p.started(&a, 5);
  CHECK(p.count() == 1);
}

TEST_CASE("pending handshakes: an end never reported expires") {
  PendingHandshakes p(2, 1000);
  int a = 0, b = 0;
  p.started(&a, 0);
  p.started(&b, 800);
  CHECK(p.expire(1000).empty());
  CHECK(p.expire(1001).size() == 1);
  CHECK(p.count() == 1);
  CHECK(p.expire(1801).size() == 1);
  CHECK(p.count() == 0);
}

TEST_CASE("pending handshakes: the address comes back when it ends, and overdue ones are named") {
  PendingHandshakes p(4, 60000);
  int a = 0, b = 0;
  p.started(&a, 0, "10.0.0.1");
  p.started(&b, 500, "10.0.0.2");
  CHECK(p.overdue(999, 1000).empty());
  auto late = p.overdue(1000, 1000);
  REQUIRE(late.size() == 1);
  CHECK(late[0] == &a);
  CHECK(p.contains(&a));
  CHECK(p.finished(&a) == std::optional<std::string>("10.0.0.1"));
  CHECK_FALSE(p.contains(&a));
  CHECK(p.overdue(1400, 1000).empty());
  CHECK(p.overdue(1500, 1000).size() == 1);
}

TEST_CASE("address counts: bounded per address, others unaffected; 0 is no bound") {
  AddressCounts c(2);
  CHECK(c.try_add("127.0.0.2"));
  CHECK(c.try_add("127.0.0.2"));
  CHECK_FALSE(c.try_add("127.0.0.2"));
  CHECK(c.count("127.0.0.2") == 2);
  CHECK(c.try_add("127.0.0.1"));
  c.remove("127.0.0.2");
  CHECK(c.try_add("127.0.0.2"));
  c.remove("127.0.0.2");
  c.remove("127.0.0.2");
  c.remove("127.0.0.2");   // more removes than adds: no underflow
  CHECK(c.count("127.0.0.2") == 0);
  CHECK(c.addresses() == 1);
  AddressCounts none(0);
  for (int i = 0; i < 1000; ++i) CHECK(none.try_add("10.1.1.1"));
}

TEST_CASE("fd exhaustion: one episode, back-off doubling to the cap, summary at the end") {
  FdExhaustion e;
  CHECK_FALSE(e.end(5).has_value());   // no episode: nothing to report
  CHECK(e.hit(1000));                  // starts one
  CHECK(e.backoff_ms() == 100);
  CHECK_FALSE(e.hit(1100));            // the same episode
  CHECK(e.backoff_ms() == 200);
  e.refused();
  CHECK_FALSE(e.hit(1300));
  CHECK(e.backoff_ms() == 400);
  CHECK_FALSE(e.hit(1700));
  CHECK(e.backoff_ms() == 800);
  CHECK_FALSE(e.hit(2500));
  CHECK(e.backoff_ms() == 1000);
  CHECK_FALSE(e.hit(3500));
  CHECK(e.backoff_ms() == 1000);       // capped
  auto ep = e.end(4000);
  REQUIRE(ep.has_value());
  CHECK(ep->duration_ms == 3000);
  CHECK(ep->retries == 5);
  CHECK(ep->refused == 1);
  CHECK_FALSE(e.active());
  CHECK(e.hit(9000));                  // a new episode starts over
  CHECK(e.backoff_ms() == 100);
  CHECK(e.end(9100)->refused == 0);
}

TEST_CASE("fd exhaustion: brief room inside an episode does not end it; lasting room or an empty backlog does") {
  FdExhaustion e;
  CHECK(e.hit(1000));
  CHECK(e.paused());
  CHECK_FALSE(e.room(1100).has_value());   // a few descriptors freed by others
  CHECK(e.active());
  CHECK_FALSE(e.paused());                 // watched again meanwhile
  CHECK_FALSE(e.hit(1150));                // taken at once: the same episode, no new start
  CHECK(e.paused());
  CHECK_FALSE(e.room(1200).has_value());   // room again: the settle time starts over
  CHECK_FALSE(e.room(2100).has_value());   // 900 ms of room
  auto ep = e.room(2200);                  // 1000 ms of room: over
  REQUIRE(ep.has_value());
  CHECK(ep->duration_ms == 1200);
  CHECK(ep->retries == 1);
  CHECK_FALSE(e.active());
  CHECK_FALSE(e.room(2300).has_value());   // no episode: nothing to report

  CHECK(e.hit(5000));
  CHECK_FALSE(e.room(5100).has_value());
  auto drained = e.end(5150);              // the backlog is empty: over at once
  REQUIRE(drained.has_value());
  CHECK(drained->duration_ms == 150);
  CHECK_FALSE(e.active());
}
