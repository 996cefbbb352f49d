// The router on its own (a small table of its own) and the control API's table
// through it: pattern matching, path parameters, 404 vs 405 + Allow, HEAD, the token.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "control/router.hpp"
#include "control/routes.hpp"
#include "test_control_fake_fleet.hpp"

using fleetlink::broker::BrokerMetrics;
using fleetlink::broker::ControlApiOptions;
using fleetlink::broker::HttpRequest;
using fleetlink::broker::HttpResponse;
using fleetlink::broker::Route;
using fleetlink::broker::RouteContext;
using fleetlink::broker::Router;
using fleetlink::broker::testing::FakeFleet;

namespace {

HttpResponse echo(std::string what, const RouteContext& ctx) {
  HttpResponse r;
  r.content_type = "text/plain";
  r.body = std::move(what);
  for (const char* name : {"rig", "cmd"}) {
    if (!ctx.params.get(name).empty()) r.body += std::string(" ") + name + "=" + ctx.params.get(name);
  }
  r.headers.emplace_back("X-Handler", "yes");
  return r;
}

HttpResponse root(const RouteContext& ctx) { return echo("root", ctx); }
HttpResponse health(const RouteContext& ctx) { return echo("health", ctx); }
HttpResponse list_rigs(const RouteContext& ctx) { return echo("list", ctx); }
HttpResponse make_rig(const RouteContext& ctx) { return echo("make", ctx); }
HttpResponse one_rig(const RouteContext& ctx) { return echo("one", ctx); }
HttpResponse special_rig(const RouteContext& ctx) { return echo("special", ctx); }
HttpResponse rig_cmd(const RouteContext& ctx) { return echo("cmd", ctx); }
HttpResponse stream(const RouteContext& ctx) { return echo("stream", ctx); }

constexpr Route kTable[] = {
    {"GET", "/", root, Route::kOpen},
    {"GET", "/healthz", health, Route::kOpen},
    {"GET", "/rigs", list_rigs},
    {"POST", "/rigs", make_rig},
    {"GET", "/rigs/special", special_rig},
    {"GET", "/rigs/{rig}", one_rig},
    {"PUT", "/rigs/{rig}", one_rig},
    {"GET", "/rigs/{rig}/commands/{cmd}", rig_cmd},
    {"GET", "/stream", stream, Route::kNoHead},
};

struct Fixture {
  Router router{kTable};
  FakeFleet fleet;
  BrokerMetrics metrics;
  ControlApiOptions options;

  HttpResponse call(std::string method, std::string path, std::string auth = {}) {
    HttpRequest req;
    req.method = std::move(method);
    req.path = std::move(path);
    req.authorization = std::move(auth);
    return router.dispatch(req, fleet, metrics, options, 0);
  }
};

std::string allow_of(const HttpResponse& r) {
  for (const auto& [name, value] : r.headers) {
    if (name == "Allow") return value;
  }
  return "(none)";
}

std::string error_of(const HttpResponse& r) { return nlohmann::json::parse(r.body)["error"]; }

}  // namespace

TEST_CASE("router: literal segments, {params}, the root, and the path's normal form") {
  Fixture f;
  CHECK(f.call("GET", "/").body == "root");
  CHECK(f.call("GET", "").body == "root");
  CHECK(f.call("GET", "//").body == "root");
  CHECK(f.call("GET", "/rigs").body == "list");
  CHECK(f.call("GET", "/rigs/").body == "list");
  CHECK(f.call("GET", "//rigs").body == "list");
  CHECK(f.call("GET", "/rigs/rig-7").body == "one rig=rig-7");
  CHECK(f.call("GET", "/rigs/rig-7/commands/c-1").body == "cmd rig=rig-7 cmd=c-1");
  // Parameters are percent-decoded, and one parameter is exactly one segment.
  CHECK(f.call("GET", "/rigs/a%2Fb").body == "one rig=a/b");
  CHECK(f.call("GET", "/rigs/a/b").status == 404);
  CHECK(f.call("GET", "/rigs/rig-7/commands").status == 404);
  // Literals compare after decoding.
  CHECK(f.call("GET", "/r%69gs").body == "list");
}

