// NACK: the rig refused the command with this seq; it will not run (rejected) --
// except a seq_gap, which says nothing of the command itself: the rig ran nothing
// at or past the gap and reconnects (4412), and the command goes again, under its
// cmd_id, on the next connection (PROTOCOL 6).
#include "fleet/fleet_core.hpp"
#include "fleet/lifecycle.hpp"

namespace fleetlink::broker {

void FleetCore::on_nack(RigSession& s, const msg::Nack& nack) {
  const std::optional<OutboxEntry> entry = s.outbox.settle(nack.seq, nack.cmd_id);
  if (!entry) {
    observer_.unknown_answer(s, "nack", nack.seq, nack.cmd_id);
    return;
  }
  msg::Nack seen = nack;
  seen.cmd_id = entry->cmd_id;  // the NACK of an undecodable COMMAND may carry none
  observer_.nacked(s, seen);
  if (nack.reason == msg::NackReason::seq_gap) {
    // Nothing more goes on this connection: the rig is leaving it.
    if (CommandView* v = entry->view ? entry->view : commands_.find(entry->cmd_id)) {
      v->in_outbox = false;
      if (!is_final(v->state)) lifecycle::unsent(*v);
    }
    return;
  }
  if (CommandView* v = entry->view ? entry->view : commands_.find(entry->cmd_id)) {
    v->in_outbox = false;
    if (!is_final(v->state)) {
      lifecycle::rejected(commands_, *v, seen, clock_.wall_ms());
      record(*v, true);
      finished(*v);
    }
  }
  fill_outbox(s);
}

}  // namespace fleetlink::broker
