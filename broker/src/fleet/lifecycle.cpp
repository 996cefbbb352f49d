#include "fleet/lifecycle.hpp"

#include "fleet/output_accounting.hpp"

namespace fleetlink::broker::lifecycle {

void sent(CommandView& v, std::uint64_t now_ms) {
  if (v.state == CommandState::queued) v.state = CommandState::sent;
  v.sent_at_ms = now_ms;
}

void acked(CommandView& v, const msg::Ack& ack, std::uint64_t now_ms) {
  if (v.state == CommandState::queued || v.state == CommandState::sent) v.state = CommandState::acked;
  v.acked_at_ms = now_ms;
  v.duplicate = ack.duplicate;
}

std::uint64_t output(CommandView& v, const msg::OutputChunk& chunk) {
  const std::uint64_t gap = account_output(v, chunk);
  if (v.state == CommandState::acked || v.state == CommandState::sent) v.state = CommandState::running;
  return gap;
}

std::uint64_t done(CommandTable& table, CommandView& v, msg::Result result, std::uint64_t now_ms) {
  if (result.output.size() > kMaxResultOutput) {
    result.dropped_bytes += result.output.size() - kMaxResultOutput;
    result.output.resize(kMaxResultOutput);
    result.truncated = true;
  }
  const std::uint64_t lost_bytes = reconcile_result(v, result);
  table.finish(v, CommandState::done);
  v.finished_at_ms = now_ms;
  if (!v.acked_at_ms) v.acked_at_ms = now_ms;
  v.result = std::move(result);
  return lost_bytes;
}

void nacked(CommandTable& table, CommandView& v, const msg::Nack& nack, std::uint64_t now_ms) {
  table.finish(v, CommandState::nacked);
  v.nack = nack;
  v.finished_at_ms = now_ms;
}

void lost(CommandTable& table, CommandView& v, std::uint64_t now_ms) {
  table.finish(v, CommandState::lost);
  v.finished_at_ms = now_ms;
}

}  // namespace fleetlink::broker::lifecycle
