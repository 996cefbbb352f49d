// TokenBucket with explicit time.
#include <doctest/doctest.h>

#include "fleetlink/token_bucket.hpp"

using namespace fleetlink;

TEST_CASE("burst then empty") {
  TokenBucket b(10, 5, 0);
  for (int i = 0; i < 5; ++i) CHECK(b.try_take(0));
  CHECK_FALSE(b.try_take(0));
  CHECK(b.wait_us(0) == 100000);  // 10/s: one token per 100 ms
}

TEST_CASE("refill at rate, capped at burst") {
  TokenBucket b(10, 5, 0);
  for (int i = 0; i < 5; ++i) CHECK(b.try_take(0));
  CHECK_FALSE(b.try_take(50000));
  CHECK(b.wait_us(50000) == 50000);
  CHECK(b.try_take(100000));
  CHECK_FALSE(b.try_take(100000));
  CHECK(b.tokens(10'000'000) == doctest::Approx(5.0));  // long idle: only burst saved
  int taken = 0;
  while (b.try_take(10'000'000)) ++taken;
  CHECK(taken == 5);
}

TEST_CASE("steady rate over a simulated second") {
  TokenBucket b(50, 1, 0);
  int taken = 0;
  for (std::uint64_t t = 0; t < 1'000'000; t += 1000) {
    if (b.try_take(t)) ++taken;
  }
  CHECK(taken >= 50);
  CHECK(taken <= 51);
}

TEST_CASE("time going backwards does not add tokens") {
  TokenBucket b(1, 1, 1'000'000);
  CHECK(b.try_take(1'000'000));
  CHECK_FALSE(b.try_take(0));
  CHECK_FALSE(b.try_take(1'500'000));
  CHECK(b.try_take(2'000'000));
}

TEST_CASE("zero rate never refills") {
  TokenBucket b(0, 2, 0);
  CHECK(b.try_take(0));
  CHECK(b.try_take(0));
  CHECK_FALSE(b.try_take(1'000'000'000));
  CHECK(b.wait_us(0) == UINT64_MAX);
}
