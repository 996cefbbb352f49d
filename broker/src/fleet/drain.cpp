#include "fleet/drain.hpp"

#include <algorithm>
#include <cstdint>

namespace fleetlink::broker {

std::vector<std::uint32_t> drain_spread(std::size_t n, std::uint32_t window_ms, std::mt19937_64& rng) {
  std::vector<std::uint32_t> out;
  out.reserve(n);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (std::size_t i = 0; i < n; ++i) {
    double at = static_cast<double>(window_ms) * (static_cast<double>(i) + u(rng)) / static_cast<double>(n);
    out.push_back(static_cast<std::uint32_t>(std::min<double>(at, window_ms)));
  }
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

std::uint32_t drain_deadline(std::uint32_t configured_ms, std::uint32_t window_ms) noexcept {
  const std::uint64_t at_least = std::uint64_t{window_ms} + 1000;
  const std::uint64_t deadline = configured_ms == 0 ? std::uint64_t{window_ms} + 5000
                                                    : std::max<std::uint64_t>(configured_ms, at_least);
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(deadline, UINT32_MAX));
}

}  // namespace fleetlink::broker
