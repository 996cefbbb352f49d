// Token bucket rate limiter with caller-supplied time (monotonic microseconds).
#include "fleetlink/token_bucket.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fleetlink {

TokenBucket::TokenBucket(double rate_per_sec, double burst, std::uint64_t now_us) noexcept
    : rate_(rate_per_sec > 0 ? rate_per_sec : 0),
      burst_(burst > 0 ? burst : 0),
      tokens_(burst_),
      last_us_(now_us) {}

void TokenBucket::refill(std::uint64_t now_us) noexcept {
  if (now_us <= last_us_) return;  // time never runs backwards for the bucket
  const double elapsed_s = static_cast<double>(now_us - last_us_) / 1e6;
  tokens_ = std::min(burst_, tokens_ + elapsed_s * rate_);
  last_us_ = now_us;
}

bool TokenBucket::try_take(std::uint64_t now_us) noexcept {
  refill(now_us);
  if (tokens_ >= 1.0) {
    tokens_ -= 1.0;
    return true;
  }
  return false;
}

std::uint64_t TokenBucket::wait_us(std::uint64_t now_us) noexcept {
  refill(now_us);
  if (tokens_ >= 1.0) return 0;
  if (rate_ <= 0 || burst_ < 1.0) return std::numeric_limits<std::uint64_t>::max();
  return static_cast<std::uint64_t>(std::ceil((1.0 - tokens_) / rate_ * 1e6));
}

double TokenBucket::tokens(std::uint64_t now_us) noexcept {
  refill(now_us);
  return tokens_;
}

}  // namespace fleetlink
