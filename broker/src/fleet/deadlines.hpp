#pragma once
// When something must happen to a command if nothing else did first: its
// delivery deadline, its execution deadline, the end of the grace a restarted
// rig has to report it, of the wait for a cancel's answer. A min-heap of
// (time, what, cmd_id); an entry is only a reminder: whoever pops it checks the
// command still needs it (a finished command's deadlines are simply skipped).
// Pure.
#include <cstdint>
#include <queue>
#include <vector>

#include "fleet/command_table.hpp"

namespace fleetlink::broker {

enum class DeadlineKind : std::uint8_t {
  deliver,    // not acknowledged by then: undeliverable
  execute,    // acknowledged, no RESULT by then: CANCEL, timed_out
  reconcile,  // the rig came back with a new boot_id: no RESULT by then, interrupted
  cancel,     // a CANCEL went to the rig: no answer by then, cancelled
};

struct Deadline {
  std::uint64_t at_ms = 0;
  DeadlineKind kind = DeadlineKind::deliver;
  CmdKey cmd;
  bool operator>(const Deadline& o) const noexcept { return at_ms > o.at_ms; }
};

class Deadlines {
 public:
  void add(std::uint64_t at_ms, DeadlineKind kind, std::string_view cmd_id) {
    if (const std::optional<CmdKey> key = CmdKey::of(cmd_id)) heap_.push(Deadline{at_ms, kind, *key});
  }
  // The next reminder due at now_ms, taken; nullopt when none is due.
  std::optional<Deadline> pop_due(std::uint64_t now_ms) {
    if (heap_.empty() || heap_.top().at_ms > now_ms) return std::nullopt;
    Deadline d = heap_.top();
    heap_.pop();
    return d;
  }
  std::size_t size() const noexcept { return heap_.size(); }

 private:
  std::priority_queue<Deadline, std::vector<Deadline>, std::greater<>> heap_;
};

}  // namespace fleetlink::broker
