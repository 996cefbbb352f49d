#pragma once
// Drain: GOAWAY every rig with a reconnect delay spread uniformly over the
// window, so a deploy does not turn into a reconnect storm on the next broker.
// The spread is pure (unit-tested); DrainPlan holds the timing of one drain.
#include <cstdint>
#include <random>
#include <vector>

namespace fleetlink::broker {

// Delays for n rigs in a window: the i-th of n slots gets window*(i+U(0,1))/n,
// and the slots are handed out in shuffled order (so the order of the
// connection list says nothing about who comes back first).
std::vector<std::uint32_t> drain_spread(std::size_t n, std::uint32_t window_ms, std::mt19937_64& rng);

struct DrainPlan {
  bool active = false;
  std::uint64_t started_ms = 0;
  std::uint32_t window_ms = 0;
  std::uint32_t deadline_ms = 0;   // after start: exit even if rigs remain
  bool past_deadline(std::uint64_t now_ms) const noexcept {
    return active && now_ms >= started_ms + deadline_ms;
  }
};

}  // namespace fleetlink::broker
