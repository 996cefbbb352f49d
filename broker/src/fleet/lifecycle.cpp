#include "fleet/lifecycle.hpp"

#include "fleet/output_accounting.hpp"

namespace fleetlink::broker::lifecycle {

namespace {

// The agent's answer to a CANCEL for a command it never received (PROTOCOL 3.9).
constexpr std::string_view kNeverReceived = "not running on this rig: never received";

bool never_acked(const CommandView& v) noexcept {
  return v.state == CommandState::queued || v.state == CommandState::sent;
}

void to_final(CommandTable& table, CommandView& v, CommandState state, std::string detail, std::uint64_t now_ms) {
  table.finish(v, state);
  v.finished_at_ms = now_ms;
  v.detail = std::move(detail);
}

}  // namespace

void sent(CommandView& v, std::uint64_t seq, std::uint64_t now_ms) {
  if (v.state == CommandState::queued) v.state = CommandState::sent;
  v.seq = seq;
  v.sent_at_ms = now_ms;
  ++v.attempts;
}

void unsent(CommandView& v) { v.in_outbox = false; }

void acked(CommandView& v, const msg::Ack& ack, std::string_view boot_id, std::uint64_t now_ms) {
  if (is_final(v.state)) return;
  if (never_acked(v)) v.state = CommandState::acked;
  if (!v.acked_at_ms) v.acked_at_ms = now_ms;
  if (v.acked_boot_id != boot_id) v.acked_boot_id = std::string(boot_id);
  v.duplicate = v.duplicate || ack.duplicate;
}

std::uint64_t output(CommandView& v, const msg::OutputChunk& chunk, std::uint64_t now_ms) {
  const std::uint64_t gap = account_output(v, chunk);
  if (v.state == CommandState::acked || v.state == CommandState::sent) {
    v.state = CommandState::running;
    v.running_at_ms = now_ms;
  }
  return gap;
}

CommandState state_for(const CommandView& v, const msg::Result& r) noexcept {
  switch (r.status) {
    case msg::Status::ok:
    case msg::Status::scheduled:
      return CommandState::succeeded;
    case msg::Status::failed:
      return r.interrupted ? CommandState::interrupted : CommandState::failed;
    case msg::Status::cancelled:
      // The answer to the broker's question "did you ever have it?" (a delivery
      // deadline passed with the command written, never acknowledged).
      return !v.cancel_requested_at_ms && never_acked(v) && std::string_view(r.detail).starts_with(kNeverReceived)
                 ? CommandState::undeliverable
                 : CommandState::cancelled;
    case msg::Status::timeout:
      return CommandState::timed_out;
    case msg::Status::duplicate:
      return CommandState::failed;
  }
  return CommandState::failed;
}

ResultEffect result(CommandTable& table, CommandView& v, msg::Result r, std::uint64_t now_ms) {
  ResultEffect effect;
  if (r.output.size() > kMaxResultOutput) {
    r.dropped_bytes += r.output.size() - kMaxResultOutput;
    r.output.resize(kMaxResultOutput);
    r.truncated = true;
  }
  effect.lost_bytes = reconcile_result(v, r);
  if (is_final(v.state)) {
    // Too late to change the outcome (e.g. timed_out first): kept with it all the same.
    effect.late = true;
    effect.finished = true;
    if (!v.result) v.result = std::move(r);
    return effect;
  }
  if (!v.acked_at_ms) v.acked_at_ms = now_ms;
  if (r.status == msg::Status::scheduled && v.kind == "reboot") {
    v.state = CommandState::running;
    v.running_at_ms = now_ms;
    v.detail = "reboot scheduled: waiting for the rig to come back with a new boot_id";
    v.result = std::move(r);
    return effect;
  }
  const CommandState state = state_for(v, r);
  std::string detail = r.detail;
  if (r.status == msg::Status::duplicate && detail.empty())
    detail = "it ran before on the rig, whose result is no longer kept there";
  if (state == CommandState::undeliverable) detail = "the rig never received it (" + detail + ")";
  to_final(table, v, state, std::move(detail), now_ms);
  v.result = std::move(r);
  effect.finished = true;
  return effect;
}

void rejected(CommandTable& table, CommandView& v, const msg::Nack& nack, std::uint64_t now_ms) {
  if (is_final(v.state)) return;
  to_final(table, v, CommandState::rejected, std::string(fleetlink::to_string(nack.reason)) + ": " + nack.detail,
           now_ms);
  v.nack = nack;
}

void end(CommandTable& table, CommandView& v, CommandState final_state, std::string detail, std::uint64_t now_ms) {
  if (is_final(v.state)) return;
  to_final(table, v, final_state, std::move(detail), now_ms);
}

}  // namespace fleetlink::broker::lifecycle
