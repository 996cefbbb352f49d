#include "fleet/command_table.hpp"

#include <algorithm>

namespace fleetlink::broker {

namespace {
const std::vector<CommandView*> kNone;
}

void CommandTable::index(CommandView& v) {
  if (!v.idempotency_key.empty()) by_key_[v.idempotency_key] = &v;
  if (is_final(v.state)) return;
  auto it = open_.find(std::string_view(v.rig_id));
  if (it == open_.end()) it = open_.emplace(v.rig_id, OpenList{}).first;
  OpenList& open = it->second;
  if (open.commands.empty()) {
    open.busy_at = busy_.size();
    busy_.push_back(&*it);
  }
  open.commands.push_back(&v);
  ++open_count_;
}

void CommandTable::unindex_open(const CommandView& v) {
  const auto it = open_.find(std::string_view(v.rig_id));
  if (it == open_.end()) return;
  OpenList& open = it->second;
  std::vector<CommandView*>& list = open.commands;
  const auto pos = std::find(list.begin(), list.end(), &v);
  if (pos == list.end()) return;
  list.erase(pos);
  --open_count_;
  if (list.empty() && open.busy_at != kNotBusy) {
    OpenEntry* last = busy_.back();
    busy_[open.busy_at] = last;
    last->second.busy_at = open.busy_at;
    busy_.pop_back();
    open.busy_at = kNotBusy;
  }
  // An emptied list stays (a rig that had commands will have more): a fan-out to
  // every rig does not allocate and free one per rig each time.
}

CommandView* CommandTable::insert(CommandView view) {
  const std::optional<CmdKey> key = CmdKey::of(view.cmd_id);
  if (!key) return nullptr;
  if (auto old = by_id_.find(*key); old != by_id_.end()) {
    unindex_open(old->second);
    if (!old->second.idempotency_key.empty()) by_key_.erase(old->second.idempotency_key);
  }
  const bool final = is_final(view.state);
  auto [it, inserted] = by_id_.insert_or_assign(*key, std::move(view));
  (void)inserted;
  CommandView* placed = &it->second;
  index(*placed);
  if (final) {
    finished_.push_back(*key);
    evict();
    return find(key->view());
  }
  evict();  // erases finished commands only: `placed` stays valid
  return placed;
}

void CommandTable::finish(CommandView& v, CommandState final_state) {
  const bool was_final = is_final(v.state);
  v.state = final_state;
  if (was_final) return;
  unindex_open(v);
  // No eviction here: the caller still holds v. The next insert() evicts.
  if (const std::optional<CmdKey> key = CmdKey::of(v.cmd_id)) finished_.push_back(*key);
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

CommandView* CommandTable::find_by_key(std::string_view idempotency_key) {
  const auto it = by_key_.find(idempotency_key);
  return it == by_key_.end() ? nullptr : it->second;
}

const std::vector<CommandView*>& CommandTable::open_of(std::string_view rig_id) const {
  const auto it = open_.find(rig_id);
  return it == open_.end() ? kNone : it->second.commands;
}

void CommandTable::erase(std::string_view cmd_id) {
  const std::optional<CmdKey> key = CmdKey::of(cmd_id);
  if (!key) return;
  const auto it = by_id_.find(*key);
  if (it == by_id_.end()) return;
  unindex_open(it->second);
  if (!it->second.idempotency_key.empty()) by_key_.erase(it->second.idempotency_key);
  by_id_.erase(it);
}

void CommandTable::evict() {
  // finished_ may name commands already erased or re-inserted in flight: skipped.
  while (by_id_.size() > capacity_ && !finished_.empty()) {
    const auto it = by_id_.find(finished_.front());
    // One whose end the store has not got yet stays until the interval commit.
    if (it != by_id_.end() && it->second.unsaved) break;
    if (it != by_id_.end() && is_final(it->second.state)) {
      if (!it->second.idempotency_key.empty()) {
        const auto k = by_key_.find(it->second.idempotency_key);
        if (k != by_key_.end() && k->second == &it->second) by_key_.erase(k);
      }
      by_id_.erase(it);
    }
    finished_.pop_front();
  }
  // Open commands are never evicted: their number is bounded by the rigs'
  // outboxes and held queues, and a fleet-wide fan-out legitimately holds one per rig.
  compact_finished();
}

void CommandTable::compact_finished() {
  // finished_ keeps ids of commands evicted another way (erase, re-insert) until
  // they reach the front; rebuild it when it outgrows the table (amortised O(1)).
  if (finished_.size() <= 2 * capacity_ + 64) return;
  std::deque<CmdKey> kept;
  for (const CmdKey& id : finished_) {
    const auto it = by_id_.find(id);
    if (it != by_id_.end() && is_final(it->second.state)) kept.push_back(id);
  }
  finished_.swap(kept);
}

}  // namespace fleetlink::broker
