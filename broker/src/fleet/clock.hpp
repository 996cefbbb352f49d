#pragma once
// Time as the fleet core reads it: a monotonic clock for deadlines (keepalive,
// hello timeout, drain) and the wall clock for what operators see. Passed in,
// so the core's unit tests move time by hand.
#include <cstdint>

namespace fleetlink::broker {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the broker started; wraps after ~49 days (compared with signed differences).
  virtual std::uint32_t mono_ms() const = 0;
  // Unix milliseconds.
  virtual std::uint64_t wall_ms() const = 0;
};

}  // namespace fleetlink::broker
