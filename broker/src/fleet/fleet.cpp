// String forms of the Fleet enums (declared in fleet.hpp), used in JSON and logs.
#include "fleet/fleet.hpp"

namespace fleetlink::broker {

const char* to_string(CommandState s) noexcept {
  switch (s) {
    case CommandState::queued: return "queued";
    case CommandState::sent: return "sent";
    case CommandState::acked: return "acked";
    case CommandState::running: return "running";
    case CommandState::done: return "done";
    case CommandState::nacked: return "nacked";
    case CommandState::lost: return "lost";
  }
  return "unknown";
}

const char* to_string(EnqueueError e) noexcept {
  switch (e) {
    case EnqueueError::unknown_rig: return "unknown_rig";
    case EnqueueError::rig_unresponsive: return "rig_unresponsive";
    case EnqueueError::unsupported_kind: return "unsupported_kind";
    case EnqueueError::draining: return "draining";
    case EnqueueError::bad_request: return "bad_request";
  }
  return "unknown";
}

}  // namespace fleetlink::broker
