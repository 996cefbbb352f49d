#include "redis/redis_mesh.hpp"

#include "common/log.hpp"
#include "redis/mesh_codec.hpp"

namespace fleetlink::broker::redis {

RedisMesh::RedisMesh(RedisConnection& publisher, RedisConnection& listener, MeshOptions options)
    : publisher_(publisher), listener_(listener), options_(std::move(options)),
      fleet_channel_(options_.key_prefix + "fleet") {
  listener_.listen({channel_of(options_.broker_id), fleet_channel_},
                   [this](std::string_view channel, std::string_view payload) { arrived(channel, payload); });
}

std::string RedisMesh::channel_of(std::string_view broker_id) const {
  std::string c = options_.key_prefix;
  c.append("broker:").append(broker_id);
  return c;
}

void RedisMesh::send(std::string_view broker_id, const MeshNote& note, Reached reached) {
  publish(channel_of(broker_id), note, std::move(reached));
}

void RedisMesh::broadcast(const MeshNote& note, Reached reached) { publish(fleet_channel_, note, std::move(reached)); }

void RedisMesh::publish(const std::string& channel, const MeshNote& note, Reached reached) {
  std::string text = encode_note(note);
  if (text.size() > kMaxMeshNoteBytes) {
    // Its receiver would refuse it: said now, so that the sender answers instead of timing out.
    if (reached)
      reached(make_error(Errc::too_large, "a " + std::string(to_string(note.kind)) + " note of " +
                                              std::to_string(text.size()) + " bytes (the mesh carries at most " +
                                              std::to_string(kMaxMeshNoteBytes) + ")"));
    return;
  }
  ++out_;
  publisher_.command({"PUBLISH", channel, std::move(text)}, [reached = std::move(reached)](Expected<Reply> r) {
    if (!reached) return;
    if (!r) return reached(r.error());
    if (r->type != Reply::Type::integer)
      return reached(make_error(Errc::malformed, "redis: PUBLISH answered " + r->str.substr(0, 64)));
    reached(static_cast<std::size_t>(r->integer < 0 ? 0 : r->integer));
  });
}

void RedisMesh::arrived(std::string_view channel, std::string_view payload) {
  Expected<MeshNote> note = decode_note(payload);
  if (!note) {
    ++refused_;
    FL_WARN("mesh: a note on %.*s refused: %s", static_cast<int>(channel.size()), channel.data(),
            note.error().detail.c_str());
    return;
  }
  ++in_;
  if (deliver_) deliver_(*note);
}

}  // namespace fleetlink::broker::redis
