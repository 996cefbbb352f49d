#pragma once
// The commands this broker holds in memory, by cmd_id: every command not in a
// final state (their number is bounded by the rigs' outboxes and held queues),
// and the most recent finished ones (bounded by `capacity`; the store keeps the
// rest). Also indexed by rig (its open commands, oldest first: what a rig's next
// connection is sent) and by idempotency key. A command becomes final through
// finish() (called by lifecycle.cpp), which queues it for eviction: the table
// never scans, so a fan-out with more commands in flight than `capacity` costs
// O(1) per command. Pure logic, no sockets.
#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fleet/fleet.hpp"
#include "fleet/string_hash.hpp"

namespace fleetlink::broker {

// A cmd_id stored inline (UUID text, 36 characters): the table's keys and its
// eviction queue hold no pointer to a separate string, so a lookup does not miss
// the cache a second time to compare the key.
struct CmdKey {
  static constexpr std::size_t kMaxBytes = 40;
  std::array<char, kMaxBytes> text{};
  std::uint8_t size = 0;

  // nullopt for an id longer than kMaxBytes (never a UUID).
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

  // A new command, or one read from the store. Its place is stable until it is
  // evicted; nullptr when its id is not a UUID's length, or when it is already
  // final and was evicted at once. An existing entry with the same id is replaced.
  CommandView* insert(CommandView view);
  // Puts v (a command of this table) in its final state: out of its rig's open
  // list, and evictable (by the next insert, never under the caller's feet).
  void finish(CommandView& v, CommandState final_state);
  CommandView* find(std::string_view cmd_id);
  const CommandView* find(std::string_view cmd_id) const;
  CommandView* find_by_key(std::string_view idempotency_key);
  // The rig's commands not in a final state, oldest first (empty: none).
  const std::vector<CommandView*>& open_of(std::string_view rig_id) const;
  // Every rig with open commands (not the rigs whose lists are empty now: a
  // deadline scan a few times a second must not walk every rig that ever had a
  // command). visit must not change the table.
  template <typename F>
  void for_each_open_rig(F&& visit) const {
    for (const OpenEntry* e : busy_) visit(std::string_view(e->first), e->second.commands);
  }
  template <typename F>
  void for_each(F&& visit) const {
    for (const auto& [key, v] : by_id_) visit(v);
  }
  // Removes a command (a creation withdrawn before it was recorded).
  void erase(std::string_view cmd_id);
  std::size_t size() const noexcept { return by_id_.size(); }
  std::size_t open_count() const noexcept { return open_count_; }

  // A bounded tail of streamed output per command.
  static constexpr std::size_t kStreamTail = 64 * 1024;

 private:
  void index(CommandView& v);
  void unindex_open(const CommandView& v);
  void evict();
  void compact_finished();
  std::size_t capacity_;
  std::unordered_map<CmdKey, CommandView, CmdKeyHash> by_id_;
  std::deque<CmdKey> finished_;  // finish order: what evict() removes first
  struct OpenList {
    std::vector<CommandView*> commands;
    std::size_t busy_at = kNotBusy;  // its place in busy_ while commands is not empty
  };
  static constexpr std::size_t kNotBusy = static_cast<std::size_t>(-1);
  using OpenMap = std::unordered_map<std::string, OpenList, TransparentStringHash, std::equal_to<>>;
  using OpenEntry = OpenMap::value_type;
  OpenMap open_;
  // The entries of open_ whose lists are not empty, in no order (an entry is
  // never erased from open_, so the pointers stay valid).
  std::vector<OpenEntry*> busy_;
  std::unordered_map<std::string, CommandView*, TransparentStringHash, std::equal_to<>> by_key_;
  std::size_t open_count_ = 0;
};

}  // namespace fleetlink::broker
