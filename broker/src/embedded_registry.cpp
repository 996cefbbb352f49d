#include "embedded_registry.hpp"

namespace fleetlink::broker {

const char* to_string(ClaimOutcome c) noexcept {
  switch (c) {
    case ClaimOutcome::won: return "won";
    case ClaimOutcome::superseded: return "superseded";
    case ClaimOutcome::lost: return "lost";
  }
  return "unknown";
}

ClaimOutcome EmbeddedRegistry::claim(std::string_view rig_id, std::string_view boot_id,
                                     std::string_view broker_id, bool force, std::uint64_t now_ms) {
  auto [it, inserted] = entries_.try_emplace(std::string(rig_id));
  Slot& slot = it->second;
  ClaimOutcome outcome = ClaimOutcome::won;
  if (!inserted && now_ms < slot.expires_ms) {
    bool same_owner = slot.entry.boot_id == boot_id && slot.entry.broker_id == broker_id;
    if (same_owner) {
      outcome = ClaimOutcome::won;
    } else if (force || slot.entry.boot_id < boot_id) {
      outcome = ClaimOutcome::superseded;
    } else {
      return ClaimOutcome::lost;
    }
  } else if (!inserted) {
    outcome = ClaimOutcome::superseded;  // expired: whoever held it is gone
  }
  slot.entry.boot_id.assign(boot_id);
  slot.entry.broker_id.assign(broker_id);
  slot.expires_ms = now_ms + ttl_ms_;
  return outcome;
}

bool EmbeddedRegistry::refresh(std::string_view rig_id, std::string_view boot_id,
                               std::string_view broker_id, std::uint64_t now_ms) {
  auto it = entries_.find(std::string(rig_id));
  if (it == entries_.end() || it->second.entry.boot_id != boot_id ||
      it->second.entry.broker_id != broker_id)
    return false;
  it->second.expires_ms = now_ms + ttl_ms_;
  return true;
}

void EmbeddedRegistry::release(std::string_view rig_id, std::string_view boot_id,
                               std::string_view broker_id) {
  auto it = entries_.find(std::string(rig_id));
  if (it != entries_.end() && it->second.entry.boot_id == boot_id &&
      it->second.entry.broker_id == broker_id)
    entries_.erase(it);
}

std::optional<RegistryEntry> EmbeddedRegistry::lookup(std::string_view rig_id, std::uint64_t now_ms) const {
  auto it = entries_.find(std::string(rig_id));
  if (it == entries_.end() || now_ms >= it->second.expires_ms) return std::nullopt;
  return it->second.entry;
}

}  // namespace fleetlink::broker
