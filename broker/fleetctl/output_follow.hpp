#pragma once
// Following a command's output (fleetctl logs -f, send --wait): the broker's
// stored output first, then its command_output events, each printed once even
// where the two overlap (an event can carry bytes the stored tail already had).
// Pure: no sockets, unit-tested.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fleetctl {

class OutputFollower {
 public:
  // What to print of `data`, which starts at `offset` in the command's output:
  // the bytes past what was printed already. A start past that point is a gap
  // (bytes the broker no longer has, or never saw): counted in gap_bytes().
  std::string take(std::uint64_t offset, std::string_view data);
  std::uint64_t printed_to() const noexcept { return end_; }
  std::uint64_t gap_bytes() const noexcept { return gap_; }

 private:
  std::uint64_t end_ = 0;
  std::uint64_t gap_ = 0;
  bool started_ = false;
};

// Server-Sent Events as they arrive in pieces: each complete event's "event:"
// name and "data:" payload (several data lines joined by '\n'); comments,
// "retry:" and heartbeats give nothing.
class SseReader {
 public:
  struct Event {
    std::string name;
    std::string data;
  };
  std::vector<Event> feed(std::string_view piece);
  // What arrived that is not an event (a JSON error body has no blank line).
  const std::string& pending() const noexcept { return buffer_; }

 private:
  std::string buffer_;
};

}  // namespace fleetctl
