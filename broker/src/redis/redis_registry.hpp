#pragma once
// The fleet-wide rig registry on Redis: every write of `rig:<id>` goes
// through the one script of redis/registry_script.hpp, loaded once (SCRIPT
// LOAD) and called by its SHA (EVALSHA); a NOSCRIPT answer (Redis restarted,
// or SCRIPT FLUSH) loads it again and repeats the call once. Lookups are a
// plain GET. Every answer comes through a callback on the loop: nothing
// blocks it. While Redis is away every call answers an Error at once.
//
// The key's TTL (default 60 s) is refreshed by the broker every refresh
// interval (default 10 s) for each rig it holds (docs/OPERATIONS.md).
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "fleetlink/expected.hpp"
#include "store/registry_backend.hpp"
#include "redis/redis_connection.hpp"
#include "redis/registry_script.hpp"

namespace fleetlink::broker::redis {

struct RegistryOptions {
  std::string key_prefix = "rig:";
  std::string job_key_prefix = "jobhold:";  // `jobhold:<job_id>` = `job|<broker_id>`
  std::chrono::milliseconds ttl{60'000};
};

class RedisRegistry final : public RegistryBackend {
 public:
  RedisRegistry(RedisConnection& connection, RegistryOptions options = {});

  std::string_view name() const noexcept override { return "redis"; }
  bool up() const override { return connection_.up(); }
  bool shared() const noexcept override { return true; }
  std::string key_of(std::string_view rig_id) const;
  // How often the script was loaded (the first time, and after each NOSCRIPT).
  std::uint64_t script_loads() const noexcept { return loads_; }

  // now_ms is unused: Redis keeps the time (the key's TTL).
  void claim(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id, bool force,
             std::uint64_t now_ms, ClaimDone done) override;
  void refresh(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id, std::uint64_t now_ms,
               RefreshDone done) override;
  void release(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id) override;
  void lookup(std::string_view rig_id, std::uint64_t now_ms, LookupDone done) override;
  // The rig script on `jobhold:<job_id>`, with a boot that never changes ("job"):
  // a claim wins only a free key or its own, a refresh keeps only its own.
  void claim_job(std::string_view job_id, std::string_view broker_id, bool force, std::uint64_t now_ms,
                 ClaimDone done) override;
  void refresh_job(std::string_view job_id, std::string_view broker_id, std::uint64_t now_ms,
                   RefreshDone done) override;
  std::string job_key_of(std::string_view job_id) const;
  // release() with its answer (true: the key was ours and is gone).
  void release_then(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id,
                    std::function<void(Expected<bool>)> done);

 private:
  using TextCallback = std::function<void(Expected<std::string>)>;
  // Runs the script on `key` with these arguments; answers its text.
  void run(std::string key, std::string_view op, std::string_view boot_id, std::string_view broker_id,
           bool force, TextCallback done);
  void evalsha(std::vector<std::string> argv, bool may_reload, TextCallback done);
  void load_then(std::vector<std::string> argv, TextCallback done);

  RedisConnection& connection_;
  RegistryOptions options_;
  std::string sha_;  // empty until loaded
  std::uint64_t loads_ = 0;
};

}  // namespace fleetlink::broker::redis
