// NACK: the rig refused the command with this seq; it will not run.
#include "fleet/fleet_core.hpp"
#include "fleet/lifecycle.hpp"

namespace fleetlink::broker {

void FleetCore::on_nack(RigSession& s, const msg::Nack& nack) {
  const std::optional<OutboxEntry> entry = s.outbox.settle(nack.seq, nack.cmd_id);
  if (!entry) {
    observer_.unknown_answer(s, "nack", nack.seq, nack.cmd_id);
    return;
  }
  if (CommandView* v = entry->view ? entry->view : commands_.find(entry->cmd_id))
    lifecycle::nacked(commands_, *v, nack, clock_.wall_ms());
  msg::Nack seen = nack;
  seen.cmd_id = entry->cmd_id;  // the NACK of an undecodable COMMAND may carry none
  observer_.nacked(s, seen);
  emit(EventType::command_nacked, s.rig_id, entry->cmd_id, fleetlink::to_string(nack.reason));
}

}  // namespace fleetlink::broker
