#include "fleet/command_table.hpp"

#include <algorithm>

namespace fleetlink::broker {

CommandView* CommandTable::insert(CommandView view) {
  const std::optional<CmdKey> key = CmdKey::of(view.cmd_id);
  if (!key) return nullptr;
  const bool done = finished(view.state);
  auto [it, inserted] = by_id_.insert_or_assign(*key, std::move(view));
  (void)inserted;
  if (done) {
    finished_.push_back(*key);
    evict();
    return find(key->view());
  }
  CommandView* placed = &it->second;
  evict();  // erases finished commands only: `placed` stays valid
  return placed;
}

void CommandTable::finish(CommandView& v, CommandState final_state) {
  const bool was_finished = finished(v.state);
  v.state = final_state;
  // No eviction here: the caller still holds v. The next insert() evicts.
  if (!was_finished) {
    if (const std::optional<CmdKey> key = CmdKey::of(v.cmd_id)) finished_.push_back(*key);
  }
}

CommandView* CommandTable::find(std::string_view cmd_id) {
  const std::optional<CmdKey> key = CmdKey::of(cmd_id);
  if (!key) return nullptr;
  auto it = by_id_.find(*key);
  return it == by_id_.end() ? nullptr : &it->second;
}

const CommandView* CommandTable::find(std::string_view cmd_id) const {
  const std::optional<CmdKey> key = CmdKey::of(cmd_id);
  if (!key) return nullptr;
  auto it = by_id_.find(*key);
  return it == by_id_.end() ? nullptr : &it->second;
}

void CommandTable::erase(std::string_view cmd_id) {
  if (const std::optional<CmdKey> key = CmdKey::of(cmd_id)) by_id_.erase(*key);
}

void CommandTable::evict() {
  // finished_ may name commands already erased or re-inserted in flight: skipped.
  while (by_id_.size() > capacity_ && !finished_.empty()) {
    auto it = by_id_.find(finished_.front());
    if (it != by_id_.end() && finished(it->second.state)) by_id_.erase(it);
    finished_.pop_front();
  }
  // Commands in flight are never evicted: their number is bounded by the rigs'
  // outboxes, and a fleet-wide fan-out legitimately holds one per rig.
  compact_finished();
}

void CommandTable::compact_finished() {
  // finished_ keeps ids of commands evicted another way (erase, re-insert) until
  // they reach the front; rebuild it when it outgrows the table (amortised O(1)).
  if (finished_.size() <= 2 * capacity_ + 64) return;
  std::deque<CmdKey> kept;
  for (const CmdKey& id : finished_) {
    auto it = by_id_.find(id);
    if (it != by_id_.end() && finished(it->second.state)) kept.push_back(id);
  }
  finished_.swap(kept);
}

}  // namespace fleetlink::broker
