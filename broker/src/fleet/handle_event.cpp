// EVENT: something the rig wants the control side to know; passed on as is.
#include "fleet/fleet_core.hpp"

namespace fleetlink::broker {

void FleetCore::on_event(RigSession& s, const msg::Event& event) {
  if (!bus_.wants(EventType::rig_event)) return;
  std::string detail = event.name;
  for (const auto& [k, v] : event.fields) detail += " " + k + "=" + v;
  emit(EventType::rig_event, s.rig_id, {}, std::move(detail));
}

}  // namespace fleetlink::broker