TEST_CASE("router: match() yields the route, the params and whether the path is known") {
  const Router router(kTable);
  Router::Match m = router.match("GET", "/rigs/rig-7/commands/c-1");
  REQUIRE(m.route != nullptr);
  CHECK(m.route->pattern == "/rigs/{rig}/commands/{cmd}");
  CHECK(m.params.size() == 2);
  CHECK(m.params.get("rig") == "rig-7");
  CHECK(m.params.get("cmd") == "c-1");
  CHECK(m.params.get("nope").empty());
  CHECK(m.allow.empty());

  m = router.match("DELETE", "/rigs/rig-7");
  CHECK(m.route == nullptr);
  CHECK(m.known_path);
  CHECK(m.allow == "GET, PUT");

  m = router.match("GET", "/nowhere");
  CHECK(m.route == nullptr);
  CHECK_FALSE(m.known_path);
  CHECK(m.allow.empty());
}

TEST_CASE("router: the first matching route wins, so a literal listed first beats a parameter") {
  Fixture f;
  CHECK(f.call("GET", "/rigs/special").body == "special");
  CHECK(f.call("GET", "/rigs/specials").body == "one rig=specials");
  // Both routes match /rigs/special: Allow lists each method once, in table order.
  const HttpResponse r = f.call("POST", "/rigs/special");
  CHECK(r.status == 405);
  CHECK(allow_of(r) == "GET, PUT");
}

TEST_CASE("router: an unknown path is 404, a known path with another method is 405 with Allow") {
  Fixture f;
  HttpResponse r = f.call("GET", "/nowhere");
  CHECK(r.status == 404);
  CHECK(error_of(r) == "not_found");
  CHECK(nlohmann::json::parse(r.body)["detail"] == "no such endpoint: /nowhere");
  CHECK(allow_of(r) == "(none)");

  r = f.call("DELETE", "/rigs");
  CHECK(r.status == 405);
  CHECK(error_of(r) == "method_not_allowed");
  CHECK(nlohmann::json::parse(r.body)["detail"] == "allowed: GET, POST");
  CHECK(allow_of(r) == "GET, POST");

  r = f.call("POST", "/healthz");
  CHECK(r.status == 405);
  CHECK(allow_of(r) == "GET");
}

TEST_CASE("router: HEAD is GET without the body, except on a route that streams") {
  Fixture f;
  HttpResponse r = f.call("HEAD", "/rigs/rig-7");
  CHECK(r.status == 200);
  CHECK(r.body.empty());
  CHECK(r.content_type == "text/plain");
  CHECK(allow_of(r) == "(none)");
  CHECK(r.headers.at(0).first == "X-Handler");  // the handler ran

  r = f.call("HEAD", "/stream");
  CHECK(r.status == 405);
  CHECK(allow_of(r) == "GET");
  CHECK(r.body.empty());  // the 405 is a HEAD answer too

  CHECK(f.call("HEAD", "/nowhere").status == 404);
  CHECK(f.call("HEAD", "/nowhere").body.empty());
  // HEAD is not listed in Allow: GET implies it.
  CHECK(allow_of(f.call("DELETE", "/rigs/rig-7/commands/c-1")) == "GET");
}

TEST_CASE("router: with a token, only open paths answer without it, whatever the method") {
  Fixture f;
  f.options.token = "s3cret";
  HttpResponse r = f.call("GET", "/rigs");
  CHECK(r.status == 401);
  CHECK(error_of(r) == "unauthorized");
  CHECK(r.headers.at(0) == std::pair<std::string, std::string>{"WWW-Authenticate", "Bearer realm=\"fleetlink\""});
  CHECK(f.call("GET", "/rigs", "Bearer s3cret").status == 200);
  // Unknown paths and wrong methods do not tell a stranger what exists.
  CHECK(f.call("GET", "/nowhere").status == 401);
  CHECK(f.call("DELETE", "/rigs").status == 401);
  CHECK(f.call("GET", "/nowhere", "Bearer s3cret").status == 404);
  // Open paths: any method reaches the router's answer.
  CHECK(f.call("GET", "/healthz").status == 200);
  CHECK(f.call("GET", "/").status == 200);
  CHECK(f.call("POST", "/healthz").status == 405);
}

