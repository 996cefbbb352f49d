#pragma once
// A per-connection token bucket in 8 bytes (fleetlink::TokenBucket is 32): one
// lives in every rig connection, so it is kept small. Rate and burst are the
// broker's settings, passed in; time is the broker's 32-bit ms clock.
#include <cstdint>

namespace fleetlink::broker {

class RateLimiter {
 public:
  RateLimiter() = default;
  RateLimiter(double burst, std::uint32_t now_ms) noexcept
      : tokens_(static_cast<float>(burst)), last_ms_(now_ms) {}
  // Tokens available now (without taking one).
  double available(std::uint32_t now_ms, double rate, double burst) const noexcept {
    auto elapsed = static_cast<std::uint32_t>(now_ms - last_ms_);
    double t = static_cast<double>(tokens_) + rate * static_cast<double>(elapsed) / 1000.0;
    return t > burst ? burst : t;
  }
  // Take one token if available (refilled at `rate` per second up to `burst`).
  bool try_take(std::uint32_t now_ms, double rate, double burst) noexcept {
    auto elapsed = static_cast<std::uint32_t>(now_ms - last_ms_);
    last_ms_ = now_ms;
    double t = static_cast<double>(tokens_) + rate * static_cast<double>(elapsed) / 1000.0;
    if (t > burst) t = burst;
    if (t < 1.0) {
      tokens_ = static_cast<float>(t);
      return false;
    }
    tokens_ = static_cast<float>(t - 1.0);
    return true;
  }

 private:
  float tokens_ = 0;
  std::uint32_t last_ms_ = 0;
};

}  // namespace fleetlink::broker
