#pragma once
// Who calls the control API, and what they may do (docs/OPERATIONS.md,
// "Operators and roles"). An operator is a name, a role and a bearer token; the
// broker knows tokens only by their SHA-256 (app/operators.hpp, which holds
// the OpenSSL part: this layer stays pure).
//
//   viewer    reads: every GET (and HEAD), the event stream, /metrics
//   operator  everything: commands, jobs, cancel, reconnect, drain, the control stream
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fleetlink::broker {

enum class Role : std::uint8_t { viewer, operator_ };
const char* to_string(Role r) noexcept;
std::optional<Role> role_from_string(std::string_view s) noexcept;

// The one who made a request. Unauthenticated (an open API): no name, and
// everything allowed.
struct Caller {
  std::string name;
  Role role = Role::operator_;
  bool authenticated = false;
};

// Finds the operator whose bearer token this is (in constant time with respect
// to the tokens' contents).
class Authenticator {
 public:
  virtual ~Authenticator() = default;
  virtual std::optional<Caller> find(std::string_view token) const = 0;
};

// An Authorization header against the configured operators (or, without them,
// the single `legacy_token`, which is operator "token" of role operator).
// `enabled` false: the API is open and every request is an unauthenticated caller.
struct AccessOutcome {
  enum class Status { allowed, missing_token, bad_token } status = Status::allowed;
  Caller caller;
};
AccessOutcome authenticate(std::string_view authorization, const Authenticator* operators,
                           std::string_view legacy_token);
inline bool access_enabled(const Authenticator* operators, std::string_view legacy_token) noexcept {
  return operators != nullptr || !legacy_token.empty();
}

// Does `method` (upper case) need the operator role? Everything but GET and HEAD.
bool needs_operator(std::string_view method) noexcept;

// The 403's detail: "operator bob has role viewer; this needs operator".
std::string forbidden_detail(const Caller& caller);

// The name in logs and the audit line: the caller's name, "-" when unauthenticated.
inline std::string_view caller_label(const Caller& c) noexcept {
  return c.authenticated ? std::string_view(c.name) : std::string_view("-");
}

}  // namespace fleetlink::broker
