#pragma once
// Repeated log lines, limited. A flood of one warning (a frozen rig's every
// refused command, an agent's every failed reconnect) would bury everything else
// in the log and cost as much as the work itself; so a line logged under a key
// (what it is about: "enqueue refused rig=rig-0414") is written at most
// `lines` times in each `interval_ms` of that key, the rest of the interval is
// only counted, and once the interval has ended one line says how many:
//
//   enqueue refused rig=rig-0414: suppressed 118 similar lines in the last 60 s
//
// The count is written when the key is logged again, when any other limited line
// comes after the interval ended, or at flush (the broker's sweep, a daemon's
// stop). Pure: the clock is an argument, so the tests drive it.
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.hpp"

namespace fleetlink::log {

struct RepeatPolicy {
  std::uint32_t lines = 10;           // written per key per interval; 0: no limit at all
  std::uint64_t interval_ms = 60000;  // at least 1
};

// The lines of one key suppressed in one interval.
struct SuppressedLines {
  std::string key;
  Level level = Level::warn;   // of the last suppressed line
  std::uint64_t count = 0;
  std::uint64_t over_ms = 0;   // how long the interval they fell in lasted (until now, at a final flush)
};

// "<key>: suppressed <count> similar line(s) in the last <seconds> s"
std::string suppressed_text(const SuppressedLines& s);

class RepeatLimiter {
 public:
  // More keys than this at once share one budget (kOverflowKey): a flood of
  // distinct keys (a line per peer address) is limited too, and memory stays bounded.
  static constexpr std::size_t kDefaultMaxKeys = 1024;
  static constexpr std::string_view kOverflowKey = "(other repeated lines)";

  explicit RepeatLimiter(RepeatPolicy policy = {}, std::size_t max_keys = kDefaultMaxKeys);

  void set_policy(RepeatPolicy policy);
  const RepeatPolicy& policy() const noexcept { return policy_; }

  // One line under `key` at now_ms: true when it is to be written. The counts of
  // intervals that have ended (this key's and any other's) are appended to `due`,
  // to be written before the line.
  bool admit(std::string_view key, Level level, std::uint64_t now_ms, std::vector<SuppressedLines>& due);

  // Appends the counts of every interval ended by now_ms (with `all`, of every
  // interval with suppressed lines, ended or not: at exit) and forgets those intervals.
  void collect(std::uint64_t now_ms, bool all, std::vector<SuppressedLines>& due);

  std::size_t keys() const noexcept { return windows_.size(); }

 private:
  struct Window {
    std::uint64_t start_ms = 0;
    std::uint32_t written = 0;
    std::uint64_t suppressed = 0;
    Level level = Level::warn;
  };
  // collect() without the shortcut: also forgets ended intervals without suppressed lines.
  void expire(std::uint64_t now_ms, bool all, std::vector<SuppressedLines>& due);
  bool ended(const Window& w, std::uint64_t now_ms) const noexcept {
    return now_ms - w.start_ms >= policy_.interval_ms;
  }

  RepeatPolicy policy_;
  std::size_t max_keys_;
  std::map<std::string, Window, std::less<>> windows_;
  // The earliest end of an interval with suppressed lines: collect() only then.
  std::uint64_t next_due_ms_ = std::numeric_limits<std::uint64_t>::max();
};

}  // namespace fleetlink::log
