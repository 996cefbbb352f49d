// Sequence check on the receiving side of one connection. After a gap nothing new
// is accepted until reset(): running a command past a missing one would reorder them.
#include "fleetlink/seq_tracker.hpp"

namespace fleetlink {

SeqTracker::Verdict SeqTracker::observe(std::uint64_t seq) noexcept {
  if (seq <= last_) return Verdict::duplicate;  // also seq 0, which is never valid
  if (broken_) return Verdict::gap;
  if (seq == last_ + 1) {
    last_ = seq;
    return Verdict::in_order;
  }
  broken_ = true;
  return Verdict::gap;
}

}  // namespace fleetlink
