#pragma once
// The in-process registry: one broker, no Redis. Same rules as the Redis script:
// a HELLO wins with a newer boot_id; a refresh succeeds only for the exact owner;
// entries expire after the TTL unless refreshed.
#include <array>
#include <string>
#include <vector>
#include <unordered_map>

#include "fleet/string_hash.hpp"
#include "store/registry_backend.hpp"

namespace fleetlink::broker {

class EmbeddedRegistry final : public RegistryBackend {
 public:
  explicit EmbeddedRegistry(std::uint64_t ttl_ms = 60000) : ttl_ms_(ttl_ms) {}
  std::string_view name() const noexcept override { return "embedded"; }
  bool up() const override { return true; }
  bool shared() const noexcept override { return false; }
  void claim(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id, bool force,
             std::uint64_t now_ms, ClaimDone done) override;
  void refresh(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id, std::uint64_t now_ms,
               RefreshDone done) override;
  void release(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id) override;
  void lookup(std::string_view rig_id, std::uint64_t now_ms, LookupDone done) override;
  // No other broker: every job is this one's.
  void claim_job(std::string_view, std::string_view, bool, std::uint64_t, ClaimDone done) override {
    done(ClaimResult{ClaimOutcome::won, std::nullopt});
  }
  void refresh_job(std::string_view, std::string_view, std::uint64_t, RefreshDone done) override {
    done(RefreshResult{RefreshOutcome::extended, std::nullopt});
  }

  // The same, answered as values (the embedded registry never waits).
  ClaimResult claim_now(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id, bool force,
                        std::uint64_t now_ms);
  RefreshResult refresh_now(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id,
                            std::uint64_t now_ms);
  std::optional<RegistryEntry> lookup_now(std::string_view rig_id, std::uint64_t now_ms) const;
  std::size_t size() const noexcept { return entries_.size(); }

 private:
  // Compact on purpose (one per connected rig): the boot id inline, the broker
  // id as an index into brokers_ (a handful of distinct values).
  struct Slot {
    std::uint64_t expires_ms = 0;
    std::uint32_t broker = 0;
    std::uint8_t boot_len = 0;
    std::array<char, 40> boot{};
    std::string_view boot_id() const { return {boot.data(), boot_len}; }
  };
  std::uint32_t broker_index(std::string_view broker_id);
  std::uint64_t ttl_ms_;
  // TransparentStringHash (noexcept, not std::hash): no hash cached in the
  // nodes, 96 bytes a rig instead of 104 (malloc's 96-byte size class, not
  // 112), and lookups by string_view build no std::string.
  std::unordered_map<std::string, Slot, TransparentStringHash, std::equal_to<>> entries_;
  std::vector<std::string> brokers_;
};

}  // namespace fleetlink::broker
