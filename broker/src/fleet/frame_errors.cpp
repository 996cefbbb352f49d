#include "fleet/frame_errors.hpp"

namespace fleetlink::broker {

FrameFault decode_fault(const Error& error, bool live, Strictness strictness) {
  if (error.code == Errc::unknown_type && live) {
    if (strictness == Strictness::strict) return {true, CloseCode::unknown_type, "unknown message type (strict)"};
    return {false, CloseCode::normal, "unknown message type ignored"};
  }
  if (error.code == Errc::unsupported_version)
    return {true, CloseCode::unsupported_version, "unsupported protocol version"};
  if (error.code == Errc::too_large) return {true, CloseCode::message_too_big, "frame too large"};
  return {true, CloseCode::malformed, std::string("malformed frame: ") + fleetlink::to_string(error.code)};
}

FrameFault oversized_fault(std::size_t max_frame_bytes) {
  return {true, CloseCode::message_too_big, "frame over " + std::to_string(max_frame_bytes) + " bytes"};
}

FrameFault flood_fault() { return {true, CloseCode::rate_limited, "inbound frame rate over the limit"}; }

FrameFault not_hello_fault() { return {true, CloseCode::malformed, "expected hello"}; }

FrameFault unexpected_fault(const Message& m) {
  return {true, CloseCode::malformed, std::string("unexpected ") + type_name(m)};
}

bool answers_a_command(const Message& m) noexcept {
  return std::holds_alternative<msg::OutputChunk>(m) || std::holds_alternative<msg::Ack>(m) ||
         std::holds_alternative<msg::Nack>(m) || std::holds_alternative<msg::Result>(m);
}

}  // namespace fleetlink::broker
