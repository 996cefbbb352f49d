#include "fleet/broker_mesh.hpp"

namespace fleetlink::broker {

const char* to_string(MeshKind k) noexcept {
  switch (k) {
    case MeshKind::probe: return "probe";
    case MeshKind::superseded: return "superseded";
    case MeshKind::command: return "command";
    case MeshKind::command_answer: return "command_answer";
    case MeshKind::cancel: return "cancel";
    case MeshKind::cancel_answer: return "cancel_answer";
    case MeshKind::reconnect: return "reconnect";
    case MeshKind::reconnect_answer: return "reconnect_answer";
    case MeshKind::event: return "event";
    case MeshKind::rig_seen: return "rig_seen";
    case MeshKind::ping: return "ping";
  }
  return "unknown";
}

std::optional<MeshKind> mesh_kind_from_string(std::string_view s) noexcept {
  for (std::uint8_t i = 0; i <= static_cast<std::uint8_t>(kLastMeshKind); ++i) {
    const auto k = static_cast<MeshKind>(i);
    if (s == to_string(k)) return k;
  }
  return std::nullopt;
}

}  // namespace fleetlink::broker
