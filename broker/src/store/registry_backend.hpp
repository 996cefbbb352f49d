#pragma once
// Where the fleet-wide truth "which broker owns rig X, for which boot" lives.
// Embedded (one broker, in-process, store/embedded_registry.hpp) by default;
// Redis (several brokers, redis/redis_registry.hpp) behind the same interface:
// one key per rig, `rig:<id>` = `<boot_id>|<broker_id>`, with a TTL refreshed
// while the connection lives.
//
// Every call answers through a callback: the embedded registry at once, before
// the call returns; Redis later, on the loop, when its reply comes. Callers
// never assume either (a session may be gone by the time the answer comes).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "fleetlink/expected.hpp"

namespace fleetlink::broker {

enum class ClaimOutcome : std::uint8_t {
  won,         // no owner before (or the same boot and broker): this broker owns the rig now
  superseded,  // an older boot_id (or an expired entry) was replaced; its broker must drop it
  lost,        // a newer or equal boot_id holds the rig elsewhere: refuse this connection
};
const char* to_string(ClaimOutcome c) noexcept;

enum class RefreshOutcome : std::uint8_t {
  extended,    // still the owner: TTL extended
  restored,    // the key had gone (expired, or a Redis restarted empty): written again for this owner
  superseded,  // another (boot_id, broker) owns the rig: drop this connection (4410)
};
const char* to_string(RefreshOutcome r) noexcept;

struct RegistryEntry {
  std::string boot_id;
  std::string broker_id;
  bool operator==(const RegistryEntry&) const = default;
};

struct ClaimResult {
  ClaimOutcome outcome = ClaimOutcome::lost;
  std::optional<RegistryEntry> before;  // the owner it replaced (superseded), or the one that kept the rig (lost)
};

struct RefreshResult {
  RefreshOutcome outcome = RefreshOutcome::superseded;
  std::optional<RegistryEntry> owner;  // superseded: who owns it now
};

class RegistryBackend {
 public:
  using ClaimDone = std::function<void(Expected<ClaimResult>)>;
  using RefreshDone = std::function<void(Expected<RefreshResult>)>;
  using LookupDone = std::function<void(Expected<std::optional<RegistryEntry>>)>;

  virtual ~RegistryBackend() = default;
  // "embedded", "redis": for logs, /readyz and /metrics.
  virtual std::string_view name() const noexcept = 0;
  // Reachable and usable (for /readyz).
  virtual bool up() const = 0;
  // Other brokers share it (the rig may be owned elsewhere).
  virtual bool shared() const noexcept = 0;
  // HELLO: take ownership for (boot_id, broker_id) if the rule allows it.
  // `force` is for a supersede the calling broker already decided (the old
  // connection is dead: its own, or one on a broker that is gone).
  virtual void claim(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id, bool force,
                     std::uint64_t now_ms, ClaimDone done) = 0;
  // Extends the TTL of the exact owner; superseded if (boot_id, broker_id) no longer owns it.
  virtual void refresh(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id,
                       std::uint64_t now_ms, RefreshDone done) = 0;
  // The connection ended: drop the entry if it is still ours (nobody waits for the answer).
  virtual void release(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id) = 0;
  virtual void lookup(std::string_view rig_id, std::uint64_t now_ms, LookupDone done) = 0;

  // A running fan-out job is driven by one broker, its holder, under the same
  // rules as a rig with a fixed boot: claim_job wins a free key (or one this
  // broker holds already; `force` for a holder known to be gone) and otherwise
  // loses, naming the holder; refresh_job extends the holder's TTL, writes a
  // key that has gone, and answers superseded when another broker holds it.
  // One broker alone always holds its jobs.
  virtual void claim_job(std::string_view job_id, std::string_view broker_id, bool force, std::uint64_t now_ms,
                         ClaimDone done) = 0;
  virtual void refresh_job(std::string_view job_id, std::string_view broker_id, std::uint64_t now_ms,
                           RefreshDone done) = 0;
};

}  // namespace fleetlink::broker
