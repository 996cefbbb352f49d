#pragma once
// The control API's router: a table of (method, path pattern, handler). A
// pattern is matched segment by segment against the percent-decoded path
// (empty segments dropped, so "/v1//rigs/" is "/v1/rigs"); a "{name}" segment
// matches any one segment and hands it to the handler as a path parameter.
// The table is the API at a glance (routes.cpp); the handlers, grouped by
// resource, are in routes_*.cpp.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "control/http_message.hpp"
#include "control/options.hpp"
#include "fleet/fleet.hpp"
#include "observe/metrics.hpp"

namespace fleetlink::broker {

// What a pattern's {name} segments matched, percent-decoded.
class PathParams {
 public:
  // The value of {name}; empty when the pattern has no such segment.
  const std::string& get(std::string_view name) const noexcept;
  void add(std::string_view name, std::string value) { values_.emplace_back(name, std::move(value)); }
  std::size_t size() const noexcept { return values_.size(); }

 private:
  std::vector<std::pair<std::string_view, std::string>> values_;
};

// Everything a handler may use to answer.
struct RouteContext {
  const HttpRequest& request;
  const PathParams& params;
  Fleet& fleet;
  const BrokerMetrics& metrics;
  const ControlApiOptions& options;
  std::uint64_t now_ms;
  // Who asks (unauthenticated when the API is open): recorded on the commands and jobs it makes.
  const Caller& caller;
};

using RouteHandler = HttpResponse (*)(const RouteContext&);

struct Route {
  // Probes and the dashboard's page must work without the token (its data
  // calls carry it).
  static constexpr unsigned kOpen = 1;
  // A GET route answers HEAD too, with the body dropped, unless it streams:
  // an event stream has no body to drop and no end.
  static constexpr unsigned kNoHead = 2;
  // Open when ControlApiOptions::metrics_open says so (/metrics for Prometheus).
  static constexpr unsigned kOpenByOption = 4;
  // The token may also come as ?access_token= (RFC 6750 2.3) when there is no
  // Authorization header: a browser's EventSource cannot send headers.
  static constexpr unsigned kTokenInQuery = 8;

  std::string_view method;   // "GET", "POST", ...
  std::string_view pattern;  // "/v1/rigs/{rig}/commands"; "/" is the root
  RouteHandler handler = nullptr;
  unsigned flags = 0;
};

class Router {
 public:
  // `routes` must outlive the router: patterns and names are viewed, not copied.
  // The first route that matches a request wins: list a literal segment's
  // route before a parameter's at the same place.
  explicit Router(std::span<const Route> routes);

  struct Match {
    const Route* route = nullptr;  // null: the path is unknown, or takes other methods
    PathParams params;
    bool known_path = false;       // some route has this path (whatever its method)
    bool open = false;             // some route of this path is Route::kOpen
    std::string allow;             // no route but a known path: its methods, ", "-separated
  };
  Match match(std::string_view method, std::string_view path) const;

  // A whole request: 401 without the bearer token of an operator (when tokens are
  // configured) on a path that is not open; 403 for a viewer on a route that is not
  // GET; 404 for an unknown path; 405 with Allow for a method the path does not
  // take; otherwise the handler's answer. A HEAD answer loses its body (the 401
  // keeps it, as it always did). Every answer to a method other than GET or HEAD
  // carries its AuditContext.
  HttpResponse dispatch(const HttpRequest& request, Fleet& fleet, const BrokerMetrics& metrics,
                        const ControlApiOptions& options, std::uint64_t now_ms) const;

 private:
  struct Segment {
    std::string_view text;  // the literal, or the parameter's name
    bool param = false;
  };
  struct Compiled {
    const Route* route;
    std::vector<Segment> segments;
  };
  static bool path_matches(const Compiled& c, const std::vector<std::string>& path) noexcept;
  static bool method_matches(const Route& r, std::string_view method) noexcept;

  std::vector<Compiled> routes_;
};

}  // namespace fleetlink::broker
