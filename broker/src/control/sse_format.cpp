#include "control/sse_format.hpp"

#include <algorithm>

#include "control/control_json.hpp"

namespace fleetlink::broker {

namespace {

// The JSON of the last event formatted. The broker hands the same event to every
// SSE stream, each of which formats it with its own id: the JSON is made once per
// event, not once per subscriber. Keyed by content, so it is never stale (two
// events with equal fields have equal JSON); the assignments reuse capacity.
struct LastEventJson {
  EventType type = EventType::rig_connected;
  std::string rig_id, cmd_id, detail;
  std::uint64_t at_ms = 0;
  std::uint64_t offset = 0;
  bool valid = false;
  std::string json;
};

const std::string& event_json_once(const FleetEvent& e) {
  thread_local LastEventJson last;
  if (!last.valid || last.at_ms != e.at_ms || last.type != e.type || last.rig_id != e.rig_id ||
      last.cmd_id != e.cmd_id || last.offset != e.offset || last.detail != e.detail) {
    last.json = event_json_text(e);   // JSON text has no raw newlines
    last.type = e.type;
    last.rig_id = e.rig_id;
    last.cmd_id = e.cmd_id;
    last.detail = e.detail;
    last.at_ms = e.at_ms;
    last.offset = e.offset;
    last.valid = true;
  }
  return last.json;
}

}  // namespace

void append_sse_event(std::string& out, const FleetEvent& event, std::uint64_t id) {
  const std::string& data = event_json_once(event);
  out += "id: ";
  out += std::to_string(id);
  out += "\nevent: ";
  out += to_string(event.type);
  out += "\ndata: ";
  out += data;
  out += "\n\n";
}

std::string format_sse_event(const FleetEvent& event, std::uint64_t id) {
  std::string out;
  append_sse_event(out, event, id);
  return out;
}

bool SseQueue::over_cap() {
  if (overflowed_ || buf_.size() - pos_ > max_bytes_) {
    overflowed_ = true;
    return true;
  }
  return false;
}

bool SseQueue::push(std::string_view text) {
  if (overflowed_ || bytes() + text.size() > max_bytes_) {
    overflowed_ = true;
    return false;
  }
  buf_ += text;
  return true;
}

bool SseQueue::push_event(const FleetEvent& event, std::uint64_t id) {
  if (overflowed_) return false;
  const std::size_t before = buf_.size();
  append_sse_event(buf_, event, id);
  if (over_cap()) {
    buf_.resize(before);  // nothing queued
    return false;
  }
  return true;
}

std::string SseQueue::pop(std::size_t max_bytes) {
  const std::size_t n = std::min(max_bytes, bytes());
  std::string out = buf_.substr(pos_, n);
  pos_ += n;
  if (pos_ >= buf_.size()) {
    buf_.clear();  // keeps its capacity for the next turn's events
    pos_ = 0;
  } else if (pos_ > buf_.size() / 2) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  return out;
}

}  // namespace fleetlink::broker
