#pragma once
// Every command this broker has seen, by cmd_id, for GET /v1/commands/{id}.
// Bounded: past `capacity` the command that finished (done, nacked, lost) first
// is evicted; commands still in flight are kept (their number is bounded by the
// outboxes). A command reaches its final state through finish(), which queues it
// for eviction: the table never scans its commands in flight, so a fan-out with
// more commands in flight than `capacity` costs O(1) per command. Pure logic, no
// sockets.
#include <cstdint>
#include <array>
#include <cstring>
#include <deque>
#include <optional>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "fleet/fleet.hpp"
#include "fleet/string_hash.hpp"

namespace fleetlink::broker {

// A cmd_id stored inline (the broker's ids are UUIDv7 text, 36 characters): the
// table's keys and its eviction queue hold no pointer to a separate string, so a
// lookup does not miss the cache a second time to compare the key.
struct CmdKey {
  static constexpr std::size_t kMaxBytes = 40;
  std::array<char, kMaxBytes> text{};
  std::uint8_t size = 0;

  // nullopt for an id longer than kMaxBytes (never one of the broker's).
  static std::optional<CmdKey> of(std::string_view id) noexcept {
    if (id.size() > kMaxBytes) return std::nullopt;
    CmdKey k;
    std::memcpy(k.text.data(), id.data(), id.size());
    k.size = static_cast<std::uint8_t>(id.size());
    return k;
  }
  std::string_view view() const noexcept { return {text.data(), size}; }
  bool operator==(const CmdKey& o) const noexcept { return view() == o.view(); }
};

struct CmdKeyHash {
  std::size_t operator()(const CmdKey& k) const noexcept { return std::hash<std::string_view>{}(k.view()); }
};

class CommandTable {
 public:
  explicit CommandTable(std::size_t capacity) : capacity_(capacity) {}

  // The command's place in the table (stable until it is evicted), or nullptr
  // when a command inserted already finished was evicted at once (or its id is
  // longer than CmdKey::kMaxBytes: not kept).
  CommandView* insert(CommandView view);
  // Puts v (a command of this table) in its final state and makes it evictable.
  void finish(CommandView& v, CommandState final_state);
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
  void compact_finished();
  std::size_t capacity_;
  std::unordered_map<CmdKey, CommandView, CmdKeyHash> by_id_;
  std::deque<CmdKey> finished_;  // finish order: what evict() removes first
};

}  // namespace fleetlink::broker
