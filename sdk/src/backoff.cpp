// Reconnect delays. The ceiling doubles per attempt up to the cap; jitter spreads a
// fleet's reconnects so a broker restart is not followed by a synchronised storm.
#include "fleetlink/backoff.hpp"

#include <cctype>
#include <cstring>

namespace fleetlink {

namespace {
// Past this many doublings every ceiling is the cap anyway; saturating the counter
// keeps the shift below the width of the integer.
constexpr unsigned kMaxAttempt = 62;
// A Retry-After beyond a day is not a hint we trust: treat it as unparseable.
constexpr std::uint64_t kMaxRetryAfterSeconds = 24 * 60 * 60;
}  // namespace

Backoff::Backoff(BackoffPolicy policy, std::uint64_t seed) : policy_(policy), rng_(seed) {}

std::chrono::milliseconds Backoff::ceiling(const BackoffPolicy& p, unsigned n) noexcept {
  const auto base = p.base.count() > 0 ? static_cast<std::uint64_t>(p.base.count()) : 0;
  const auto cap = p.cap.count() > 0 ? static_cast<std::uint64_t>(p.cap.count()) : 0;
  if (base == 0) return std::chrono::milliseconds{0};
  if (n >= kMaxAttempt || base > (cap >> n)) return std::chrono::milliseconds{cap};
  const std::uint64_t value = base << n;
  return std::chrono::milliseconds{static_cast<std::int64_t>(value < cap ? value : cap)};
}

std::chrono::milliseconds Backoff::next_delay() {
  const unsigned n = attempt_;
  if (attempt_ < kMaxAttempt) ++attempt_;
  if (override_) {
    const auto d = *override_;
    override_.reset();
    return d;
  }
  const auto top = ceiling(policy_, n);
  switch (policy_.jitter) {
    case Jitter::none:
      return top;
    case Jitter::full: {
      std::uniform_int_distribution<std::int64_t> dist(0, top.count());
      return std::chrono::milliseconds{dist(rng_)};
    }
    case Jitter::proportional:
    default: {
      std::uniform_real_distribution<double> dist(0.5, 1.5);
      const double f = dist(rng_);
      return std::chrono::milliseconds{
          static_cast<std::int64_t>(static_cast<double>(top.count()) * f)};
    }
  }
}

void Backoff::override_next(std::chrono::milliseconds delay) {
  override_ = delay.count() < 0 ? std::chrono::milliseconds{0} : delay;
}

void Backoff::reset() noexcept {
  attempt_ = 0;
  override_.reset();
}

std::optional<std::chrono::milliseconds> parse_retry_after(const char* value) noexcept {
  if (value == nullptr) return std::nullopt;
  const char* p = value;
  while (*p == ' ' || *p == '\t') ++p;
  if (*p < '0' || *p > '9') return std::nullopt;  // also refuses "-5" and "+5"
  std::uint64_t seconds = 0;
  while (*p >= '0' && *p <= '9') {
    seconds = seconds * 10 + static_cast<std::uint64_t>(*p - '0');
    if (seconds > kMaxRetryAfterSeconds) return std::nullopt;
    ++p;
  }
  while (*p == ' ' || *p == '\t') ++p;
  if (*p != '\0') return std::nullopt;  // HTTP-date form and trailing junk are not supported
  return std::chrono::milliseconds{static_cast<std::int64_t>(seconds * 1000)};
}

}  // namespace fleetlink
