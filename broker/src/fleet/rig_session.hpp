#pragma once
// The state of one rig connection. It lives inside libwebsockets' per-session
// allocation (placement-new at ESTABLISHED, destroyed at CLOSED), so an idle
// rig costs lws's own ~1.1 KB plus this struct and its few small strings:
// no per-connection map, no buffers until a command or a fragmented frame needs one.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fleetlink/messages.hpp"
#include "fleetlink/uuid.hpp"
#include "fleet/keepalive.hpp"
#include "fleet/outbox.hpp"
#include "fleet/rate_limiter.hpp"

struct lws;

namespace fleetlink::broker {

enum class ConnPhase : std::uint8_t { awaiting_hello, live, closing };

struct Connection {
  static constexpr std::uint32_t kMagic = 0xF1EE7C0Au;

  Connection(lws* w, bool plain_listener, double burst, std::uint32_t now_mono_ms, std::uint64_t now_wall_ms)
      : wsi(w), rate_limit(burst, now_mono_ms), established_mono_ms(now_mono_ms),
        connected_at_ms(now_wall_ms), plain(plain_listener) {}

  std::uint32_t magic = kMagic;
  lws* wsi;
  Connection* prev = nullptr;        // every WebSocket connection, for the sweep timer
  Connection* next = nullptr;

  std::string rig_id;                // short ids fit the string's inline buffer
  Uuid boot_id;                      // binary (byte order = text order = time order)
  // Interned by the broker: a fleet shares a handful of versions, kind sets and label sets.
  const std::string* agent_version = nullptr;
  const std::vector<std::string>* kinds = nullptr;
  const std::vector<std::pair<std::string, std::string>>* labels = nullptr;  // sorted by key
  // A frame that lws hands over in pieces (larger than the receive buffer) is
  // assembled here; null between frames.
  std::unique_ptr<std::vector<std::uint8_t>> partial_frame;

  Outbox outbox;
  KeepaliveState keepalive;
  RateLimiter rate_limit;            // inbound frames per second

  std::uint32_t established_mono_ms;
  std::uint64_t connected_at_ms;     // wall clock
  std::uint64_t last_seen_wall_ms = 0;
  std::uint32_t goaway_after_ms = 0;
  std::uint16_t close_code = 0;       // ours, when the broker closes
  std::uint16_t peer_close_code = 0;  // theirs, when the rig closes
  ConnPhase phase = ConnPhase::awaiting_hello;
  bool plain;                        // accepted on the plain ws listener: no cert identity
  bool registered = false;           // owns the rig's entry in the broker's rig map
  bool want_ping = false;
  bool want_welcome = false;
  bool want_goaway = false;
  bool has_cancels = false;          // CANCELs wait in Broker::pending_cancels_
  bool rx_paused = false;            // reading stopped by the inbound rate limit
};

}  // namespace fleetlink::broker
