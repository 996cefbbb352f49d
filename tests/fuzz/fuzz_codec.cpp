// libFuzzer target for the frame decoder (and peek_command, its fallback for COMMANDs). Besides "no crash, no sanitizer report",
// it checks the codec's promises: whatever decode() accepts, encode() turns into a
// frame that decodes to the same message and encodes to the same bytes again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <variant>

#include "fleetlink/codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> frame(data, size);
  const auto decoded = fleetlink::decode(frame);
  if (decoded) {
    const fleetlink::Bytes once = fleetlink::encode(*decoded);
    const auto again = fleetlink::decode(once);
    if (!again || !(*again == *decoded)) std::abort();
    if (fleetlink::encode(*again) != once) std::abort();
    if (!fleetlink::validate(*decoded)) std::abort();
  }
  // The size limit is checked before parsing: a smaller one must refuse larger frames.
  fleetlink::DecodeOptions small;
  small.max_frame_bytes = size / 2;
  const auto limited = fleetlink::decode(frame, small);
  if (size > 0 && limited) std::abort();
  // What the agent reads of a COMMAND decode() refused: never more than a map
  // whose "t" is "command" says, and a decodable COMMAND peeks as itself.
  const auto peek = fleetlink::peek_command(frame, 1 << 20);
  if (peek && peek->cmd_id.size() > 128) std::abort();
  if (decoded) {
    if (const auto* cmd = std::get_if<fleetlink::msg::Command>(&*decoded)) {
      if (!peek || peek->seq != cmd->seq || peek->cmd_id != cmd->cmd_id) std::abort();
    }
  }
  return 0;
}
