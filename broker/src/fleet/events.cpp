#include "fleet/events.hpp"

#include <algorithm>
#include <iterator>
#include <span>

namespace fleetlink::broker {

const char* to_string(EventType t) noexcept {
  switch (t) {
    case EventType::rig_connected: return "rig_connected";
    case EventType::rig_disconnected: return "rig_disconnected";
    case EventType::rig_event: return "rig_event";
    case EventType::command_acked: return "command_acked";
    case EventType::command_running: return "command_running";
    case EventType::command_done: return "command_done";
    case EventType::drain_started: return "drain_started";
    case EventType::command_output: return "command_output";
  }
  return "unknown";
}

const std::vector<EventType>& all_event_types() {
  static const std::vector<EventType> kAll = {
      EventType::rig_connected,   EventType::rig_disconnected, EventType::rig_event,    EventType::command_acked,
      EventType::command_running, EventType::command_done,     EventType::drain_started, EventType::command_output};
  return kAll;
}

std::optional<EventType> event_type_from_string(std::string_view name) noexcept {
  for (EventType t : all_event_types())
    if (name == to_string(t)) return t;
  return std::nullopt;
}

EventBus::Id EventBus::subscribe(EventTypes types, Sink sink) {
  const Id id = next_id_++;
  for (EventType t : all_event_types())
    if (types.contains(t)) ++type_count_[static_cast<std::size_t>(t)];
  sinks_.emplace(id, Entry{types, {}, std::move(sink)});
  typed_.push_back(id);
  return id;
}

EventBus::Id EventBus::subscribe_command(std::string_view cmd_id, Sink sink) {
  const Id id = next_id_++;
  sinks_.emplace(id, Entry{{}, std::string(cmd_id), std::move(sink)});
  auto c = by_command_.find(cmd_id);
  if (c == by_command_.end()) c = by_command_.emplace(std::string(cmd_id), std::vector<Id>{}).first;
  c->second.push_back(id);
  return id;
}

void EventBus::unsubscribe(Id id) {
  const auto it = sinks_.find(id);
  if (it == sinks_.end()) return;
  Entry& e = it->second;
  if (e.cmd_id.empty()) {
    for (EventType t : all_event_types())
      if (e.types.contains(t)) --type_count_[static_cast<std::size_t>(t)];
    std::erase(typed_, id);
  } else if (const auto c = by_command_.find(e.cmd_id); c != by_command_.end()) {
    std::erase(c->second, id);
    if (c->second.empty()) by_command_.erase(c);
  }
  sinks_.erase(it);
}

bool EventBus::wants(EventType type, std::string_view cmd_id) const noexcept {
  if (type_count_[static_cast<std::size_t>(type)] > 0) return true;
  if (cmd_id.empty() || by_command_.empty()) return false;
  return by_command_.find(cmd_id) != by_command_.end();
}

void EventBus::emit(const FleetEvent& event) {
  // Sinks may unsubscribe themselves or others meanwhile: take the ids first.
  // Most events reach a handful of sinks, which fit on the stack.
  Id on_stack[16];
  std::vector<Id> on_heap;
  std::size_t n = 0;
  auto take = [&](Id id) {
    if (n < std::size(on_stack)) {
      on_stack[n++] = id;
      return;
    }
    if (on_heap.empty()) on_heap.assign(on_stack, on_stack + n);
    on_heap.push_back(id);
    ++n;
  };
  if (type_count_[static_cast<std::size_t>(event.type)] > 0) {
    for (Id id : typed_)
      if (sinks_.find(id)->second.types.contains(event.type)) take(id);
  }
  if (!event.cmd_id.empty() && !by_command_.empty()) {
    if (const auto c = by_command_.find(std::string_view(event.cmd_id)); c != by_command_.end())
      for (Id id : c->second) take(id);
  }
  const std::span<const Id> ids = on_heap.empty() ? std::span<const Id>(on_stack, n) : std::span<const Id>(on_heap);
  for (Id id : ids) {
    const auto it = sinks_.find(id);
    if (it != sinks_.end() && it->second.sink) it->second.sink(event);
  }
}

}  // namespace fleetlink::broker
