#pragma once
// The fleet's event bus: what happened to rigs and commands, for whoever
// listens (SSE streams, held POSTs, control streams, batches). Typed: a
// subscriber names the event types it wants, or one command, and is called
// only for those; nobody compares type strings. An event nobody listens to
// is never built (wants() is asked first on the hot path).
//
// Single-threaded (the event loop). A sink may subscribe or unsubscribe
// (itself or another sink) while it is being called; it must not emit.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fleet/string_hash.hpp"

namespace fleetlink::broker {

enum class EventType : std::uint8_t {
  rig_connected,     // detail: the boot_id
  rig_disconnected,  // detail: why
  rig_event,         // an EVENT frame; detail: "name k=v ..."
  command_acked,     // detail: "duplicate" when the rig had run it before
  command_running,   // its output began, or a reboot was scheduled
  command_done,      // a final state; detail: the state (succeeded, failed, timed_out, ...)
  drain_started,     // detail: the window in ms
  command_output,    // a chunk of a running command's output: detail holds its new bytes, offset where they start
};
inline constexpr std::size_t kEventTypeCount = 8;

// The wire name ("command_acked"), as in SSE "event:" lines and docs/OPERATIONS.md.
const char* to_string(EventType t) noexcept;
std::optional<EventType> event_type_from_string(std::string_view name) noexcept;
// Every type in declaration order (for listing them in errors and docs).
const std::vector<EventType>& all_event_types();

// A command reached a state it will not leave.
constexpr bool is_final(EventType t) noexcept { return t == EventType::command_done; }

// A set of event types, as a bit mask.
class EventTypes {
 public:
  constexpr EventTypes() = default;
  constexpr EventTypes(std::initializer_list<EventType> types) {
    for (EventType t : types) bits_ |= bit(t);
  }
  static constexpr EventTypes all() {
    EventTypes s;
    s.bits_ = (1u << kEventTypeCount) - 1;
    return s;
  }
  constexpr bool contains(EventType t) const noexcept { return (bits_ & bit(t)) != 0; }
  constexpr bool empty() const noexcept { return bits_ == 0; }
  constexpr void add(EventType t) noexcept { bits_ |= bit(t); }
  constexpr bool operator==(const EventTypes&) const = default;

 private:
  static constexpr std::uint32_t bit(EventType t) noexcept { return 1u << static_cast<unsigned>(t); }
  std::uint32_t bits_ = 0;
};

struct FleetEvent {
  EventType type = EventType::rig_connected;
  std::string rig_id;
  std::string cmd_id;    // empty for rig and broker events
  std::string detail;
  std::uint64_t at_ms = 0;  // Unix ms
  std::uint64_t offset = 0;  // command_output: the byte offset of detail in the command's output
};

class EventBus {
 public:
  using Sink = std::function<void(const FleetEvent&)>;
  using Id = std::uint64_t;

  // Every event of these types.
  Id subscribe(EventTypes types, Sink sink);
  // Every event about this command (whatever its type), until unsubscribed.
  Id subscribe_command(std::string_view cmd_id, Sink sink);
  void unsubscribe(Id id);

  // Whether an event of this type (about this command) would reach anybody.
  bool wants(EventType type, std::string_view cmd_id = {}) const noexcept;
  // Delivers to the type's subscribers, then to the command's.
  void emit(const FleetEvent& event);
  std::size_t subscriptions() const noexcept { return sinks_.size(); }

 private:
  struct Entry {
    EventTypes types;   // empty for a command subscription
    std::string cmd_id; // empty for a type subscription
    Sink sink;
  };
  std::map<Id, Entry> sinks_;
  std::vector<Id> typed_;  // the type subscriptions, oldest first
  std::uint32_t type_count_[kEventTypeCount] = {};
  std::unordered_map<std::string, std::vector<Id>, TransparentStringHash, std::equal_to<>> by_command_;
  Id next_id_ = 1;
};

}  // namespace fleetlink::broker
