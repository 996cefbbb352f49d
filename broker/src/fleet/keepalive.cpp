#include "fleet/keepalive.hpp"

#include <algorithm>

namespace fleetlink::broker {

std::uint32_t KeepaliveSettings::sweep_interval_ms(std::uint32_t hello_timeout_ms) const noexcept {
  std::uint32_t shortest = std::min({ping_interval_ms, pong_timeout_ms, hello_timeout_ms});
  return std::clamp<std::uint32_t>(shortest / 4, 1, 1000);
}

void KeepaliveState::start(std::uint32_t now, const KeepaliveSettings& s) noexcept {
  next_ping_at = now + s.ping_interval_ms;
  pong_due_at = 0;
  missed = 0;
}

KeepaliveAction KeepaliveState::tick(std::uint32_t now, const KeepaliveSettings& s) noexcept {
  // Signed differences so the 32-bit ms clock may wrap (every ~49 days).
  if (pong_due_at != 0 && static_cast<std::int32_t>(now - pong_due_at) >= 0) {
    pong_due_at = 0;
    if (missed < 255) ++missed;
    if (missed >= s.max_missed) return KeepaliveAction::dead;
  }
  if (pong_due_at == 0 && static_cast<std::int32_t>(now - next_ping_at) >= 0)
    return KeepaliveAction::send_ping;
  return KeepaliveAction::none;
}

void KeepaliveState::ping_sent(std::uint32_t now, const KeepaliveSettings& s) noexcept {
  pong_due_at = now + s.pong_timeout_ms;
  if (pong_due_at == 0) pong_due_at = 1;
  next_ping_at = now + s.ping_interval_ms;
}

void KeepaliveState::pong(std::uint32_t now, const KeepaliveSettings& s) noexcept {
  (void)now;
  (void)s;
  pong_due_at = 0;
  missed = 0;
}

}  // namespace fleetlink::broker
