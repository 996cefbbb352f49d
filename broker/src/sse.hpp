#pragma once
// Server-Sent Events for GET /v1/events: the wire format of one event, and
// the bounded queue each stream keeps while its socket drains.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "fleet.hpp"

namespace fleetlink::broker {

// "id: 7\nevent: rig_connected\ndata: {…json…}\n\n"
std::string format_sse_event(const FleetEvent& event, std::uint64_t id);

// A comment line: keeps proxies and idle timers from closing a quiet stream.
inline constexpr std::string_view kSseHeartbeat = ": keepalive\n\n";

// Events waiting to be written to one SSE client. A client that does not
// read cannot make the broker grow without bound: past the cap the stream is
// marked overflowed and the transport closes it (the client reconnects).
class SseQueue {
 public:
  explicit SseQueue(std::size_t max_bytes = 16 * 1024 * 1024) : max_bytes_(max_bytes) {}

  // False (and nothing queued) when the queue would exceed its cap.
  bool push(std::string chunk);
  bool empty() const noexcept { return chunks_.empty(); }
  // Takes up to max_bytes of queued text (whole chunks, at least one).
  std::string pop(std::size_t max_bytes);
  bool overflowed() const noexcept { return overflowed_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  std::deque<std::string> chunks_;
  std::size_t bytes_ = 0;
  std::size_t max_bytes_;
  bool overflowed_ = false;
};

}  // namespace fleetlink::broker
