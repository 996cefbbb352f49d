#pragma once
// What a rig's token granted (--rig-token), as the fleet core sees it: the
// transport verifies the token (net/jwt_verifier.hpp, OpenSSL) when the
// connection opens and hands the core only this. Pure: tested in
// tests/unit/broker/fleet/test_rig_grant.cpp.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fleetlink::broker {

enum class RigTokenMode : std::uint8_t {
  off,       // tokens are not read; every kind a rig lists may be sent to it
  optional,  // a rig without a token gets every kind; one with a token only what it grants
  required,  // a rig without a valid token is closed 4401
};
const char* to_string(RigTokenMode m) noexcept;
std::optional<RigTokenMode> rig_token_mode_from_string(std::string_view s) noexcept;

struct RigGrant {
  std::string problem;             // non-empty: the token was refused, and why
  std::string subject;             // sub: the rig the token was issued for
  std::vector<std::string> kinds;  // the kinds it allows, sorted
  std::uint64_t expires_at_ms = 0;
};

// Why a HELLO for rig_id is refused (4401), given the connection's token (null:
// it presented none); nullopt: admitted. An invalid token is refused even when
// tokens are optional: a rig that has one is meant to be limited by it.
std::optional<std::string> token_problem(RigTokenMode mode, const RigGrant* grant, std::string_view rig_id);

// Whether a command of `kind` may be sent on a connection with this grant (null: no token, no limit).
bool kind_granted(const RigGrant* grant, std::string_view kind) noexcept;

}  // namespace fleetlink::broker
