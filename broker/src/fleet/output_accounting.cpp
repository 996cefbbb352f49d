#include "fleet/output_accounting.hpp"

#include <algorithm>
#include <limits>

#include "fleet/command_table.hpp"

namespace fleetlink::broker {

std::uint64_t account_output(CommandView& v, const msg::OutputChunk& chunk) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t size = chunk.data.size();
  // Offsets come from the network: saturate rather than wrap.
  const std::uint64_t begin = std::min(chunk.offset, kMax - size);
  const std::uint64_t end = begin + size;
  std::uint64_t gap = 0;
  if (begin > v.stream_next_offset) {
    gap = begin - v.stream_next_offset;
    v.stream_gap_bytes = v.stream_gap_bytes > kMax - gap ? kMax : v.stream_gap_bytes + gap;
  }
  if (end <= v.stream_next_offset) return gap;  // nothing new
  const std::uint64_t skip = v.stream_next_offset > begin ? v.stream_next_offset - begin : 0;
  const auto* data = reinterpret_cast<const char*>(chunk.data.data()) + skip;
  const std::size_t n = chunk.data.size() - static_cast<std::size_t>(skip);
  v.streamed_bytes += n;
  v.streamed_output.append(data, n);
  if (v.streamed_output.size() > CommandTable::kStreamTail)
    v.streamed_output.erase(0, v.streamed_output.size() - CommandTable::kStreamTail);
  v.stream_next_offset = end;
  return gap;
}

std::uint64_t reconcile_result(const CommandView& v, msg::Result& r) {
  if (v.stream_gap_bytes <= r.dropped_bytes) return 0;
  const std::uint64_t lost = v.stream_gap_bytes - r.dropped_bytes;
  r.dropped_bytes += lost;
  r.truncated = true;
  return lost;
}

}  // namespace fleetlink::broker
