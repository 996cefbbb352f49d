// RESULT: the final word on a command of this rig, whichever connection (or
// broker) it was sent on: a command this broker does not hold is read from the
// store. Also settles a command whose ACK was never seen (also when OUTPUT came
// first and made it running): a finished command never stays in an outbox.
#include "fleet/fleet_core.hpp"
#include "fleet/lifecycle.hpp"

namespace fleetlink::broker {

void FleetCore::on_result(RigSession& s, msg::Result result) {
  if (!store_.answers_at_once() && commands_.find(result.cmd_id) == nullptr) {
    // A store that answers later (Redis): read first, go on with the answer.
    const std::string cmd_id = result.cmd_id;
    auto held = std::make_shared<msg::Result>(std::move(result));
    (void)fetch_then(s, cmd_id, [this, held](RigSession& again) {
      if (commands_.find(held->cmd_id) == nullptr) return observer_.result_refused(again, held->cmd_id, "unknown cmd");
      on_result(again, std::move(*held));
    });
    return;
  }
  CommandView* v = find_command(result.cmd_id);
  if (!v) {
    observer_.result_refused(s, result.cmd_id, "unknown cmd");
    return;
  }
  if (v->rig_id != s.rig_id) {
    observer_.result_refused(s, result.cmd_id, "of rig " + v->rig_id);
    return;
  }
  if (v->in_outbox) {
    s.outbox.settle_cmd(v->cmd_id);
    v->in_outbox = false;
  }
  if (s.backlog()) std::erase(*s.backlog(), v);
  if (v->acked_boot_id.empty())
    v->acked_boot_id = lifecycle::accepting_boot(*v, true, s.boot_id, s.previous_boot()).to_string();
  const std::uint64_t dropped_before = result.dropped_bytes;
  const lifecycle::ResultEffect effect = lifecycle::result(commands_, *v, std::move(result), clock_.wall_ms());
  if (effect.lost_bytes > 0) observer_.output_lost(s, *v, effect.lost_bytes, dropped_before);
  if (v->result) observer_.result(s, *v->result);
  record(*v, effect.finished);
  if (effect.late) {
    observer_.result_refused(s, v->cmd_id, std::string("late: already ") + to_string(v->state) + ", result kept");
  } else if (effect.finished) {
    finished(*v);
  } else if (lifecycle::awaits_new_boot(*v) && parse_uuid(v->acked_boot_id) != s.boot_id) {
    // Scheduled by an earlier boot whose ACK was lost: this connection is the new boot.
    end(*v, CommandState::succeeded, "the rig came back with boot_id " + s.boot_id.to_string());
  } else {  // a reboot scheduled: done when the rig comes back with a new boot_id
    emit(EventType::command_running, s.rig_id, v->cmd_id, v->detail);
  }
  fill_outbox(s);
}

}  // namespace fleetlink::broker
