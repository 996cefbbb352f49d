#include "admission.hpp"

#include <algorithm>

namespace fleetlink::agent {

const char* to_string(Admission a) noexcept {
  switch (a) {
    case Admission::run: return "run";
    case Admission::duplicate: return "duplicate";
    case Admission::nack: return "nack";
    case Admission::ignore: return "ignore";
  }
  return "unknown";
}

CommandAdmission::CommandAdmission(KindSet known, KindSet allowed)
    : known_(std::move(known)), allowed_(std::move(allowed)) {}

AdmissionDecision CommandAdmission::decide_malformed(const CommandPeek& peek, std::string_view why) {
  AdmissionDecision d;
  d.action = Admission::nack;
  d.nack.seq = peek.seq.value_or(0);
  d.nack.cmd_id = peek.cmd_id;
  d.nack.reason = msg::NackReason::malformed;
  d.nack.detail = "undecodable command: " + std::string(why.substr(0, 512));
  d.why = d.nack.detail;
  if (!peek.seq) return d;
  const bool was_broken = seq_.broken();
  switch (seq_.observe(*peek.seq)) {
    case SeqTracker::Verdict::duplicate:
      d.action = Admission::ignore;
      d.why = "seq " + std::to_string(*peek.seq) + " already seen (last " + std::to_string(seq_.last()) + ")";
      return d;
    case SeqTracker::Verdict::gap:
      if (was_broken) {
        d.action = Admission::ignore;
        d.why = "seq " + std::to_string(*peek.seq) + " after a gap: not run, reconnecting";
        return d;
      }
      d.nack.reason = msg::NackReason::seq_gap;
      d.nack.expected_seq = seq_.expected();
      d.nack.detail = "expected seq " + std::to_string(seq_.expected()) + ", got " + std::to_string(*peek.seq);
      d.why = d.nack.detail;
      d.reconnect = true;
      return d;
    case SeqTracker::Verdict::in_order:
      return d;
  }
  return d;
}

AdmissionDecision CommandAdmission::decide(const msg::Command& c, const DedupWindow& seen,
                                           std::uint64_t now_ms) {
  AdmissionDecision d;
  auto nack = [&](msg::NackReason reason, std::string detail) {
    d.action = Admission::nack;
    d.nack.seq = c.seq;
    d.nack.cmd_id = c.cmd_id;
    d.nack.reason = reason;
    d.nack.detail = std::move(detail);
    d.why = d.nack.detail;
  };

  const bool was_broken = seq_.broken();
  switch (seq_.observe(c.seq)) {
    case SeqTracker::Verdict::duplicate:
      d.action = Admission::ignore;
      d.why = "seq " + std::to_string(c.seq) + " already seen (last " +
              std::to_string(seq_.last()) + ")";
      return d;
    case SeqTracker::Verdict::gap:
      if (was_broken) {
        d.action = Admission::ignore;
        d.why = "seq " + std::to_string(c.seq) + " after a gap: not run, reconnecting";
        return d;
      }
      nack(msg::NackReason::seq_gap, "expected seq " + std::to_string(seq_.expected()) +
                                         ", got " + std::to_string(c.seq));
      d.nack.expected_seq = seq_.expected();
      d.reconnect = true;
      return d;
    case SeqTracker::Verdict::in_order:
      break;
  }

  if (c.cmd_id.empty() || c.kind.empty()) {
    nack(msg::NackReason::malformed, c.cmd_id.empty() ? "empty cmd_id" : "empty kind");
    return d;
  }
  if (c.cmd_id.size() > 128 ||
      std::any_of(c.cmd_id.begin(), c.cmd_id.end(),
                  [](char ch) { return static_cast<unsigned char>(ch) <= 0x20 || ch == 0x7f; })) {
    nack(msg::NackReason::malformed, "cmd_id has blanks or control characters, or is over 128 bytes");
    return d;
  }
  if (seen.contains(c.cmd_id, now_ms)) {
    d.action = Admission::duplicate;
    d.ack = msg::Ack{c.seq, c.cmd_id, true};
    d.why = "cmd_id " + c.cmd_id + " already ran";
    return d;
  }
  if (!known_.contains(c.kind)) {
    nack(msg::NackReason::unsupported_kind, "no executor for kind '" + c.kind + "'");
    return d;
  }
  if (!allowed_.contains(c.kind)) {
    std::string list;
    for (const auto& k : allowed_) list += (list.empty() ? "" : ", ") + k;
    nack(msg::NackReason::not_allowed,
         "kind '" + c.kind + "' is not in this rig's allow-kinds (" + (list.empty() ? "none" : list) + ")");
    return d;
  }
  d.action = Admission::run;
  d.ack = msg::Ack{c.seq, c.cmd_id, false};
  d.why = "accepted";
  return d;
}

}  // namespace fleetlink::agent
