#pragma once
// The one server-side script every write of a rig's registry key goes through
// (docs/OPERATIONS.md, "Several brokers"): `rig:<id>` = `<boot_id>|<broker_id>`
// with a TTL. The rules are the embedded registry's (store/embedded_registry.hpp),
// made atomic across brokers:
//   hello    wins on a free key or for the same (boot_id, broker); supersedes an
//            owner with an older boot_id (or any owner when forced: the calling
//            broker already knows the old connection is dead); otherwise loses,
//            and the key is untouched.
//   refresh  extends the TTL of the exact owner only; any other owner answers
//            superseded (the stale broker drops its socket, 4410). A key that
//            has gone (expired, or a Redis restarted without persistence) is
//            written again: the connection is alive, and a newer boot would
//            have left its own key.
//   release  deletes the key only if the caller still owns it.
// boot_ids are UUIDv7 text: byte order is time order, so "newer" is a string
// comparison, in Lua as in C++.
//
// Pure: the script's text and the parsing of its replies, tested without Redis.
#include <optional>
#include <string>
#include <string_view>

#include "fleetlink/expected.hpp"
#include "store/registry_backend.hpp"

namespace fleetlink::broker::redis {

// KEYS[1] the rig's key; ARGV: op, boot_id, broker_id, ttl_ms, force ("1"/"0").
// Answers "<outcome>|<the value the key held before, if it matters>".
extern const char* const kRegistryScript;

// The script's answers, as the registry interface gives them.
using ClaimReply = ClaimResult;
using RefreshReply = RefreshResult;

// "<boot_id>|<broker_id>" (nullopt if there is no '|').
std::optional<RegistryEntry> parse_entry(std::string_view value);
std::string entry_value(std::string_view boot_id, std::string_view broker_id);

// The script's answers; a reply it cannot give is an Error (malformed).
Expected<ClaimReply> parse_claim_reply(std::string_view reply);
Expected<RefreshReply> parse_refresh_reply(std::string_view reply);
Expected<bool> parse_release_reply(std::string_view reply);  // true: deleted

}  // namespace fleetlink::broker::redis
