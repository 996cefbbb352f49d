#include "unsent_output.hpp"

#include <variant>

namespace fleetlink::agent {

void add_dropped(msg::Result& r, std::uint64_t n) noexcept {
  if (n == 0) return;
  r.dropped_bytes += n;
  r.truncated = true;
}

std::vector<msg::Result> UnsentOutput::absorb(std::vector<Message> unsent) {
  std::vector<msg::Result> results;
  for (auto& m : unsent) {
    if (auto* chunk = std::get_if<msg::OutputChunk>(&m)) {
      if (!chunk->data.empty()) bytes_[chunk->cmd_id] += chunk->data.size();
    } else if (auto* r = std::get_if<msg::Result>(&m)) {
      add_dropped(*r, take(r->cmd_id));
      results.push_back(std::move(*r));
    }
  }
  return results;
}

std::uint64_t UnsentOutput::take(std::string_view cmd_id) {
  auto it = bytes_.find(cmd_id);
  if (it == bytes_.end()) return 0;
  const std::uint64_t n = it->second;
  bytes_.erase(it);
  return n;
}

std::vector<std::string> UnsentOutput::pending_ids() const {
  std::vector<std::string> ids;
  ids.reserve(bytes_.size());
  for (const auto& [id, n] : bytes_) ids.push_back(id);
  return ids;
}

}  // namespace fleetlink::agent
