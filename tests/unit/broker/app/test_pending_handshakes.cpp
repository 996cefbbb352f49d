// The bookkeeping that bounds TLS handshakes in flight (admission.hpp).
#include <doctest/doctest.h>

#include "net/accept_gate.hpp"

using fleetlink::broker::PendingHandshakes;

TEST_CASE("pending handshakes: full at the limit, room again when one finishes") {
  PendingHandshakes p(2, 1000);
  int a = 0, b = 0, c = 0;
  p.started(&a, 0);
  CHECK_FALSE(p.full());
  p.started(&b, 0);
  CHECK(p.full());
  CHECK(p.finished(&a));
  CHECK_FALSE(p.full());
  CHECK_FALSE(p.finished(&a));   // reported twice (ESTABLISHED then destroy): counted once
  CHECK_FALSE(p.finished(&c));   // never pending (an established connection's destroy)
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
  CHECK(p.expire(1000) == 0);
  CHECK(p.expire(1001) == 1);
  CHECK(p.count() == 1);
  CHECK(p.expire(1801) == 1);
  CHECK(p.count() == 0);
}
