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

// When a drain of `window_ms` ends at the latest, counted from its start:
// `configured_ms` (drain-deadline-ms) when set, but never before the window is
// over plus a second; 0 (the default) is this drain's own window + 5 s, so a
// drain asked for through the API with its own window_ms gets its own deadline.
std::uint32_t drain_deadline(std::uint32_t configured_ms, std::uint32_t window_ms) noexcept;

// At the deadline every connection left is closed 1001 (a real close frame, as
// PROTOCOL section 5.6 promises), and the broker waits up to this long for
// those closes to reach the rigs before it exits.
inline constexpr std::uint32_t kDrainCloseFlushMs = 1000;

struct DrainPlan {
  bool active = false;
  std::uint64_t started_ms = 0;
  std::uint32_t window_ms = 0;
  std::uint32_t deadline_ms = 0;   // after start: exit even if rigs remain
  bool closed_at_deadline = false; // the connections left at the deadline were told 1001
  std::uint64_t flush_until_ms = 0;
  std::size_t left_at_deadline = 0;
  bool past_deadline(std::uint64_t now_ms) const noexcept {
    return active && now_ms >= started_ms + deadline_ms;
  }
};

}  // namespace fleetlink::broker
