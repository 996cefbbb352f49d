#include "fleet/outbox.hpp"

#include <algorithm>

namespace fleetlink::broker {

std::string outbox_full_detail(std::size_t depth, std::size_t capacity, std::uint64_t oldest_age_ms) {
  return "outbox full (" + std::to_string(depth) + "/" + std::to_string(capacity) +
         "), oldest queued cmd age " + std::to_string(oldest_age_ms / 1000) + "s";
}

std::optional<Outbox::Full> Outbox::enqueue(std::string cmd_id, std::uint64_t now_ms,
                                            std::uint32_t capacity, std::uint64_t* seq_out) {
  if (entries_.size() >= capacity) {
    std::uint64_t oldest = entries_.empty() ? now_ms : entries_.front().enqueued_ms;
    return Full{outbox_full_detail(entries_.size(), capacity, now_ms > oldest ? now_ms - oldest : 0)};
  }
  if (entries_.capacity() == entries_.size())
    entries_.reserve(std::min<std::size_t>(capacity, std::max<std::size_t>(4, entries_.size() * 2)));
  std::uint64_t seq = next_seq_++;
  entries_.push_back(OutboxEntry{seq, now_ms, 0, std::move(cmd_id), nullptr});
  if (seq_out) *seq_out = seq;
  return std::nullopt;
}

void Outbox::set_view(std::uint64_t seq, CommandView* view) noexcept {
  if (!entries_.empty() && entries_.back().seq == seq) entries_.back().view = view;
}

const OutboxEntry* Outbox::next_unsent() const noexcept {
  return unsent_ < entries_.size() ? &entries_[unsent_] : nullptr;
}

void Outbox::mark_sent(std::uint64_t seq, std::uint64_t now_ms) noexcept {
  if (unsent_ < entries_.size() && entries_[unsent_].seq == seq) {
    entries_[unsent_].sent_ms = now_ms ? now_ms : 1;
    ++unsent_;
  }
}

std::optional<OutboxEntry> Outbox::settle(std::uint64_t seq, const std::string& cmd_id) {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), seq,
                             [](const OutboxEntry& e, std::uint64_t s) { return e.seq < s; });
  if (it == entries_.end() || it->seq != seq) return std::nullopt;
  if (!cmd_id.empty() && it->cmd_id != cmd_id) return std::nullopt;
  auto index = static_cast<std::size_t>(it - entries_.begin());
  OutboxEntry out = std::move(*it);
  entries_.erase(it);
  if (index < unsent_) --unsent_;
  if (entries_.empty()) entries_.shrink_to_fit();  // an idle rig holds no buffer
  return out;
}

bool Outbox::settle_cmd(const std::string& cmd_id) {
  for (const auto& e : entries_)
    if (e.cmd_id == cmd_id) return settle(e.seq, cmd_id).has_value();
  return false;
}

void Outbox::record_ack(std::uint64_t seq, std::uint64_t now_ms) noexcept {
  last_ack_seq_ = std::max(last_ack_seq_, seq);
  last_ack_at_ms_ = now_ms;
}

std::vector<OutboxEntry> Outbox::take_all() {
  std::vector<OutboxEntry> out;
  out.swap(entries_);
  unsent_ = 0;
  return out;
}

}  // namespace fleetlink::broker
