#pragma once
// Several brokers, one fleet (--registry redis): the two Redis connections on
// the broker's loop (one sends: registry script calls and PUBLISH; one
// listens: the mesh's channels), the registry and the mesh on them, wired to
// the fleet core. docs/OPERATIONS.md, "Several brokers", names every key and
// channel.
#include <uv.h>

#include "app/config.hpp"
#include "fleet/fleet_core.hpp"
#include "redis/redis_connection.hpp"
#include "redis/redis_mesh.hpp"
#include "redis/redis_registry.hpp"
#include "redis/redis_store.hpp"

namespace fleetlink::broker {

class RedisFabric {
 public:
  RedisFabric(uv_loop_t* loop, const BrokerConfig& cfg);
  RedisFabric(const RedisFabric&) = delete;
  RedisFabric& operator=(const RedisFabric&) = delete;

  RegistryBackend& registry() noexcept { return registry_; }
  BrokerMesh& mesh() noexcept { return mesh_; }
  bool up() const noexcept { return commands_.up() && listener_.up(); }
  const std::string& endpoint() const noexcept { return commands_.endpoint(); }
  std::uint64_t reconnects() const noexcept { return commands_.connects() > 0 ? commands_.connects() - 1 : 0; }
  const redis::RedisMesh& mesh_stats() const noexcept { return mesh_; }
  // --store redis: the command store on this fabric's connection (once).
  std::unique_ptr<CommandStore> make_store(uv_loop_t* loop, const BrokerConfig& cfg);

  // Hands the mesh's notes to `core` and the registry's recoveries, and connects.
  // `after_note` runs after each note and each reply was handled (the application wakes lws:
  // what the note scheduled on lws timers, such as a control stream's answer).
  void start(FleetCore& core, std::function<void()> after_note);

 private:
  redis::RedisConnection commands_;
  redis::RedisConnection listener_;
  redis::RedisRegistry registry_;
  redis::RedisMesh mesh_;
  redis::RedisStore* store_ = nullptr;  // owned by the application
};

}  // namespace fleetlink::broker
