#pragma once
// The mesh's notes (fleet/broker_mesh.hpp) as they travel between brokers:
// one JSON object per Redis pub/sub message, {"v":1,"kind":...}. A note from a
// newer broker with fields this one does not know still reads (they are
// ignored); one that is not an object, has an unknown kind or a field of the
// wrong type is refused with an Error, never half-read.
//
// Pure: tested without Redis (tests/unit/broker/redis/test_mesh_codec.cpp).
#include <string>
#include <string_view>

#include "fleet/broker_mesh.hpp"
#include "fleetlink/expected.hpp"

namespace fleetlink::broker::redis {

inline constexpr int kMeshNoteVersion = 1;
// Larger messages are refused unread (a note is a few hundred bytes; a command's args at most 64 KiB).
inline constexpr std::size_t kMaxMeshNoteBytes = 256 * 1024;

std::string encode_note(const MeshNote& note);
Expected<MeshNote> decode_note(std::string_view text);

}  // namespace fleetlink::broker::redis
