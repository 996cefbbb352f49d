#pragma once
// Every field limit of the protocol (docs/PROTOCOL.md sections 3 and 4), in one
// header: the codec enforces them (decode, validate), the broker refuses a HELLO
// that breaks one (4400), and the agent's --check-config checks the HELLO it would
// send with the same rules (hello_field_problem), so the three cannot drift apart.
#include <cstddef>
#include <optional>
#include <string>

#include "fleetlink/expected.hpp"
#include "fleetlink/export.hpp"
#include "fleetlink/messages.hpp"

namespace fleetlink {

inline constexpr std::size_t kMaxIdBytes = 64;          // rig_id, kind, kinds[i], event name: [A-Za-z0-9._-]+
inline constexpr std::size_t kMaxBrokerIdBytes = 255;   // broker_id (a host name): [A-Za-z0-9._-]+
inline constexpr std::size_t kMaxVersionBytes = 64;     // agent_version
inline constexpr std::size_t kMaxKinds = 32;            // hello.kinds entries
inline constexpr std::size_t kMaxMapEntries = 64;       // labels, args, event fields
inline constexpr std::size_t kMaxMapKeyBytes = 64;      // map keys (non-empty)
inline constexpr std::size_t kMaxMapValueBytes = 4096;  // args and event field values
// A label is a short tag the broker keeps for every rig (registry, inventory, API
// views) for as long as it knows the rig: bounded tighter than a command's args.
inline constexpr std::size_t kMaxLabelValueBytes = 256;
inline constexpr std::size_t kMaxDetailBytes = 4096;    // nack/result detail
inline constexpr std::size_t kMaxReasonBytes = 256;     // goaway reason

// What is wrong with a HELLO, for a person: `field` is the HELLO's field
// ("rig_id", "labels", "kinds", ...), `code` too_large (over a limit) or bad_field
// (a character, an encoding, the shape of boot_id), `text` the whole sentence.
struct HelloFieldProblem {
  std::string field;
  Errc code = Errc::bad_field;
  std::string text;
};

// Every rule a HELLO must follow: rig_id 1-64 of [A-Za-z0-9._-]; agent_version
// 1-64 bytes UTF-8; boot_id a UUIDv7 (brokers order boots by its text); at most
// 64 labels, key 1-64 bytes, value at most 256 bytes, UTF-8; at most 32 kinds,
// each like rig_id. The first problem found, or nullopt.
FLEETLINK_API std::optional<HelloFieldProblem> hello_field_problem(const msg::Hello& hello);

}  // namespace fleetlink
