#include "app/redis_fabric.hpp"

#include "common/log.hpp"

namespace fleetlink::broker {
namespace {

redis::ConnectionOptions connection_options(const BrokerConfig& cfg) {
  redis::ConnectionOptions o;
  o.host = cfg.redis.host;
  o.port = cfg.redis.port;
  return o;
}

redis::RegistryOptions registry_options(const BrokerConfig& cfg) {
  redis::RegistryOptions o;
  o.key_prefix = cfg.redis_prefix + "rig:";
  o.job_key_prefix = cfg.redis_prefix + "jobhold:";
  o.ttl = std::chrono::milliseconds(cfg.registry_ttl_ms);
  return o;
}

}  // namespace

RedisFabric::RedisFabric(uv_loop_t* loop, const BrokerConfig& cfg)
    : commands_(loop, connection_options(cfg)), listener_(loop, connection_options(cfg)),
      registry_(commands_, registry_options(cfg)),
      mesh_(commands_, listener_, redis::MeshOptions{cfg.redis_prefix, cfg.broker_id}) {}

std::unique_ptr<CommandStore> RedisFabric::make_store(uv_loop_t* loop, const BrokerConfig& cfg) {
  redis::RedisStoreOptions o;
  o.key_prefix = cfg.redis_prefix + "fl:";
  o.host = cfg.redis.host;
  o.port = cfg.redis.port;
  auto store = std::make_unique<redis::RedisStore>(loop, commands_, o);
  store_ = store.get();
  return store;
}

void RedisFabric::start(FleetCore& core, std::function<void()> after_note) {
  core.set_mesh(&mesh_);
  mesh_.on_note([&core, after_note](const MeshNote& note) {
    core.on_mesh(note);
    if (after_note) after_note();
  });
  commands_.set_after_reply(after_note);
  // Every (re)connect: the entries of the rigs held here are written again.
  // The first connect finds none, or those admitted while Redis was not there yet.
  commands_.set_on_up([this, &core] {
    core.registry_recovered();
    if (store_ != nullptr) store_->connection_up();  // its failed batches go again
  });
  commands_.start();
  listener_.start();
  FL_INFO("registry: redis %s (keys %s*, channels %s, %s)", commands_.endpoint().c_str(),
          registry_.key_of("").c_str(), mesh_.channel_of(core.broker_id()).c_str(), mesh_.fleet_channel().c_str());
}

}  // namespace fleetlink::broker
