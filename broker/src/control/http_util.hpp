#pragma once
// Small pure helpers for the control API's HTTP layer.
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fleetlink::broker {

// "/v1/rigs/rig-1/commands" -> {"v1","rigs","rig-1","commands"}; empty
// segments (double or trailing slashes) are dropped; each segment is
// percent-decoded.
std::vector<std::string> split_path(std::string_view path);

// Percent-decoding ("%2F" -> "/", "+" kept as is). Invalid escapes are kept verbatim.
std::string percent_decode(std::string_view s);

// "a=1&b=x%20y" -> {{"a","1"},{"b","x y"}} ("+" means a space in a query).
std::map<std::string, std::string> parse_query(std::string_view query);

// What an Authorization header holds against the configured token: "Bearer <token>"
// (scheme case-insensitive, compared in constant time with respect to the token's
// content); missing: no header, another scheme, or "Bearer" with nothing after it;
// wrong: a bearer token that is not this one.
enum class BearerToken { matches, missing, wrong };
// The token of a "Bearer <token>" header (scheme case-insensitive, spaces around
// it dropped); nullopt when there is none (no header, another scheme, "Bearer" alone).
std::optional<std::string_view> bearer_token_of(std::string_view authorization) noexcept;
BearerToken check_bearer_token(std::string_view authorization, std::string_view token) noexcept;
inline bool bearer_token_matches(std::string_view authorization, std::string_view token) noexcept {
  return check_bearer_token(authorization, token) == BearerToken::matches;
}

// The standard reason phrase ("Not Found"), "Unknown" otherwise.
const char* http_reason_phrase(int status) noexcept;

}  // namespace fleetlink::broker
