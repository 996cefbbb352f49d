#include "store/embedded_registry.hpp"

namespace fleetlink::broker {

const char* to_string(ClaimOutcome c) noexcept {
  switch (c) {
    case ClaimOutcome::won: return "won";
    case ClaimOutcome::superseded: return "superseded";
    case ClaimOutcome::lost: return "lost";
  }
  return "unknown";
}

std::uint32_t EmbeddedRegistry::broker_index(std::string_view broker_id) {
  for (std::uint32_t i = 0; i < brokers_.size(); ++i)
    if (brokers_[i] == broker_id) return i;
  brokers_.emplace_back(broker_id);
  return static_cast<std::uint32_t>(brokers_.size() - 1);
}

ClaimOutcome EmbeddedRegistry::claim(std::string_view rig_id, std::string_view boot_id,
                                     std::string_view broker_id, bool force, std::uint64_t now_ms) {
  if (boot_id.size() > Slot{}.boot.size()) return ClaimOutcome::lost;  // boot ids are UUIDs (36)
  std::uint32_t broker = broker_index(broker_id);
  auto [it, inserted] = entries_.try_emplace(std::string(rig_id));
  Slot& slot = it->second;
  ClaimOutcome outcome = ClaimOutcome::won;
  if (!inserted && now_ms < slot.expires_ms) {
    bool same_owner = slot.boot_id() == boot_id && slot.broker == broker;
    if (same_owner) {
      outcome = ClaimOutcome::won;
    } else if (force || slot.boot_id() < boot_id) {
      outcome = ClaimOutcome::superseded;
    } else {
      return ClaimOutcome::lost;
    }
  } else if (!inserted) {
    outcome = ClaimOutcome::superseded;  // expired: whoever held it is gone
  }
  slot.boot_len = static_cast<std::uint8_t>(boot_id.copy(slot.boot.data(), slot.boot.size()));
  slot.broker = broker;
  slot.expires_ms = now_ms + ttl_ms_;
  return outcome;
}

bool EmbeddedRegistry::refresh(std::string_view rig_id, std::string_view boot_id,
                               std::string_view broker_id, std::uint64_t now_ms) {
  auto it = entries_.find(std::string(rig_id));
  if (it == entries_.end() || it->second.boot_id() != boot_id || brokers_[it->second.broker] != broker_id)
    return false;
  it->second.expires_ms = now_ms + ttl_ms_;
  return true;
}

void EmbeddedRegistry::release(std::string_view rig_id, std::string_view boot_id,
                               std::string_view broker_id) {
  auto it = entries_.find(std::string(rig_id));
  if (it != entries_.end() && it->second.boot_id() == boot_id && brokers_[it->second.broker] == broker_id)
    entries_.erase(it);
}

std::optional<RegistryEntry> EmbeddedRegistry::lookup(std::string_view rig_id, std::uint64_t now_ms) const {
  auto it = entries_.find(std::string(rig_id));
  if (it == entries_.end() || now_ms >= it->second.expires_ms) return std::nullopt;
  return RegistryEntry{std::string(it->second.boot_id()), brokers_[it->second.broker]};
}

}  // namespace fleetlink::broker
