// The close-code table. docs/PROTOCOL.md repeats it for people; a unit test
// checks that every code here is documented there.
#include "fleetlink/close_codes.hpp"

#include <array>

namespace fleetlink {
namespace {

constexpr std::array<CloseCodeInfo, 16> kTable{{
    {CloseCode::normal, "normal", "either", "orderly shutdown"},
    {CloseCode::going_away, "going_away", "either",
     "the process is exiting (after GOAWAY, or agent shutdown)"},
    {CloseCode::protocol_error, "protocol_error", "either", "WebSocket-level protocol violation"},
    {CloseCode::message_too_big, "message_too_big", "either",
     "a frame larger than the receiver's max_frame_bytes"},
    {CloseCode::keepalive_timeout, "keepalive_timeout", "broker",
     "too many pongs missed in a row"},
    {CloseCode::hello_timeout, "hello_timeout", "broker", "no HELLO within the hello window"},
    {CloseCode::malformed, "malformed", "either",
     "an undecodable frame, or a HELLO that fails validation"},
    {CloseCode::identity_mismatch, "identity_mismatch", "broker",
     "HELLO rig_id differs from the client certificate identity"},
    {CloseCode::forced_reconnect, "forced_reconnect", "broker",
     "an operator asked the broker to drop this connection"},
    {CloseCode::duplicate_connection, "duplicate_connection", "broker",
     "the rig already has a live, healthy connection; the new one is refused"},
    {CloseCode::superseded, "superseded", "broker",
     "a newer connection for the same rig took ownership"},
    {CloseCode::seq_gap, "seq_gap", "agent", "a sequence gap was seen; the agent reconnects"},
    {CloseCode::unknown_type, "unknown_type", "either",
     "strict mode: a message type this side does not know"},
    {CloseCode::unsupported_version, "unsupported_version", "either",
     "a protocol version this side does not speak"},
    {CloseCode::rate_limited, "rate_limited", "broker",
     "inbound frame rate over the per-rig limit"},
    {CloseCode::internal_error, "internal_error", "either",
     "a bug on the closing side; the peer should reconnect"},
}};

}  // namespace

std::span<const CloseCodeInfo> close_code_table() noexcept { return kTable; }

std::string_view close_code_name(std::uint16_t code) noexcept {
  for (const auto& info : kTable) {
    if (static_cast<std::uint16_t>(info.code) == code) return info.name;
  }
  return "unknown";
}

}  // namespace fleetlink
