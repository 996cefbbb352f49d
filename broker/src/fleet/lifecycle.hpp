#pragma once
// Every step of a command's life, in one place (docs/PROTOCOL.md section 6):
//
//   queued -> sent -> acked -> running -> succeeded | failed | timed_out | cancelled | interrupted
//
// A command whose connection ends before its ACK stays sent and is written
// again on the rig's next connection (same cmd_id, new seq). Never run:
// undeliverable (not acknowledged by its delivery deadline, or the rig says it
// never had it), rejected (NACK). By the broker: timed_out at the execution
// deadline (a CANCEL goes to the rig), cancelled before delivery, interrupted
// when the rig came back with a new boot_id and no result, succeeded for a
// reboot when the rig comes back with a new boot_id.
//
// The last seven states are final: nothing changes a finished command (a late
// RESULT is kept with it, its state stays). Each step takes the time it
// happened (Unix ms). Pure.
#include <cstdint>
#include <string>
#include <string_view>

#include "fleet/command_table.hpp"
#include "fleetlink/messages.hpp"
#include "fleetlink/uuid.hpp"

namespace fleetlink::broker::lifecycle {

// Order of progress: a store never moves a command back to a lower rank.
constexpr int rank(CommandState s) noexcept {
  switch (s) {
    case CommandState::queued: return 0;
    case CommandState::sent: return 1;
    case CommandState::acked: return 2;
    case CommandState::running: return 3;
    default: return 4;  // final
  }
}

// A reboot is done when the rig comes back with a new boot_id, not when the
// agent says it is scheduled.
inline bool awaits_new_boot(const CommandView& v) noexcept {
  return v.kind == "reboot" && !is_final(v.state) && !v.acked_boot_id.empty();
}

// The agent process that accepted a command the rig answers on a connection of boot
// `boot`: that one, unless the answer repeats an earlier acceptance (ACK duplicate,
// or a RESULT before any ACK) of a command never acknowledged, on the first
// connection since the rig came back with a new boot_id: then it was the earlier
// process (`previous`, non-zero), whose ACK was lost with its connection.
inline const Uuid& accepting_boot(const CommandView& v, bool repeat, const Uuid& boot, const Uuid& previous) noexcept {
  const bool never_acked = v.state == CommandState::queued || v.state == CommandState::sent;
  return repeat && never_acked && previous != Uuid{} ? previous : boot;
}

// Written to a connection with this seq.
void sent(CommandView& v, std::uint64_t seq, std::uint64_t now_ms);
// The connection it was written on ended before the ACK: it waits for the next one.
void unsent(CommandView& v);
// The rig (boot `boot_id`) accepted it, or had run it before (ack.duplicate).
void acked(CommandView& v, const msg::Ack& ack, std::string_view boot_id, std::uint64_t now_ms);
// A chunk of its output arrived; returns the bytes skipped before the chunk (a gap).
std::uint64_t output(CommandView& v, const msg::OutputChunk& chunk, std::uint64_t now_ms);

// Its RESULT arrived (output cut to kMaxResultOutput). `never_acked_probe`: the
// result answers the CANCEL the broker sent to learn whether the rig ever had a
// command whose delivery deadline passed (PROTOCOL 3.9).
struct ResultEffect {
  std::uint64_t lost_bytes = 0;  // output lost in transit, now counted in the result's dropped_bytes
  bool finished = false;         // false: a reboot scheduled, its new boot_id is awaited
  bool late = false;             // the command was already final: the result is kept, its state stays
};
ResultEffect result(CommandTable& table, CommandView& v, msg::Result result, std::uint64_t now_ms);
// The rig refused it (NACK).
void rejected(CommandTable& table, CommandView& v, const msg::Nack& nack, std::uint64_t now_ms);
// Ended by the broker: timed_out, cancelled, undeliverable, interrupted, or succeeded (a reboot's new boot).
void end(CommandTable& table, CommandView& v, CommandState final_state, std::string detail, std::uint64_t now_ms);

// The final state a RESULT status means for this command.
CommandState state_for(const CommandView& v, const msg::Result& r) noexcept;

}  // namespace fleetlink::broker::lifecycle
