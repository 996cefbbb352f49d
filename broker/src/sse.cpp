#include "sse.hpp"

#include "control_json.hpp"

namespace fleetlink::broker {

namespace {

// The JSON of the last event formatted. The broker hands the same event to every
// SSE stream, each of which formats it with its own id: the JSON is made once per
// event, not once per subscriber. Keyed by content, so it is never stale (two
// events with equal fields have equal JSON); the assignments reuse capacity.
struct LastEventJson {
  std::string type, rig_id, cmd_id, detail;
  std::uint64_t at_ms = 0;
  bool valid = false;
  std::string json;
};

const std::string& event_json_once(const FleetEvent& e) {
  thread_local LastEventJson last;
  if (!last.valid || last.at_ms != e.at_ms || last.type != e.type || last.rig_id != e.rig_id ||
      last.cmd_id != e.cmd_id || last.detail != e.detail) {
    last.json = event_json_text(e);   // JSON text has no raw newlines
    last.type = e.type;
    last.rig_id = e.rig_id;
    last.cmd_id = e.cmd_id;
    last.detail = e.detail;
    last.at_ms = e.at_ms;
    last.valid = true;
  }
  return last.json;
}

}  // namespace

std::string format_sse_event(const FleetEvent& event, std::uint64_t id) {
  const std::string& data = event_json_once(event);
  std::string_view type = event.type.empty() ? std::string_view("event") : std::string_view(event.type);
  std::string out;
  out.reserve(32 + type.size() + data.size());
  out += "id: ";
  out += std::to_string(id);
  out += "\nevent: ";
  // The event name must stay on one line.
  for (const char c : type) out += (c == '\n' || c == '\r') ? '_' : c;
  out += "\ndata: ";
  out += data;
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
