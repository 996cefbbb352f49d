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

const char* to_string(RefreshOutcome r) noexcept {
  switch (r) {
    case RefreshOutcome::extended: return "extended";
    case RefreshOutcome::restored: return "restored";
    case RefreshOutcome::superseded: return "superseded";
  }
  return "unknown";
}

std::uint32_t EmbeddedRegistry::broker_index(std::string_view broker_id) {
  for (std::uint32_t i = 0; i < brokers_.size(); ++i)
    if (brokers_[i] == broker_id) return i;
  brokers_.emplace_back(broker_id);
  return static_cast<std::uint32_t>(brokers_.size() - 1);
}

ClaimResult EmbeddedRegistry::claim_now(std::string_view rig_id, std::string_view boot_id,
                                       std::string_view broker_id, bool force, std::uint64_t now_ms) {
  if (boot_id.size() > Slot{}.boot.size()) return {};  // boot ids are UUIDs (36): lost
  std::uint32_t broker = broker_index(broker_id);
  auto [it, inserted] = entries_.try_emplace(std::string(rig_id));
  Slot& slot = it->second;
  ClaimResult result{ClaimOutcome::won, std::nullopt};
  if (!inserted) {
    RegistryEntry before{std::string(slot.boot_id()), brokers_[slot.broker]};
    if (now_ms >= slot.expires_ms) {
      result = {ClaimOutcome::superseded, std::move(before)};  // expired: whoever held it is gone
    } else if (slot.boot_id() == boot_id && slot.broker == broker) {
      result.outcome = ClaimOutcome::won;
    } else if (force || slot.boot_id() < boot_id) {
      result = {ClaimOutcome::superseded, std::move(before)};
    } else {
      return {ClaimOutcome::lost, std::move(before)};
    }
  }
  slot.boot_len = static_cast<std::uint8_t>(boot_id.copy(slot.boot.data(), slot.boot.size()));
  slot.broker = broker;
  slot.expires_ms = now_ms + ttl_ms_;
  return result;
}

RefreshResult EmbeddedRegistry::refresh_now(std::string_view rig_id, std::string_view boot_id,
                                            std::string_view broker_id, std::uint64_t now_ms) {
  auto it = entries_.find(rig_id);
  if (it == entries_.end() || now_ms >= it->second.expires_ms) {
    // Gone (or expired): the connection is alive, and a newer boot would have left its own entry.
    const ClaimResult c = claim_now(rig_id, boot_id, broker_id, true, now_ms);
    if (c.outcome == ClaimOutcome::lost) return {RefreshOutcome::superseded, c.before};
    return {RefreshOutcome::restored, std::nullopt};
  }
  if (it->second.boot_id() != boot_id || brokers_[it->second.broker] != broker_id)
    return {RefreshOutcome::superseded, RegistryEntry{std::string(it->second.boot_id()), brokers_[it->second.broker]}};
  it->second.expires_ms = now_ms + ttl_ms_;
  return {RefreshOutcome::extended, std::nullopt};
}

void EmbeddedRegistry::release(std::string_view rig_id, std::string_view boot_id,
                               std::string_view broker_id) {
  auto it = entries_.find(rig_id);
  if (it != entries_.end() && it->second.boot_id() == boot_id && brokers_[it->second.broker] == broker_id)
    entries_.erase(it);
}

std::optional<RegistryEntry> EmbeddedRegistry::lookup_now(std::string_view rig_id, std::uint64_t now_ms) const {
  auto it = entries_.find(rig_id);
  if (it == entries_.end() || now_ms >= it->second.expires_ms) return std::nullopt;
  return RegistryEntry{std::string(it->second.boot_id()), brokers_[it->second.broker]};
}

void EmbeddedRegistry::claim(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id,
                             bool force, std::uint64_t now_ms, ClaimDone done) {
  done(claim_now(rig_id, boot_id, broker_id, force, now_ms));
}

void EmbeddedRegistry::refresh(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id,
                               std::uint64_t now_ms, RefreshDone done) {
  done(refresh_now(rig_id, boot_id, broker_id, now_ms));
}

void EmbeddedRegistry::lookup(std::string_view rig_id, std::uint64_t now_ms, LookupDone done) {
  done(lookup_now(rig_id, now_ms));
}

}  // namespace fleetlink::broker
