#include "common/log_repeat.hpp"

#include <algorithm>

namespace fleetlink::log {

std::string suppressed_text(const SuppressedLines& s) {
  // Whole seconds, rounded up, at least 1: "in the last 0 s" would read as nothing.
  const std::uint64_t secs = std::max<std::uint64_t>((s.over_ms + 999) / 1000, 1);
  std::string out = s.key;
  out += ": suppressed ";
  out += std::to_string(s.count);
  out += s.count == 1 ? " similar line in the last " : " similar lines in the last ";
  out += std::to_string(secs);
  out += " s";
  return out;
}

RepeatLimiter::RepeatLimiter(RepeatPolicy policy, std::size_t max_keys)
    : max_keys_(std::max<std::size_t>(max_keys, 2)) {
  set_policy(policy);
}

void RepeatLimiter::set_policy(RepeatPolicy policy) {
  policy.interval_ms = std::max<std::uint64_t>(policy.interval_ms, 1);
  policy_ = policy;
}

bool RepeatLimiter::admit(std::string_view key, Level level, std::uint64_t now_ms,
                          std::vector<SuppressedLines>& due) {
  if (policy_.lines == 0) return true;
  if (now_ms >= next_due_ms_) expire(now_ms, false, due);
  auto it = windows_.find(key);
  if (it == windows_.end()) {
    // The last place is kept for the shared key.
    if (windows_.size() + 1 >= max_keys_) expire(now_ms, false, due);  // ended windows make room
    if (windows_.size() + 1 >= max_keys_) {
      it = windows_.find(kOverflowKey);
      if (it == windows_.end()) it = windows_.emplace(std::string(kOverflowKey), Window{now_ms, 0, 0, level}).first;
    } else {
      it = windows_.emplace(std::string(key), Window{now_ms, 0, 0, level}).first;
    }
  }
  Window& w = it->second;
  if (ended(w, now_ms)) {
    if (w.suppressed > 0) due.push_back(SuppressedLines{it->first, w.level, w.suppressed, policy_.interval_ms});
    w = Window{now_ms, 0, 0, level};
  }
  if (w.written < policy_.lines) {
    ++w.written;
    return true;
  }
  ++w.suppressed;
  w.level = level;
  next_due_ms_ = std::min(next_due_ms_, w.start_ms + policy_.interval_ms);
  return false;
}

void RepeatLimiter::collect(std::uint64_t now_ms, bool all, std::vector<SuppressedLines>& due) {
  // Cheap when nothing is due: a periodic timer calls this often.
  if (all || now_ms >= next_due_ms_) expire(now_ms, all, due);
}

void RepeatLimiter::expire(std::uint64_t now_ms, bool all, std::vector<SuppressedLines>& due) {
  next_due_ms_ = std::numeric_limits<std::uint64_t>::max();
  for (auto it = windows_.begin(); it != windows_.end();) {
    Window& w = it->second;
    const bool over = ended(w, now_ms);
    if (w.suppressed > 0 && (over || all)) {
      due.push_back(SuppressedLines{it->first, w.level, w.suppressed,
                                    over ? policy_.interval_ms : now_ms - w.start_ms});
      w.suppressed = 0;
    }
    if (over) {
      it = windows_.erase(it);
      continue;
    }
    if (w.suppressed > 0) next_due_ms_ = std::min(next_due_ms_, w.start_ms + policy_.interval_ms);
    ++it;
  }
}

}  // namespace fleetlink::log
