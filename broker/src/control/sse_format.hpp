#pragma once
// Server-Sent Events for GET /v1/events: the wire format of one event, and
// the bounded queue each stream keeps while its socket drains.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fleet/fleet.hpp"

namespace fleetlink::broker {

// "id: 7\nevent: rig_connected\ndata: {…json…}\n\n"
std::string format_sse_event(const FleetEvent& event, std::uint64_t id);
// The same, appended to `out`.
void append_sse_event(std::string& out, const FleetEvent& event, std::uint64_t id);

// A comment line: keeps proxies and idle timers from closing a quiet stream.
inline constexpr std::string_view kSseHeartbeat = ": keepalive\n\n";

// Text waiting to be written to one SSE client, in one buffer (an event is
// formatted straight into it). A client that does not read cannot make the
// broker grow without bound: past the cap the stream is marked overflowed and
// the transport closes it (the client reconnects).
class SseQueue {
 public:
  explicit SseQueue(std::size_t max_bytes = 16 * 1024 * 1024) : max_bytes_(max_bytes) {}

  // False (and nothing queued) when the queue would exceed its cap.
  bool push(std::string_view text);
  bool push_event(const FleetEvent& event, std::uint64_t id);
  bool empty() const noexcept { return pos_ >= buf_.size(); }
  // Takes up to max_bytes of the queued text, oldest first (an event may be
  // split between two takes: the stream is one byte sequence).
  std::string pop(std::size_t max_bytes);
  bool overflowed() const noexcept { return overflowed_; }
  std::size_t bytes() const noexcept { return buf_.size() - pos_; }

 private:
  bool over_cap();
  std::string buf_;
  std::size_t pos_ = 0;  // bytes of buf_ already taken
  std::size_t max_bytes_;
  bool overflowed_ = false;
};

}  // namespace fleetlink::broker
