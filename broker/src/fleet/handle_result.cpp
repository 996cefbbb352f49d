// RESULT: the final word on a command of this rig. Also settles a command whose
// ACK was never seen (also when OUTPUT came first and made it running): a
// finished command never stays in an outbox, where it would later be lost.
#include "fleet/fleet_core.hpp"
#include "fleet/lifecycle.hpp"

namespace fleetlink::broker {

void FleetCore::on_result(RigSession& s, msg::Result result) {
  CommandView* v = commands_.find(result.cmd_id);
  if (!v) {
    observer_.result_refused(s, result.cmd_id, "unknown cmd");
    return;
  }
  if (v->rig_id != s.rig_id) {
    observer_.result_refused(s, result.cmd_id, "of rig " + v->rig_id);
    return;
  }
  if (v->state != CommandState::acked) s.outbox.settle_cmd(v->cmd_id);
  const std::uint64_t dropped_before = result.dropped_bytes;
  const std::uint64_t lost = lifecycle::done(commands_, *v, std::move(result), clock_.wall_ms());
  if (lost > 0) observer_.output_lost(s, *v, lost, dropped_before);
  observer_.result(s, *v->result);
  emit(EventType::command_done, s.rig_id, v->cmd_id, fleetlink::to_string(v->result->status));
}

}  // namespace fleetlink::broker
