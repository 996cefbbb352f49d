#pragma once
// Command admission: the pure decision the agent makes for each COMMAND frame,
// before anything runs. Kept apart from sockets and executors so every rule is
// unit-tested:
//   seq at or below the last one    -> ignore (already handled on this connection)
//   seq past the next one (a gap)   -> NACK seq_gap with expected_seq, then reconnect;
//                                      everything after it on this connection is ignored
//   empty cmd_id or kind            -> NACK malformed
//   a frame decode() refused        -> NACK malformed (decide_malformed)
//   cmd_id already accepted         -> ACK duplicate=true, never run (the agent then answers
//                                      from its record: the stored RESULT, or what became of it)
//   kind without an executor        -> NACK unsupported_kind
//   kind not in the allow list      -> NACK not_allowed
//   otherwise                       -> ACK and run
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "fleetlink/codec.hpp"
#include "fleetlink/dedup_window.hpp"
#include "fleetlink/messages.hpp"
#include "fleetlink/seq_tracker.hpp"

namespace fleetlink::agent {

using KindSet = std::set<std::string, std::less<>>;

enum class Admission : std::uint8_t {
  run,        // ack, record cmd_id, run
  duplicate,  // ack duplicate=true, do not run
  nack,       // send nack, do not run
  ignore,     // send nothing
};
const char* to_string(Admission a) noexcept;

struct AdmissionDecision {
  Admission action = Admission::ignore;
  msg::Ack ack;              // run, duplicate
  msg::Nack nack;            // nack
  bool reconnect = false;    // seq_gap: close with CloseCode::seq_gap after the NACK
  std::string why;           // for the log line
};

class CommandAdmission {
 public:
  // known: kinds with an executor; allowed: kinds the operator lets run here.
  CommandAdmission(KindSet known, KindSet allowed);

  AdmissionDecision decide(const msg::Command& c, const DedupWindow& seen, std::uint64_t now_ms);
  // A COMMAND frame that could not be decoded (peek: what could be read of it):
  // NACK malformed, in sequence like any refusal; the seq rules above still
  // apply (a repeated seq is ignored, a gap is a gap). Without a readable seq:
  // NACK with seq 0, the sequence untouched.
  AdmissionDecision decide_malformed(const CommandPeek& peek, std::string_view why);
  // A new connection starts again at seq 1.
  void new_connection() noexcept { seq_.reset(); }
  const SeqTracker& seq() const noexcept { return seq_; }
  const KindSet& known() const noexcept { return known_; }
  const KindSet& allowed() const noexcept { return allowed_; }

 private:
  KindSet known_;
  KindSet allowed_;
  SeqTracker seq_;
};

}  // namespace fleetlink::agent
