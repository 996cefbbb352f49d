// ACK: the rig accepted the command with this seq (and cmd_id); it leaves the
// connection's outbox, which makes room for what waits behind it. A duplicate
// ACK says the rig had run that cmd_id before: its RESULT follows (or came).
#include "fleet/fleet_core.hpp"
#include "fleet/lifecycle.hpp"

namespace fleetlink::broker {

void FleetCore::on_ack(RigSession& s, const msg::Ack& ack) {
  const std::optional<OutboxEntry> entry = s.outbox.settle(ack.seq, ack.cmd_id);
  if (!entry) {
    observer_.unknown_answer(s, "ack", ack.seq, ack.cmd_id);
    return;
  }
  const std::uint64_t now = clock_.wall_ms();
  s.outbox.record_ack(ack.seq, now);
  if (CommandView* v = entry->view ? entry->view : commands_.find(entry->cmd_id)) {
    v->in_outbox = false;
    const Uuid& boot = lifecycle::accepting_boot(*v, ack.duplicate, s.boot_id, s.previous_boot());
    if (v->acked_boot_id.size() != 36 || parse_uuid(v->acked_boot_id) != boot) v->acked_boot_id = boot.to_string();
    lifecycle::acked(*v, ack, v->acked_boot_id, now);
    record(*v);
  }
  observer_.acked(s, ack, now - std::min(now, entry->enqueued_ms));
  emit(EventType::command_acked, s.rig_id, entry->cmd_id, ack.duplicate ? "duplicate" : "");
  fill_outbox(s);
}

}  // namespace fleetlink::broker
