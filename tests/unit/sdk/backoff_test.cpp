// Backoff: ceiling, both jitters, server overrides, Retry-After parsing.
#include <doctest/doctest.h>

#include "fleetlink/backoff.hpp"

using namespace fleetlink;
using std::chrono::milliseconds;

TEST_CASE("ceiling is min(base * 2^n, cap)") {
  const BackoffPolicy p{milliseconds{1000}, milliseconds{30000}, Jitter::none};
  CHECK(Backoff::ceiling(p, 0) == milliseconds{1000});
  CHECK(Backoff::ceiling(p, 1) == milliseconds{2000});
  CHECK(Backoff::ceiling(p, 4) == milliseconds{16000});
  CHECK(Backoff::ceiling(p, 5) == milliseconds{30000});
  CHECK(Backoff::ceiling(p, 63) == milliseconds{30000});
  CHECK(Backoff::ceiling(p, 1000) == milliseconds{30000});
  Backoff b(p, 1);
  CHECK(b.next_delay() == milliseconds{1000});
  CHECK(b.next_delay() == milliseconds{2000});
  CHECK(b.attempt() == 2);
  for (int i = 0; i < 200; ++i) (void)b.next_delay();  // no overflow at large attempts
  CHECK(b.next_delay() == milliseconds{30000});
}

TEST_CASE("proportional jitter stays in [0.5, 1.5) x ceiling with mean near 1") {
  const BackoffPolicy p{milliseconds{1000}, milliseconds{30000}, Jitter::proportional};
  for (unsigned n : {0U, 3U, 10U}) {
    const double top = static_cast<double>(Backoff::ceiling(p, n).count());
    double sum = 0;
    const int samples = 20000;
    Backoff b(p, 42 + n);
    for (int i = 0; i < samples; ++i) {
      b.reset();
      for (unsigned k = 0; k < n; ++k) (void)b.next_delay();
      const double d = static_cast<double>(b.next_delay().count());
      CHECK(d >= 0.5 * top);
      CHECK(d < 1.5 * top);
      sum += d;
    }
    const double mean = sum / samples / top;
    CHECK(mean > 0.97);
    CHECK(mean < 1.03);
  }
}

TEST_CASE("full jitter stays in [0, ceiling]") {
  const BackoffPolicy p{milliseconds{100}, milliseconds{1000}, Jitter::full};
  Backoff b(p, 7);
  bool saw_low = false;
  for (int i = 0; i < 10000; ++i) {
    const auto n = b.attempt();
    const auto top = Backoff::ceiling(p, n);
    const auto d = b.next_delay();
    CHECK(d >= milliseconds{0});
    CHECK(d <= top);
    if (d < top / 4) saw_low = true;
    if (b.attempt() > 6) b.reset();
  }
  CHECK(saw_low);
}

TEST_CASE("override_next is used once, then backoff resumes") {
  Backoff b({milliseconds{1000}, milliseconds{30000}, Jitter::none}, 1);
  (void)b.next_delay();  // attempt 0
  b.override_next(milliseconds{7000});
  CHECK(b.next_delay() == milliseconds{7000});
  CHECK(b.next_delay() == milliseconds{4000});  // attempt 2: the override counted as one
  b.override_next(milliseconds{-5});
  CHECK(b.next_delay() == milliseconds{0});
}

TEST_CASE("reset starts again from attempt 0 and drops a pending override") {
  Backoff b({milliseconds{1000}, milliseconds{30000}, Jitter::none}, 1);
  for (int i = 0; i < 5; ++i) (void)b.next_delay();
  b.override_next(milliseconds{9});
  b.reset();
  CHECK(b.attempt() == 0);
  CHECK(b.next_delay() == milliseconds{1000});
}

TEST_CASE("same seed, same delays") {
  Backoff a({}, 99);
  Backoff c({}, 99);
  for (int i = 0; i < 10; ++i) CHECK(a.next_delay() == c.next_delay());
}

TEST_CASE("parse_retry_after") {
  CHECK(parse_retry_after("7") == milliseconds{7000});
  CHECK(parse_retry_after("0") == milliseconds{0});
  CHECK(parse_retry_after(" 15 ") == milliseconds{15000});
  CHECK(parse_retry_after("86400") == milliseconds{86400000});
  CHECK_FALSE(parse_retry_after("86401"));
  CHECK_FALSE(parse_retry_after("99999999999999999999999999"));
  CHECK_FALSE(parse_retry_after("-5"));
  CHECK_FALSE(parse_retry_after("+5"));
  CHECK_FALSE(parse_retry_after(""));
  CHECK_FALSE(parse_retry_after("abc"));
  CHECK_FALSE(parse_retry_after("7s"));
  CHECK_FALSE(parse_retry_after("1.5"));
  CHECK_FALSE(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"));
  CHECK_FALSE(parse_retry_after(nullptr));
}
