// libFuzzer target for the mesh note decoder (redis/mesh_codec.hpp): what
// arrives on a broker's Redis channels is whatever anyone with access to that
// Redis published. Besides "no crash, no exception, no sanitizer report", it
// checks the codec's promises: a note decode_note() accepts has a sender and
// what its kind carries, and encode_note() turns it into text that decodes to
// a note that encodes to the same text again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "redis/mesh_codec.hpp"

namespace mesh = fleetlink::broker;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto decoded = mesh::redis::decode_note(text);  // an exception escaping here is a crash
  if (!decoded) {
    if (decoded.error().detail.empty()) std::abort();
    return 0;
  }
  if (size > mesh::redis::kMaxMeshNoteBytes) std::abort();
  const mesh::MeshNote& n = *decoded;
  if (n.from.empty()) std::abort();
  if (n.kind == mesh::MeshKind::command && !n.command) std::abort();
  if (n.kind == mesh::MeshKind::command_answer && !n.outcome) std::abort();
  if (n.kind == mesh::MeshKind::event && !n.event) std::abort();
  if (n.kind == mesh::MeshKind::rig_seen && !n.rig) std::abort();
  const std::string once = mesh::redis::encode_note(n);
  const auto again = mesh::redis::decode_note(once);
  if (!again) std::abort();
  if (mesh::redis::encode_note(*again) != once) std::abort();
  return 0;
}
