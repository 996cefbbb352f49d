#pragma once
// Every command this broker has seen, by cmd_id, for GET /v1/commands/{id}.
// Bounded: past `capacity` the oldest *finished* command (done, nacked, lost)
// is evicted; commands still in flight are kept (their number is bounded by the
// outboxes). Pure logic, no sockets.
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>

#include "fleet.hpp"

namespace fleetlink::broker {

class CommandTable {
 public:
  explicit CommandTable(std::size_t capacity) : capacity_(capacity) {}

  CommandView& insert(CommandView view);
  CommandView* find(std::string_view cmd_id);
  const CommandView* find(std::string_view cmd_id) const;
  // Remove a command that never made it into an outbox.
  void erase(std::string_view cmd_id);
  std::size_t size() const noexcept { return by_id_.size(); }

  // Keep a bounded tail of streamed output per command.
  static constexpr std::size_t kStreamTail = 64 * 1024;
  static bool finished(CommandState s) noexcept {
    return s == CommandState::done || s == CommandState::nacked || s == CommandState::lost;
  }

 private:
  void evict();
  std::size_t capacity_;
  std::unordered_map<std::string, CommandView> by_id_;
  std::deque<std::string> order_;   // insertion order, for eviction
};

}  // namespace fleetlink::broker
