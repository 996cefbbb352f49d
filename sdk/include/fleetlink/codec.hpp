#pragma once
// msgpack encoding of fleetlink messages. Encoding is deterministic (fixed key
// order, smallest integer forms), so the same message always gives the same bytes.
// Decoding never throws: garbage, truncation and wrong shapes come back as Error.
#include <cstdint>
#include <span>

#include "fleetlink/expected.hpp"
#include "fleetlink/messages.hpp"

namespace fleetlink {

struct DecodeOptions {
  std::size_t max_frame_bytes = kDefaultMaxFrameBytes;
};

Bytes encode(const Message& m);
Expected<Message> decode(std::span<const std::uint8_t> frame, const DecodeOptions& opts = {});

// Whether an unknown message type ends the connection: strict mode (tests,
// development) closes with CloseCode::unknown_type, lenient mode counts and ignores.
enum class Strictness : std::uint8_t { lenient, strict };

}  // namespace fleetlink
