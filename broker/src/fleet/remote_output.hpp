#pragma once
// The output of commands running on other brokers, as their command_output
// events are relayed here: a broker asked for such a command's output
// (GET /v1/commands/{id}/output, fleetctl logs -f through it) reads its record
// from the store, which has the streamed tail only when the command's owner
// writes the record (at its state changes and its RESULT). What was heard is
// laid over that record where it reaches further. Bounded: the last
// kStreamTail bytes of at most max_commands commands, the oldest forgotten
// first; a command's entry goes at its command_done. Pure.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>

#include "fleet/events.hpp"
#include "fleet/fleet.hpp"
#include "fleet/string_hash.hpp"

namespace fleetlink::broker {

class RemoteOutputs {
 public:
  explicit RemoteOutputs(std::size_t max_commands = 256, std::size_t tail_bytes = 64 * 1024)
      : max_commands_(max_commands), tail_bytes_(tail_bytes) {}

  // A command_output event from another broker.
  void add(const FleetEvent& e);
  void forget(std::string_view cmd_id);
  // The record, with the output heard here where it is further along.
  void overlay(CommandView& v) const;
  std::size_t size() const noexcept { return entries_.size(); }

 private:
  struct Entry {
    std::string tail;      // the last bytes heard, ending at `end`
    std::uint64_t end = 0; // the offset after them
  };
  std::size_t max_commands_;
  std::size_t tail_bytes_;
  std::unordered_map<std::string, Entry, TransparentStringHash, std::equal_to<>> entries_;
  std::deque<std::string> order_;  // first heard first; may hold ids already forgotten
};

}  // namespace fleetlink::broker
