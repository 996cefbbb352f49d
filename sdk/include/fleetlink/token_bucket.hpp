#pragma once
// A token bucket: `rate` tokens per second, at most `burst` saved up.
// Time is passed in so it is testable without sleeping.
#include <cstdint>

#include "fleetlink/export.hpp"

namespace fleetlink {

class FLEETLINK_API TokenBucket {
 public:
  TokenBucket(double rate_per_sec, double burst, std::uint64_t now_us = 0) noexcept;
  // Take one token if available.
  bool try_take(std::uint64_t now_us) noexcept;
  // Microseconds until one token will be available (0 if one is now).
  std::uint64_t wait_us(std::uint64_t now_us) noexcept;
  double tokens(std::uint64_t now_us) noexcept;

 private:
  void refill(std::uint64_t now_us) noexcept;
  double rate_;
  double burst_;
  double tokens_;
  std::uint64_t last_us_;
};

}  // namespace fleetlink
