#pragma once
// The brokers' mesh (fleet/broker_mesh.hpp) on Redis pub/sub. Each broker
// listens, on a connection of its own, to its channel `<prefix>broker:<id>`
// and to the fleet channel `<prefix>fleet`; notes are PUBLISHed on the
// broker's command connection, and PUBLISH's answer (how many listened) tells
// whether a broker is there at all. Pub/sub delivers at most once and not
// across a reconnect: every ask of the fleet core has a deadline, and the
// record of truth is the registry and the store.
#include <cstdint>
#include <functional>
#include <string>

#include "fleet/broker_mesh.hpp"
#include "redis/redis_connection.hpp"

namespace fleetlink::broker::redis {

struct MeshOptions {
  std::string key_prefix = "fleetlink:";
  std::string broker_id;
};

class RedisMesh final : public BrokerMesh {
 public:
  // `publisher` sends (shared with the registry); `listener` becomes this mesh's
  // listening connection (listen() is called on it here: start it after).
  RedisMesh(RedisConnection& publisher, RedisConnection& listener, MeshOptions options);

  // Where a note that arrived goes (the fleet core's on_mesh).
  void on_note(std::function<void(const MeshNote&)> deliver) { deliver_ = std::move(deliver); }

  bool up() const override { return publisher_.up() && listener_.up(); }
  void send(std::string_view broker_id, const MeshNote& note, Reached reached) override;
  void broadcast(const MeshNote& note, Reached reached) override;

  std::string channel_of(std::string_view broker_id) const;
  const std::string& fleet_channel() const noexcept { return fleet_channel_; }
  std::uint64_t notes_in() const noexcept { return in_; }
  std::uint64_t notes_out() const noexcept { return out_; }
  std::uint64_t notes_refused() const noexcept { return refused_; }

 private:
  void publish(const std::string& channel, const MeshNote& note, Reached reached);
  void arrived(std::string_view channel, std::string_view payload);

  RedisConnection& publisher_;
  RedisConnection& listener_;
  MeshOptions options_;
  std::string fleet_channel_;
  std::function<void(const MeshNote&)> deliver_;
  std::uint64_t in_ = 0;
  std::uint64_t out_ = 0;
  std::uint64_t refused_ = 0;
};

}  // namespace fleetlink::broker::redis
