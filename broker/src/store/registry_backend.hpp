#pragma once
// Where the fleet-wide truth "which broker owns rig X, for which boot" lives.
// Embedded (one broker, in-process) by default; Redis (several brokers) later,
// behind the same interface: one key per rig, `rig:<id>` = `<boot_id>|<broker_id>`,
// with a TTL refreshed while the connection lives.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fleetlink::broker {

enum class ClaimOutcome : std::uint8_t {
  won,         // no owner before (or the same boot and broker): this broker owns the rig now
  superseded,  // an older boot_id (or an expired entry) was replaced; its broker must drop it
  lost,        // a newer or equal boot_id holds the rig elsewhere: refuse this connection
};
const char* to_string(ClaimOutcome c) noexcept;

struct RegistryEntry {
  std::string boot_id;
  std::string broker_id;
};

class RegistryBackend {
 public:
  virtual ~RegistryBackend() = default;
  // Reachable and usable (for /readyz).
  virtual bool up() const = 0;
  // HELLO: take ownership for (boot_id, broker_id) if the rule allows it.
  // `force` is for a supersede the local broker already decided (its old socket is dead).
  virtual ClaimOutcome claim(std::string_view rig_id, std::string_view boot_id,
                             std::string_view broker_id, bool force, std::uint64_t now_ms) = 0;
  // Extend the TTL; false if (boot_id, broker_id) is no longer the owner.
  virtual bool refresh(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id,
                       std::uint64_t now_ms) = 0;
  // The connection ended: drop the entry if it is still ours.
  virtual void release(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id) = 0;
  virtual std::optional<RegistryEntry> lookup(std::string_view rig_id, std::uint64_t now_ms) const = 0;
};

}  // namespace fleetlink::broker
