#pragma once
// Each command's two deadlines, when the request does not give them
// (docs/OPERATIONS.md, "Command deadlines"): deliver_within_s (not acknowledged
// by then: undeliverable, it never ran) and timeout_s (acknowledged, no RESULT
// this long after: CANCEL, timed_out). A reboot's timeout is the time the rig
// has to come back with a new boot_id; a suite's, its longest run. Pure.
#include <cstdint>
#include <string_view>

namespace fleetlink::broker {

struct CommandDeadlines {
  std::uint32_t deliver_within_s = 300;
  std::uint32_t timeout_s = 3600;
};

inline constexpr std::uint32_t kMaxDeadlineS = 7 * 24 * 3600;  // a week, for either

constexpr CommandDeadlines default_deadlines(std::string_view kind) noexcept {
  if (kind == "dmesg") return {300, 60};
  if (kind == "reboot") return {300, 600};
  if (kind == "suite") return {600, 86400};
  return {300, 3600};
}

}  // namespace fleetlink::broker
