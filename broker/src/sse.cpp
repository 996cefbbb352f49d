#include "sse.hpp"

#include "control_json.hpp"

namespace fleetlink::broker {

std::string format_sse_event(const FleetEvent& event, std::uint64_t id) {
  std::string out = "id: " + std::to_string(id) + "\nevent: ";
  // The event name must stay on one line.
  for (const char c : event.type.empty() ? std::string("event") : event.type) {
    out += (c == '\n' || c == '\r') ? '_' : c;
  }
  out += "\ndata: ";
  out += dump_json(event_json(event));  // JSON text has no raw newlines
  out += "\n\n";
  return out;
}

bool SseQueue::push(std::string chunk) {
  if (overflowed_ || bytes_ + chunk.size() > max_bytes_) {
    overflowed_ = true;
    return false;
  }
  bytes_ += chunk.size();
  chunks_.push_back(std::move(chunk));
  return true;
}

std::string SseQueue::pop(std::size_t max_bytes) {
  std::string out;
  while (!chunks_.empty() && (out.empty() || out.size() + chunks_.front().size() <= max_bytes)) {
    out += chunks_.front();
    bytes_ -= chunks_.front().size();
    chunks_.pop_front();
  }
  return out;
}

}  // namespace fleetlink::broker
