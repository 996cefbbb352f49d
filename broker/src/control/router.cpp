#include "control/router.hpp"

#include <algorithm>

#include "control/control_json.hpp"
#include "control/handler_support.hpp"
#include "control/http_util.hpp"

namespace fleetlink::broker {

const std::string& PathParams::get(std::string_view name) const noexcept {
  static const std::string kNone;
  for (const auto& [key, value] : values_) {
    if (key == name) return value;
  }
  return kNone;
}

Router::Router(std::span<const Route> routes) {
  routes_.reserve(routes.size());
  for (const Route& r : routes) {
    Compiled c{&r, {}};
    std::string_view rest = r.pattern;
    while (!rest.empty()) {
      const std::size_t slash = rest.find('/');
      const std::string_view seg = rest.substr(0, slash);
      if (seg.size() >= 2 && seg.front() == '{' && seg.back() == '}') {
        c.segments.push_back({seg.substr(1, seg.size() - 2), true});
      } else if (!seg.empty()) {
        c.segments.push_back({seg, false});
      }
      rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    }
    routes_.push_back(std::move(c));
  }
}

bool Router::path_matches(const Compiled& c, const std::vector<std::string>& path) noexcept {
  if (c.segments.size() != path.size()) return false;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (!c.segments[i].param && c.segments[i].text != path[i]) return false;
  }
  return true;
}

bool Router::method_matches(const Route& r, std::string_view method) noexcept {
  if (r.method == method) return true;
  return method == "HEAD" && r.method == "GET" && (r.flags & Route::kNoHead) == 0;
}

Router::Match Router::match(std::string_view method, std::string_view path) const {
  const std::vector<std::string> segments = split_path(path);
  Match m;
  const Compiled* chosen = nullptr;
  for (const Compiled& c : routes_) {
    if (!path_matches(c, segments)) continue;
    m.known_path = true;
    if ((c.route->flags & Route::kOpen) != 0) m.open = true;
    if (chosen == nullptr && method_matches(*c.route, method)) chosen = &c;
  }
  if (chosen != nullptr) {
    m.route = chosen->route;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      if (chosen->segments[i].param) m.params.add(chosen->segments[i].text, segments[i]);
    }
  } else if (m.known_path) {
    std::vector<std::string_view> methods;
    for (const Compiled& c : routes_) {
      if (!path_matches(c, segments) || std::find(methods.begin(), methods.end(), c.route->method) != methods.end()) {
        continue;
      }
      methods.push_back(c.route->method);
      if (!m.allow.empty()) m.allow += ", ";
      m.allow += c.route->method;
    }
  }
  return m;
}

namespace {

// 401, saying whether a token was missing or wrong (a client tells its user which),
// in the body's "reason" and, for a wrong one, as RFC 6750's error="invalid_token".
HttpResponse unauthorized(bool missing, bool operators) {
  auto body = error_body("unauthorized", missing     ? "no bearer token: send Authorization: Bearer <token>"
                                         : operators ? "the bearer token is not the token of any of this broker's operators"
                                                     : "the bearer token is not this broker's control token");
  body["reason"] = missing ? "missing_token" : "bad_token";
  HttpResponse r;
  r.status = 401;
  r.body = dump_json(body);
  r.headers.emplace_back("WWW-Authenticate", missing ? "Bearer realm=\"fleetlink\""
                                                     : "Bearer realm=\"fleetlink\", error=\"invalid_token\"");
  return r;
}

// The audit line's target: the rig, command or job the path names.
std::string audit_target(const PathParams& params) {
  for (const char* name : {"rig", "cmd", "job", "batch"}) {
    const std::string& v = params.get(name);
    if (!v.empty()) return std::string(name) + ":" + v;
  }
  return "-";
}

}  // namespace

HttpResponse Router::dispatch(const HttpRequest& req, Fleet& fleet, const BrokerMetrics& metrics,
                              const ControlApiOptions& options, std::uint64_t now_ms) const {
  const Match m = match(req.method, req.path);
  const bool open_by_option =
      options.metrics_open && m.route != nullptr && (m.route->flags & Route::kOpenByOption) != 0;
  // The token may come as ?access_token= on kTokenInQuery routes (EventSource
  // sends no headers); an Authorization header, when there is one, decides.
  std::string from_query;
  if (req.authorization.empty() && m.route != nullptr && (m.route->flags & Route::kTokenInQuery) != 0) {
    const auto query = parse_query(req.query);
    if (const auto t = query.find("access_token"); t != query.end()) from_query = "Bearer " + t->second;
  }
  const std::string_view authorization = from_query.empty() ? std::string_view(req.authorization)
                                                            : std::string_view(from_query);
  AccessOutcome access;
  if (!m.open && !open_by_option) access = authenticate(authorization, options.operators, options.token);
  std::shared_ptr<AuditContext> audit;
  if (needs_operator(req.method)) {
    audit = std::make_shared<AuditContext>();
    audit->caller = access.caller;
    audit->request = req.method + " " + req.path;
    audit->target = audit_target(m.params);
    audit->peer = req.peer;
  }
  HttpResponse r;
  if (access.status != AccessOutcome::Status::allowed) {
    r = unauthorized(access.status == AccessOutcome::Status::missing_token, options.operators != nullptr);
    r.audit = std::move(audit);
    return r;
  }
  if (m.route != nullptr && needs_operator(req.method) && access.caller.authenticated &&
      access.caller.role != Role::operator_) {
    r = json_error(403, "forbidden", forbidden_detail(access.caller));
  } else if (m.route != nullptr) {
    r = m.route->handler(RouteContext{req, m.params, fleet, metrics, options, now_ms, access.caller});
  } else if (m.known_path) {
    r = json_error(405, "method_not_allowed", "allowed: " + m.allow);
    r.headers.emplace_back("Allow", m.allow);
  } else {
    r = json_error(404, "not_found", "no such endpoint: " + req.path);
  }
  if (req.method == "HEAD") r.body.clear();
  r.audit = std::move(audit);
  return r;
}

}  // namespace fleetlink::broker
