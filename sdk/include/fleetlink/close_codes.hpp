#pragma once
// Every WebSocket close code fleetlink sends, in one place. docs/PROTOCOL.md
// documents the same table; tests/unit/sdk checks the two agree.
#include <cstdint>
#include <span>
#include <string_view>

#include "fleetlink/export.hpp"

namespace fleetlink {

enum class CloseCode : std::uint16_t {
  normal = 1000,            // orderly shutdown by either side
  going_away = 1001,        // process exiting (after GOAWAY, or agent shutdown)
  protocol_error = 1002,    // WebSocket-level violation
  message_too_big = 1009,   // a frame over the receiver's max_frame_bytes
  keepalive_timeout = 4002, // broker: N pongs missed in a row
  hello_timeout = 4008,     // broker: no HELLO within the hello window
  malformed = 4400,         // undecodable frame, or HELLO that fails validation
  identity_mismatch = 4401, // HELLO rig_id is not the client certificate's identity
  forced_reconnect = 4403,  // operator asked the broker to drop this connection
  duplicate_connection = 4409, // the rig already has a live, healthy connection: the new one is refused
  superseded = 4410,        // a newer connection for the same rig took ownership
  seq_gap = 4412,           // agent: a sequence gap was seen; it reconnects
  unsupported_version = 4426, // protocol version not spoken by this side
  rate_limited = 4429,      // inbound frame rate over the per-rig limit
  unknown_type = 4422,      // strict mode: a message type this side does not know
  internal_error = 4500,    // a bug on the closing side; the peer should reconnect
};

struct CloseCodeInfo {
  CloseCode code;
  std::string_view name;
  std::string_view sender;   // "broker", "agent" or "either"
  std::string_view meaning;
};

// The table of every code above, in ascending order.
FLEETLINK_API std::span<const CloseCodeInfo> close_code_table() noexcept;
// Name for a numeric code ("superseded"), or "unknown".
FLEETLINK_API std::string_view close_code_name(std::uint16_t code) noexcept;

}  // namespace fleetlink
