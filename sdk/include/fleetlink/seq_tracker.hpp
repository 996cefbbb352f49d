#pragma once
// Receiver-side sequence check for one connection: seq starts at 1 and rises by one.
#include <cstdint>

#include "fleetlink/export.hpp"

namespace fleetlink {

class FLEETLINK_API SeqTracker {
 public:
  enum class Verdict : std::uint8_t {
    in_order,   // exactly the next seq: accept
    duplicate,  // at or below the last accepted seq: already seen, do not run again
    gap,        // jumped past the next seq: refuse it and everything after
  };
  Verdict observe(std::uint64_t seq) noexcept;
  std::uint64_t last() const noexcept { return last_; }
  std::uint64_t expected() const noexcept { return last_ + 1; }
  bool broken() const noexcept { return broken_; }   // a gap was seen; stays so until reset
  void reset() noexcept { last_ = 0; broken_ = false; }

 private:
  std::uint64_t last_ = 0;
  bool broken_ = false;
};

}  // namespace fleetlink
