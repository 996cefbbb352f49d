#pragma once
// Keepalive arithmetic for one connection, pure (times in ms are passed in).
// The broker's sweep timer calls tick() for every connection; tick says whether
// to send a PING now, and whether the connection has now missed too many pongs.
//
//   ping at t, pong due by t + pong_timeout; no pong by then = one miss;
//   next ping at t + ping_interval; `max_missed` misses in a row = dead (close 4002).
#include <cstdint>

namespace fleetlink::broker {

struct KeepaliveSettings {
  std::uint32_t ping_interval_ms = 20000;
  std::uint32_t pong_timeout_ms = 10000;
  std::uint32_t max_missed = 3;
  // How often the sweep should run so no deadline is late by more than a quarter.
  std::uint32_t sweep_interval_ms(std::uint32_t hello_timeout_ms) const noexcept;
};

enum class KeepaliveAction : std::uint8_t { none, send_ping, dead };

// 16 bytes per connection.
struct KeepaliveState {
  std::uint32_t next_ping_at = 0;   // ms on the broker's monotonic clock (relative to its start)
  std::uint32_t pong_due_at = 0;    // 0: no ping outstanding
  std::uint8_t missed = 0;          // consecutive misses

  void start(std::uint32_t now, const KeepaliveSettings& s) noexcept;
  KeepaliveAction tick(std::uint32_t now, const KeepaliveSettings& s) noexcept;
  // The ping went out (the writeable callback wrote it).
  void ping_sent(std::uint32_t now, const KeepaliveSettings& s) noexcept;
  // A pong (or any proof of life the broker counts) arrived.
  void pong(std::uint32_t now, const KeepaliveSettings& s) noexcept;
};

}  // namespace fleetlink::broker