TEST_CASE("control API table: every path's Allow is what the API always answered") {
  FakeFleet fleet;
  BrokerMetrics metrics;
  const ControlApiOptions options;
  auto call = [&](const char* method, const char* path) {
    HttpRequest req;
    req.method = method;
    req.path = path;
    return fleetlink::broker::handle_control_request(req, fleet, metrics, options, 0);
  };
  struct Case {
    const char* method;
    const char* path;
    const char* allow;
  };
  for (const Case& c : {Case{"POST", "/", "GET"}, Case{"POST", "/index.html", "GET"},
                        Case{"POST", "/dashboard", "GET"}, Case{"POST", "/healthz", "GET"},
                        Case{"POST", "/readyz", "GET"}, Case{"POST", "/metrics", "GET"},
                        Case{"DELETE", "/v1/rigs", "GET"}, Case{"POST", "/v1/rigs/r1", "GET"},
                        Case{"GET", "/v1/rigs/r1/commands", "POST"}, Case{"GET", "/v1/rigs/r1/reconnect", "POST"},
                        Case{"DELETE", "/v1/commands", "GET, POST"}, Case{"POST", "/v1/batches/b1", "GET"},
                        Case{"DELETE", "/v1/jobs", "GET, POST"}, Case{"POST", "/v1/jobs/j1", "GET"},
                        Case{"POST", "/v1/commands/c1", "GET"}, Case{"GET", "/v1/commands/c1/cancel", "POST"},
                        Case{"GET", "/v1/admin/drain", "POST"}, Case{"POST", "/v1/events", "GET"},
                        Case{"HEAD", "/v1/events", "GET"}}) {
    const HttpResponse r = call(c.method, c.path);
    CHECK_MESSAGE(r.status == 405, c.method, " ", c.path);
    CHECK_MESSAGE(allow_of(r) == c.allow, c.method, " ", c.path);
    if (std::string(c.method) != "HEAD") {
      CHECK(nlohmann::json::parse(r.body)["detail"] == std::string("allowed: ") + c.allow);
    }
  }
  for (const char* path : {"/v1", "/v2/rigs", "/v1/rigs/r1/nothing", "/v1/batches", "/v1/admin",
                           "/healthz/x", "/v1/commands/c1/cancel/now"}) {
    CHECK_MESSAGE(call("GET", path).status == 404, path);
  }
  // HEAD of a GET route: its status, no body.
  const HttpResponse head = call("HEAD", "/healthz");
  CHECK(head.status == 200);
  CHECK(head.body.empty());
  CHECK(call("HEAD", "/v1/rigs/ghost").status == 404);
}

TEST_CASE("control API: /v1/events takes the token as ?access_token= (EventSource sends no header); no other path does") {
  FakeFleet fleet;
  BrokerMetrics metrics;
  ControlApiOptions options;
  options.token = "s3cret";
  auto call = [&](const char* path, const char* query, std::string auth = {}) {
    HttpRequest req;
    req.method = "GET";
    req.path = path;
    req.query = query;
    req.authorization = std::move(auth);
    return fleetlink::broker::handle_control_request(req, fleet, metrics, options, 0);
  };
  HttpResponse r = call("/v1/events", "access_token=s3cret");
  CHECK(r.status == 200);
  CHECK(r.event_stream);
  r = call("/v1/events", "types=command_done&access_token=s3cret&cmd=c-1");
  CHECK(r.status == 200);
  CHECK(r.event_cmd_id == "c-1");
  CHECK(call("/v1/events", "access_token=s3cre%74").status == 200);  // percent-decoded like any query value
  r = call("/v1/events", "access_token=wrong");
  CHECK(r.status == 401);
  CHECK(nlohmann::json::parse(r.body)["reason"] == "bad_token");
  r = call("/v1/events", "access_token=");
  CHECK(r.status == 401);
  CHECK(nlohmann::json::parse(r.body)["reason"] == "missing_token");
  CHECK(call("/v1/events", "").status == 401);
  // A header, when there is one, is what counts.
  CHECK(call("/v1/events", "access_token=s3cret", "Bearer wrong").status == 401);
  CHECK(call("/v1/events", "access_token=wrong", "Bearer s3cret").status == 200);
  // Only the event stream: every other path still needs the header.
  CHECK(call("/v1/rigs", "access_token=s3cret").status == 401);
  CHECK(call("/v1/jobs", "access_token=s3cret").status == 401);
  CHECK(call("/metrics", "access_token=s3cret").status == 401);
}
