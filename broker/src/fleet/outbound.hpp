#pragma once
// What a rig connection writes next. One writer per connection (the transport's
// writeable callback) takes one frame at a time, most urgent first:
//
//   ping     liveness is never queued behind commands: a late ping is a false 4002
//   welcome  the answer to HELLO; nothing else may go before it
//   cancel   stopping something is more urgent than starting something
//   command  the oldest unsent command of the outbox (seq order)
//   goaway   last: a draining broker first sends what it already accepted
//
// Pure; the flags live in every RigSession (4 bytes), CANCELs themselves wait
// in the FleetCore (they are rare).
#include <cstdint>

namespace fleetlink::broker {

enum class OutboundKind : std::uint8_t { none, ping, welcome, cancel, command, goaway };
const char* to_string(OutboundKind k) noexcept;

struct OutboundFlags {
  bool ping = false;
  bool welcome = false;
  bool cancels = false;   // CANCELs wait for this session (FleetCore::pending_cancels_)
  bool goaway = false;
};

OutboundKind next_outbound(const OutboundFlags& flags, bool has_unsent_command) noexcept;

}  // namespace fleetlink::broker
