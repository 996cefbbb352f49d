#pragma once
// msgpack encoding of fleetlink messages. Encoding is deterministic (fixed key
// order, smallest integer forms), so the same message always gives the same bytes.
// Decoding never throws: garbage, truncation and wrong shapes come back as Error.
#include <cstdint>
#include <optional>
#include <string>
#include <span>

#include "fleetlink/export.hpp"
#include "fleetlink/expected.hpp"
#include "fleetlink/limits.hpp"
#include "fleetlink/messages.hpp"

namespace fleetlink {

struct DecodeOptions {
  std::size_t max_frame_bytes = kDefaultMaxFrameBytes;
};

// Field limits enforced by decode() and validate(): fleetlink/limits.hpp.

FLEETLINK_API Bytes encode(const Message& m);
// Appends the encoded frame to `out` (a sender that keeps room in front of its
// frames, or reuses one buffer for every frame, avoids a copy and an allocation).
FLEETLINK_API void encode_to(const Message& m, Bytes& out);
FLEETLINK_API Expected<Message> decode(std::span<const std::uint8_t> frame, const DecodeOptions& opts = {});
// What a COMMAND frame that decode() refused still says, so that the agent can
// answer it with a NACK `malformed` instead of dropping the connection: nullopt
// unless the frame is a msgpack map whose "t" is "command". seq is nullopt when
// it is missing or not an unsigned integer; cmd_id is empty unless it is a string
// of at most 128 bytes.
struct CommandPeek {
  std::optional<std::uint64_t> seq;
  std::string cmd_id;
};
FLEETLINK_API std::optional<CommandPeek> peek_command(std::span<const std::uint8_t> frame, std::size_t max_frame_bytes);

// The field rules decode() applies, for a message built in memory (e.g. before sending).
FLEETLINK_API Expected<void> validate(const Message& m);

// Whether an unknown message type ends the connection: strict mode (tests,
// development) closes with CloseCode::unknown_type, lenient mode counts and ignores.
enum class Strictness : std::uint8_t { lenient, strict };

}  // namespace fleetlink
