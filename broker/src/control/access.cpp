#include "control/access.hpp"

#include "control/http_util.hpp"

namespace fleetlink::broker {

const char* to_string(Role r) noexcept {
  switch (r) {
    case Role::viewer: return "viewer";
    case Role::operator_: return "operator";
  }
  return "viewer";
}

std::optional<Role> role_from_string(std::string_view s) noexcept {
  if (s == "viewer") return Role::viewer;
  if (s == "operator") return Role::operator_;
  return std::nullopt;
}

AccessOutcome authenticate(std::string_view authorization, const Authenticator* operators,
                           std::string_view legacy_token) {
  AccessOutcome out;
  if (!access_enabled(operators, legacy_token)) return out;
  const std::optional<std::string_view> given = bearer_token_of(authorization);
  if (!given) {
    out.status = AccessOutcome::Status::missing_token;
    return out;
  }
  if (operators != nullptr) {
    if (std::optional<Caller> c = operators->find(*given)) {
      out.caller = std::move(*c);
      out.caller.authenticated = true;
      return out;
    }
    out.status = AccessOutcome::Status::bad_token;
    return out;
  }
  if (check_bearer_token(authorization, legacy_token) != BearerToken::matches) {
    out.status = AccessOutcome::Status::bad_token;
    return out;
  }
  out.caller = Caller{"token", Role::operator_, true};
  return out;
}

bool needs_operator(std::string_view method) noexcept { return method != "GET" && method != "HEAD"; }

std::string forbidden_detail(const Caller& caller) {
  return "operator " + caller.name + " has role " + to_string(caller.role) + "; this needs operator";
}

}  // namespace fleetlink::broker
