// String forms of the Fleet enums (declared in fleet.hpp), used in JSON and logs.
#include "fleet/fleet.hpp"

namespace fleetlink::broker {

const char* to_string(CommandState s) noexcept {
  switch (s) {
    case CommandState::queued: return "queued";
    case CommandState::sent: return "sent";
    case CommandState::acked: return "acked";
    case CommandState::running: return "running";
    case CommandState::succeeded: return "succeeded";
    case CommandState::failed: return "failed";
    case CommandState::timed_out: return "timed_out";
    case CommandState::cancelled: return "cancelled";
    case CommandState::undeliverable: return "undeliverable";
    case CommandState::rejected: return "rejected";
    case CommandState::interrupted: return "interrupted";
  }
  return "unknown";
}

std::optional<CommandState> command_state_from_string(std::string_view s) noexcept {
  for (std::size_t i = 0; i < kCommandStateCount; ++i) {
    const auto state = static_cast<CommandState>(i);
    if (s == to_string(state)) return state;
  }
  return std::nullopt;
}

const char* to_string(EnqueueError e) noexcept {
  switch (e) {
    case EnqueueError::unknown_rig: return "unknown_rig";
    case EnqueueError::rig_unresponsive: return "rig_unresponsive";
    case EnqueueError::unsupported_kind: return "unsupported_kind";
    case EnqueueError::draining: return "draining";
    case EnqueueError::bad_request: return "bad_request";
    case EnqueueError::conflict: return "conflict";
    case EnqueueError::store_unavailable: return "store_unavailable";
    case EnqueueError::registry_unavailable: return "registry_unavailable";
    case EnqueueError::route_timeout: return "route_timeout";
    case EnqueueError::kind_not_allowed: return "kind_not_allowed";
  }
  return "unknown";
}

}  // namespace fleetlink::broker
