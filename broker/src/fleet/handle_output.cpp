// OUTPUT: a chunk of a running command's output stream (the broker keeps a
// bounded tail; the RESULT carries the head). The command is now running, and
// the chunk's new bytes are a command_output event for whoever follows it.
#include <algorithm>

#include "fleet/fleet_core.hpp"
#include "fleet/lifecycle.hpp"

namespace fleetlink::broker {

void FleetCore::on_output(RigSession& s, const msg::OutputChunk& chunk) {
  if (!store_.answers_at_once() && commands_.find(chunk.cmd_id) == nullptr) {
    auto held = std::make_shared<msg::OutputChunk>(chunk);
    (void)fetch_then(s, chunk.cmd_id, [this, held](RigSession& again) {
      if (commands_.find(held->cmd_id) != nullptr) on_output(again, *held);
    });
    return;
  }
  CommandView* v = find_command(chunk.cmd_id);
  if (!v || v->rig_id != s.rig_id) return;
  const std::uint64_t expected = v->stream_next_offset;
  const CommandState before = v->state;
  if (const std::uint64_t gap = lifecycle::output(*v, chunk, clock_.wall_ms()); gap > 0)
    observer_.output_gap(s, chunk.cmd_id, expected, chunk.offset, gap);
  if (v->state != before) {
    record(*v);
    emit(EventType::command_running, s.rig_id, v->cmd_id, {});
  }
  // Only what was not seen before (a chunk sent again after a reconnect overlaps).
  const std::uint64_t begin = std::max(chunk.offset, expected);
  const std::uint64_t end = v->stream_next_offset;
  if (end > begin && end - begin <= chunk.data.size() && heard(EventType::command_output, v->cmd_id)) {
    const auto* data = reinterpret_cast<const char*>(chunk.data.data()) + (chunk.data.size() - (end - begin));
    emit(EventType::command_output, s.rig_id, v->cmd_id, std::string(data, static_cast<std::size_t>(end - begin)),
         begin);
  }
}

}  // namespace fleetlink::broker
