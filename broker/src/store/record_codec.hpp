#pragma once
// The SQLite store's on-disk encodings: the code of each command state, and the
// blobs that hold what no query looks at (store/sqlite_store.hpp has the schema).
//
// A blob starts with its layout's version byte, then fields in a fixed order:
// unsigned integers as LEB128 varints, signed ones zigzagged, strings and byte
// strings as a varint length and the bytes, maps and lists as a varint count and
// their items. A reader refuses, with an Error rather than a guess, a version it
// does not know (a newer broker wrote it), a blob that ends early, a length that
// runs past the end, and bytes left over: a blob it cannot read exactly is never
// half-read into a record. Changing a layout means a new version byte, and the
// decoders keep reading the old ones.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fleet/fleet.hpp"
#include "fleetlink/expected.hpp"
#include "store/command_store.hpp"

namespace fleetlink::broker::store_codec {

inline constexpr std::uint8_t kCommandBodyVersion = 2;  // 2: operator_name at the end
inline constexpr std::uint8_t kResultBodyVersion = 1;
inline constexpr std::uint8_t kRigBodyVersion = 1;

// The `state` column. Fixed codes, independent of CommandState's numbering, so
// reordering the enum never changes what a stored number means. Open states
// are 0..3 in lifecycle order and every final one is >= kFirstFinalCode: the
// rank guard of the upsert is `stored < 4 AND incoming >= stored`.
inline constexpr std::int64_t kFirstFinalCode = 4;
std::int64_t state_code(CommandState s) noexcept;
std::optional<CommandState> state_from_code(std::int64_t code) noexcept;
constexpr bool is_final_code(std::int64_t code) noexcept { return code >= kFirstFinalCode; }

// commands.body: everything of a command that is neither a column nor its result
// (kind, args, seq, deadlines, acked boot, cancel request, detail, duplicate,
// stream counters). Appends to `out` after clearing it (its capacity is reused).
void encode_command_body(const CommandView& v, std::string& out);
Expected<void> decode_command_body(std::string_view blob, CommandView& v);

// results.body: the RESULT, the NACK and the tail of streamed output.
void encode_result_body(const CommandView& v, std::string& out);
Expected<void> decode_result_body(std::string_view blob, CommandView& v);

// rigs.body: boot_id, agent version, labels, kinds, broker (the times are columns).
void encode_rig_body(const RigRecord& r, std::string& out);
Expected<void> decode_rig_body(std::string_view blob, RigRecord& r);

}  // namespace fleetlink::broker::store_codec
