#pragma once
// Reconnect delay: min(base * 2^attempt, cap) * uniform(0.5, 1.5) by default
// (proportional jitter), or uniform(0, min(base * 2^attempt, cap)) with full jitter.
// A server hint (HTTP Retry-After, GOAWAY reconnect_after_ms) overrides one delay.
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>

#include "fleetlink/export.hpp"

namespace fleetlink {

enum class Jitter : std::uint8_t { proportional, full, none };

struct BackoffPolicy {
  std::chrono::milliseconds base{1000};
  std::chrono::milliseconds cap{30000};
  Jitter jitter = Jitter::proportional;
};

class FLEETLINK_API Backoff {
 public:
  explicit Backoff(BackoffPolicy policy = {}, std::uint64_t seed = std::random_device{}());

  // The delay before the next attempt; advances the attempt counter.
  std::chrono::milliseconds next_delay();
  // The next next_delay() returns this exactly (a server told us when to come back).
  void override_next(std::chrono::milliseconds delay);
  // A connection succeeded (WELCOME received): start again from attempt 0.
  void reset() noexcept;
  unsigned attempt() const noexcept { return attempt_; }
  const BackoffPolicy& policy() const noexcept { return policy_; }

  // The un-jittered ceiling for attempt n: min(base * 2^n, cap).
  static std::chrono::milliseconds ceiling(const BackoffPolicy& p, unsigned n) noexcept;

 private:
  BackoffPolicy policy_;
  std::mt19937_64 rng_;
  unsigned attempt_ = 0;
  std::optional<std::chrono::milliseconds> override_;
};

// Parse an HTTP Retry-After value in delay-seconds form ("7"); nullopt otherwise.
FLEETLINK_API std::optional<std::chrono::milliseconds> parse_retry_after(const char* value) noexcept;

}  // namespace fleetlink
