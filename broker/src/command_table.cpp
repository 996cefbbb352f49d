#include "command_table.hpp"

namespace fleetlink::broker {

CommandView& CommandTable::insert(CommandView view) {
  std::string id = view.cmd_id;
  auto [it, inserted] = by_id_.insert_or_assign(id, std::move(view));
  if (inserted) order_.push_back(std::move(id));
  evict();
  return it->second;
}

CommandView* CommandTable::find(std::string_view cmd_id) {
  auto it = by_id_.find(std::string(cmd_id));
  return it == by_id_.end() ? nullptr : &it->second;
}

const CommandView* CommandTable::find(std::string_view cmd_id) const {
  auto it = by_id_.find(std::string(cmd_id));
  return it == by_id_.end() ? nullptr : &it->second;
}

void CommandTable::erase(std::string_view cmd_id) { by_id_.erase(std::string(cmd_id)); }

void CommandTable::evict() {
  // The order queue may hold ids already erased; they are skipped here.
  std::size_t scanned = 0;
  while (by_id_.size() > capacity_ && scanned < order_.size()) {
    auto it = by_id_.find(order_[scanned]);
    if (it == by_id_.end()) {
      order_.erase(order_.begin() + static_cast<std::ptrdiff_t>(scanned));
      continue;
    }
    if (finished(it->second.state)) {
      by_id_.erase(it);
      order_.erase(order_.begin() + static_cast<std::ptrdiff_t>(scanned));
      continue;
    }
    ++scanned;
  }
  // Commands in flight are never evicted, but a table twice its size means
  // something else is wrong: drop the oldest whatever its state.
  while (by_id_.size() > 2 * capacity_ && !order_.empty()) {
    by_id_.erase(order_.front());
    order_.pop_front();
  }
  while (order_.size() > 2 * capacity_ + 16 && !by_id_.count(order_.front())) order_.pop_front();
}

}  // namespace fleetlink::broker
