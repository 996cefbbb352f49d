#pragma once
// One rig connection as the fleet core sees it. The transport owns the memory
// (the rig protocol places it inside libwebsockets' per-connection allocation),
// the core owns the state: an idle rig costs lws's own ~1.1 KB plus this struct
// and its few small strings, no per-connection map, no buffer until a command or
// a fragmented frame needs one (docs/PERFORMANCE.md).
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fleet/frame_assembler.hpp"
#include "fleet/keepalive.hpp"
#include "fleet/outbound.hpp"
#include "fleet/outbox.hpp"
#include "fleet/rate_limiter.hpp"
#include "fleet/rig_grant.hpp"
#include "fleetlink/uuid.hpp"

namespace fleetlink::broker {

enum class SessionPhase : std::uint8_t {
  awaiting_hello,  // connected; the first frame must be a HELLO within the hello timeout
  live,            // WELCOMEd: registered as the rig's connection
  closing,         // a close was asked for; input is ignored, nothing more is written
};

using LabelList = std::vector<std::pair<std::string, std::string>>;  // sorted by key

// What few connections have, together on the heap (null while none is set): one
// pointer in every idle rig's slot instead of three (docs/PERFORMANCE.md).
struct RigSessionExtras {
  // What the rig's token granted (--rig-token), set by the transport before
  // on_open; null when it presented none (or tokens are off).
  std::unique_ptr<RigGrant> grant;
  // Commands waiting for room in the outbox, in order (a reconnect after many
  // were held): null while there are none.
  std::unique_ptr<std::deque<CommandView*>> backlog;
  // The rig's boot_id before this connection's, when it differs (the agent restarted
  // since this broker last saw it); zero otherwise. A repeat answer on this connection
  // to a command never acknowledged was accepted by that earlier process.
  Uuid previous_boot_id;
};

struct RigSession {
  RigSession(void* transport_handle, bool tls_identity, double burst, std::uint32_t now_mono_ms,
             std::uint64_t now_wall_ms)
      : handle(transport_handle), rate_limit(burst, now_mono_ms), established_mono_ms(now_mono_ms),
        connected_at_ms(now_wall_ms), authenticated(tls_identity) {}
  RigSession(const RigSession&) = delete;
  RigSession& operator=(const RigSession&) = delete;

  void* handle;                      // the transport's connection (an lws wsi); opaque here
  RigSession* prev = nullptr;        // every session, for the sweep and the drain
  RigSession* next = nullptr;

  std::string rig_id;                // short ids fit the string's inline buffer
  Uuid boot_id;                      // binary (byte order = text order = time order)
  // Interned by the registry: a fleet shares a handful of versions, kind sets and label sets.
  const std::string* agent_version = nullptr;
  const std::vector<std::string>* kinds = nullptr;  // sorted
  const LabelList* labels = nullptr;
  // The grant, the backlog and the previous boot (RigSessionExtras): through the accessors below.
  std::unique_ptr<RigSessionExtras> extras;

  FrameAssembler assembler;
  Outbox outbox;
  KeepaliveState keepalive;
  RateLimiter rate_limit;            // inbound frames per second

  // The fields below are ordered so that they pack without padding.
  std::uint32_t established_mono_ms;
  std::uint64_t connected_at_ms;     // wall clock
  std::uint64_t last_seen_wall_ms = 0;
  std::uint32_t goaway_after_ms = 0;
  std::uint32_t serial = 0;          // this broker's number for the connection: answers that come later find it by it
  std::uint16_t close_code = 0;       // ours, when the broker closes
  std::uint16_t peer_close_code = 0;  // theirs, when the rig closes
  SessionPhase phase = SessionPhase::awaiting_hello;
  bool authenticated;                // TLS with a client certificate: the HELLO's rig_id is checked against it
  bool registered = false;           // owns the rig's entry in the registry
  bool claiming = false;             // its HELLO's fleet-wide claim is on its way (Redis)
  bool awaiting_probe = false;       // its HELLO waits for the probe of the rig's other connection (bounded by the pong timeout)
  bool rx_paused = false;            // reading stopped by the inbound rate limit
  OutboundFlags outbound;

  const RigGrant* grant() const noexcept { return extras ? extras->grant.get() : nullptr; }
  void set_grant(std::unique_ptr<RigGrant> g) {
    if (g || extras) more().grant = std::move(g);
  }
  // The commands held back (null: none).
  std::deque<CommandView*>* backlog() const noexcept { return extras ? extras->backlog.get() : nullptr; }
  // The backlog, made if there was none.
  std::deque<CommandView*>& backlog_to_fill() {
    RigSessionExtras& e = more();
    if (!e.backlog) e.backlog = std::make_unique<std::deque<CommandView*>>();
    return *e.backlog;
  }
  void drop_backlog() noexcept {
    if (extras) extras->backlog.reset();
  }
  const Uuid& previous_boot() const noexcept {
    static constexpr Uuid kNone{};
    return extras ? extras->previous_boot_id : kNone;
  }
  void set_previous_boot(const Uuid& boot) { more().previous_boot_id = boot; }

 private:
  RigSessionExtras& more() {
    if (!extras) extras = std::make_unique<RigSessionExtras>();
    return *extras;
  }
};

// One per connected rig, inside lws's per-connection allocation together with a
// 4-byte mark (net/rig_protocol.cpp): 216 bytes keep the two in malloc's 224-byte
// size class; it was 264, the 320-byte one (docs/PERFORMANCE.md).
static_assert(sizeof(RigSession) <= 216, "RigSession grew past 216 bytes: the rig slot leaves its size class");

}  // namespace fleetlink::broker
