#include "fleet/outbox.hpp"

#include <algorithm>

namespace fleetlink::broker {

std::string outbox_full_detail(std::size_t depth, std::size_t capacity, std::uint64_t oldest_age_ms) {
  return "outbox full (" + std::to_string(depth) + "/" + std::to_string(capacity) +
         "), oldest queued cmd age " + std::to_string(oldest_age_ms / 1000) + "s";
}

std::optional<Outbox::Full> Outbox::enqueue(std::string cmd_id, std::uint64_t now_ms,
                                            std::uint32_t capacity, std::uint64_t* seq_out) {
  const std::vector<OutboxEntry>& all = entries();
  if (all.size() >= capacity) {
    std::uint64_t oldest = all.empty() ? now_ms : all.front().enqueued_ms;
    return Full{outbox_full_detail(all.size(), capacity, now_ms > oldest ? now_ms - oldest : 0)};
  }
  if (!entries_) entries_ = std::make_unique<std::vector<OutboxEntry>>();
  std::vector<OutboxEntry>& v = *entries_;
  if (v.capacity() == v.size()) v.reserve(std::min<std::size_t>(capacity, std::max<std::size_t>(4, v.size() * 2)));
  std::uint64_t seq = next_seq_++;
  v.push_back(OutboxEntry{seq, now_ms, 0, std::move(cmd_id), nullptr});
  if (seq_out) *seq_out = seq;
  return std::nullopt;
}

void Outbox::set_view(std::uint64_t seq, CommandView* view) noexcept {
  if (entries_ && !entries_->empty() && entries_->back().seq == seq) entries_->back().view = view;
}

const OutboxEntry* Outbox::next_unsent() const noexcept {
  return unsent_ < size() ? &(*entries_)[unsent_] : nullptr;
}

void Outbox::mark_sent(std::uint64_t seq, std::uint64_t now_ms) noexcept {
  if (unsent_ < size() && (*entries_)[unsent_].seq == seq) {
    (*entries_)[unsent_].sent_ms = now_ms ? now_ms : 1;
    ++unsent_;
  }
}

std::optional<OutboxEntry> Outbox::settle(std::uint64_t seq, const std::string& cmd_id) {
  if (!entries_) return std::nullopt;
  std::vector<OutboxEntry>& v = *entries_;
  auto it = std::lower_bound(v.begin(), v.end(), seq,
                             [](const OutboxEntry& e, std::uint64_t s) { return e.seq < s; });
  if (it == v.end() || it->seq != seq) return std::nullopt;
  if (!cmd_id.empty() && it->cmd_id != cmd_id) return std::nullopt;
  auto index = static_cast<std::size_t>(it - v.begin());
  OutboxEntry out = std::move(*it);
  v.erase(it);
  if (index < unsent_) --unsent_;
  if (v.empty()) entries_.reset();  // an idle rig holds no buffer
  return out;
}

const std::vector<OutboxEntry>& Outbox::entries() const noexcept {
  static const std::vector<OutboxEntry> none;
  return entries_ ? *entries_ : none;
}

bool Outbox::settle_cmd(const std::string& cmd_id) {
  for (const auto& e : entries())
    if (e.cmd_id == cmd_id) return settle(e.seq, cmd_id).has_value();
  return false;
}

void Outbox::record_ack(std::uint64_t seq, std::uint64_t now_ms) noexcept {
  last_ack_seq_ = std::max(last_ack_seq_, seq);
  last_ack_at_ms_ = now_ms;
}

std::vector<OutboxEntry> Outbox::take_all() {
  std::vector<OutboxEntry> out;
  if (entries_) out.swap(*entries_);
  entries_.reset();
  unsent_ = 0;
  return out;
}

}  // namespace fleetlink::broker
