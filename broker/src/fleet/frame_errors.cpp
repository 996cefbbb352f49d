#include "fleet/frame_errors.hpp"

#include <string_view>

namespace fleetlink::broker {
namespace {

// The decoder's own words for a close reason: printable ASCII only (a close
// reason must be UTF-8, and the detail may quote what the peer sent).
std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return out;
}

}  // namespace

FrameFault decode_fault(const Error& error, bool live, Strictness strictness) {
  if (error.code == Errc::unknown_type && live) {
    if (strictness == Strictness::strict) return {true, CloseCode::unknown_type, "unknown message type (strict)"};
    return {false, CloseCode::normal, "unknown message type ignored"};
  }
  if (error.code == Errc::unsupported_version)
    return {true, CloseCode::unsupported_version, "unsupported protocol version"};
  // A frame over max_frame_bytes never reaches decode() here (the FrameAssembler
  // refuses it: oversized_fault, 1009). too_large from decode() is a field or a
  // container over its limit in a frame of acceptable size: the content breaks the
  // protocol, so it is malformed (4400, PROTOCOL section 5.3) like every other
  // refusal here. The reason carries the decoder's sentence (which field, which
  // rule) so that the rig's log says what to fix.
  if (error.detail.empty())
    return {true, CloseCode::malformed, std::string("malformed frame: ") + fleetlink::to_string(error.code)};
  return {true, CloseCode::malformed, "malformed frame: " + printable(error.detail)};
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
