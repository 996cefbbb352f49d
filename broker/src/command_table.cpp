#include "command_table.hpp"

#include <algorithm>
#include <limits>

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

CommandView& CommandTable::insert(CommandView view) {
  std::string id = view.cmd_id;
  auto [it, inserted] = by_id_.insert_or_assign(id, std::move(view));
  if (inserted) order_.push_back(std::move(id));
  evict();
  return it->second;
}

CommandView* CommandTable::find(std::string_view cmd_id) {
  auto it = by_id_.find(std::string(cmd_id));
  return it == by_id_.end() ? nullptr : &it->second;
}

const CommandView* CommandTable::find(std::string_view cmd_id) const {
  auto it = by_id_.find(std::string(cmd_id));
  return it == by_id_.end() ? nullptr : &it->second;
}

void CommandTable::erase(std::string_view cmd_id) { by_id_.erase(std::string(cmd_id)); }

void CommandTable::evict() {
  // The order queue may hold ids already erased; they are skipped here.
  std::size_t scanned = 0;
  while (by_id_.size() > capacity_ && scanned < order_.size()) {
    auto it = by_id_.find(order_[scanned]);
    if (it == by_id_.end()) {
      order_.erase(order_.begin() + static_cast<std::ptrdiff_t>(scanned));
      continue;
    }
    if (finished(it->second.state)) {
      by_id_.erase(it);
      order_.erase(order_.begin() + static_cast<std::ptrdiff_t>(scanned));
      continue;
    }
    ++scanned;
  }
  // Commands in flight are never evicted, but a table twice its size means
  // something else is wrong: drop the oldest whatever its state.
  while (by_id_.size() > 2 * capacity_ && !order_.empty()) {
    by_id_.erase(order_.front());
    order_.pop_front();
  }
  while (order_.size() > 2 * capacity_ + 16 && !by_id_.count(order_.front())) order_.pop_front();
}

}  // namespace fleetlink::broker
