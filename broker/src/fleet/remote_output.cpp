#include "fleet/remote_output.hpp"

#include <algorithm>

namespace fleetlink::broker {

void RemoteOutputs::add(const FleetEvent& e) {
  if (e.type != EventType::command_output || e.cmd_id.empty()) return;
  auto it = entries_.find(e.cmd_id);
  if (it == entries_.end()) {
    while (entries_.size() >= max_commands_ && !order_.empty()) {
      entries_.erase(order_.front());
      order_.pop_front();
    }
    it = entries_.emplace(e.cmd_id, Entry{}).first;
    order_.push_back(e.cmd_id);
  }
  Entry& entry = it->second;
  const std::uint64_t end = e.offset + e.detail.size();
  if (end <= entry.end) return;  // heard already
  if (e.offset > entry.end) {
    // Bytes missed between (relayed before this broker listened): the tail starts again here.
    entry.tail = e.detail;
  } else {
    entry.tail.append(e.detail, static_cast<std::size_t>(entry.end - e.offset), std::string::npos);
  }
  entry.end = end;
  if (entry.tail.size() > tail_bytes_) entry.tail.erase(0, entry.tail.size() - tail_bytes_);
}

void RemoteOutputs::forget(std::string_view cmd_id) {
  if (const auto it = entries_.find(cmd_id); it != entries_.end()) entries_.erase(it);
  // Its id stays in order_ until it comes to the front: erasing it there is a no-op.
  if (order_.size() > 4 * max_commands_) {
    std::erase_if(order_, [&](const std::string& id) { return entries_.find(id) == entries_.end(); });
  }
}

void RemoteOutputs::overlay(CommandView& v) const {
  const auto it = entries_.find(v.cmd_id);
  if (it == entries_.end()) return;
  const Entry& entry = it->second;
  const std::uint64_t next = v.stream_next_offset;
  // What each holds: the record [record_from, next) (a stored record may count
  // bytes whose tail it does not carry), what was heard [heard_from, entry.end).
  const std::uint64_t record_from = next - std::min<std::uint64_t>(next, v.streamed_output.size());
  const std::uint64_t heard_from = entry.end - entry.tail.size();
  if (entry.end < next || (entry.end == next && heard_from >= record_from)) return;  // the record has as much
  if (heard_from <= record_from || heard_from > next) {
    v.streamed_output = entry.tail;  // what was heard covers the record's tail, or starts after a gap
  } else {
    v.streamed_output.append(entry.tail, static_cast<std::size_t>(next - heard_from), std::string::npos);
  }
  if (v.streamed_output.size() > tail_bytes_) v.streamed_output.erase(0, v.streamed_output.size() - tail_bytes_);
  if (entry.end > next) v.streamed_bytes += entry.end - next;
  v.stream_next_offset = entry.end;
}

}  // namespace fleetlink::broker
