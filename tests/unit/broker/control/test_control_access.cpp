// Operators and roles through the router (a fake Authenticator: the hashing is
// app/operators.cpp's, tested in unit_broker_app), and the audit line.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "control/access.hpp"
#include "control/audit.hpp"
#include "control/reload.hpp"
#include "control/router.hpp"
#include "control/routes.hpp"
#include "test_control_fake_fleet.hpp"

using namespace fleetlink::broker;
using fleetlink::broker::testing::FakeFleet;

namespace {

class FakeOperators final : public Authenticator {
 public:
  std::optional<Caller> find(std::string_view token) const override {
    if (token == "alice-t") return Caller{"alice", Role::operator_, true};
    if (token == "view-t") return Caller{"grafana", Role::viewer, true};
    return std::nullopt;
  }
};

HttpResponse who(const RouteContext& ctx) {
  HttpResponse r;
  r.body = nlohmann::json{{"caller", ctx.caller.name}, {"cmd_id", "c-1"}}.dump();
  return r;
}

constexpr Route kTable[] = {
    {"GET", "/healthz", who, Route::kOpen},
    {"GET", "/metrics", who, Route::kOpenByOption},
    {"GET", "/rigs/{rig}", who},
    {"POST", "/rigs/{rig}/commands", who},
    {"PUT", "/cmds/{cmd}", who},
};

struct Fixture {
  Router router{kTable};
  FakeFleet fleet;
  BrokerMetrics metrics;
  FakeOperators operators;
  ControlApiOptions options;
  Fixture() { options.operators = &operators; }

  HttpResponse call(std::string method, std::string path, std::string token = {}) {
    HttpRequest req;
    req.method = std::move(method);
    req.path = std::move(path);
    if (!token.empty()) req.authorization = "Bearer " + token;
    req.peer = "127.0.0.1";
    return router.dispatch(req, fleet, metrics, options, 0);
  }
};

nlohmann::json body_of(const HttpResponse& r) { return nlohmann::json::parse(r.body); }

}  // namespace

TEST_CASE("access: roles parse from their names only") {
  CHECK(role_from_string("viewer") == Role::viewer);
  CHECK(role_from_string("operator") == Role::operator_);
  CHECK_FALSE(role_from_string("Operator"));
  CHECK_FALSE(role_from_string("admin"));
  CHECK_FALSE(role_from_string(""));
  CHECK(std::string(to_string(Role::viewer)) == "viewer");
  CHECK(std::string(to_string(Role::operator_)) == "operator");
  CHECK(needs_operator("POST"));
  CHECK(needs_operator("PUT"));
  CHECK(needs_operator("DELETE"));
  CHECK_FALSE(needs_operator("GET"));
  CHECK_FALSE(needs_operator("HEAD"));
}

TEST_CASE("access: a viewer reads, and gets 403 forbidden on anything else") {
  Fixture f;
  HttpResponse r = f.call("GET", "/rigs/r1", "view-t");
  CHECK(r.status == 200);
  CHECK(body_of(r)["caller"] == "grafana");
  r = f.call("POST", "/rigs/r1/commands", "view-t");
  CHECK(r.status == 403);
  CHECK(body_of(r) == nlohmann::json{{"error", "forbidden"},
                                     {"detail", "operator grafana has role viewer; this needs operator"}});
  CHECK(f.call("PUT", "/cmds/c1", "view-t").status == 403);
  CHECK(f.call("HEAD", "/rigs/r1", "view-t").status == 200);
  // A method the path does not take is still 405, not 403.
  CHECK(f.call("DELETE", "/rigs/r1", "view-t").status == 405);
}

TEST_CASE("access: POST /v1/admin/reload is an operator's; a viewer gets 403 and nothing is reloaded") {
  struct CountingReloader final : Reloader {
    std::vector<std::string> triggers;
    ReloadOutcome reload(std::string_view trigger) override {
      triggers.emplace_back(trigger);
      ReloadOutcome out;
      out.ok = true;
      return out;
    }
  } reloader;
  FakeFleet fleet;
  BrokerMetrics metrics;
  FakeOperators operators;
  ControlApiOptions options;
  options.operators = &operators;
  options.reloader = &reloader;
  auto call = [&](const std::string& token) {
    HttpRequest req;
    req.method = "POST";
    req.path = "/v1/admin/reload";
    req.authorization = "Bearer " + token;
    return handle_control_request(req, fleet, metrics, options, 0);
  };
  HttpResponse r = call("view-t");
  CHECK(r.status == 403);
  CHECK(body_of(r)["error"] == "forbidden");
  REQUIRE(r.audit);
  CHECK(r.audit->caller.name == "grafana");
  CHECK(reloader.triggers.empty());
  CHECK(call("nobody").status == 401);
  CHECK(reloader.triggers.empty());
  r = call("alice-t");
  CHECK(r.status == 200);
  CHECK(reloader.triggers == std::vector<std::string>{"POST /v1/admin/reload by alice"});
}

TEST_CASE("access: an operator does everything, and the handler knows who") {
  Fixture f;
  HttpResponse r = f.call("POST", "/rigs/r1/commands", "alice-t");
  CHECK(r.status == 200);
  CHECK(body_of(r)["caller"] == "alice");
  CHECK(f.call("PUT", "/cmds/c1", "alice-t").status == 200);
}

TEST_CASE("access: no token or an unknown one is 401 with its reason, on open paths nothing is asked") {
  Fixture f;
  HttpResponse r = f.call("GET", "/rigs/r1");
  CHECK(r.status == 401);
  CHECK(body_of(r)["reason"] == "missing_token");
  r = f.call("GET", "/rigs/r1", "nobody");
  CHECK(r.status == 401);
  CHECK(body_of(r)["reason"] == "bad_token");
  CHECK(body_of(r)["detail"] == "the bearer token is not the token of any of this broker's operators");
  r = f.call("POST", "/rigs/r1/commands", "nobody");
  CHECK(r.status == 401);
  CHECK(f.call("GET", "/healthz").status == 200);
  HttpResponse open = f.call("GET", "/healthz");
  CHECK(body_of(open)["caller"] == "");
}

TEST_CASE("access: /metrics needs a token of any role unless metrics_open") {
  Fixture f;
  CHECK(f.call("GET", "/metrics").status == 401);
  CHECK(f.call("GET", "/metrics", "view-t").status == 200);
  f.options.metrics_open = true;
  CHECK(f.call("GET", "/metrics").status == 200);
  // Only the flagged route.
  CHECK(f.call("GET", "/rigs/r1").status == 401);
}

TEST_CASE("access: the old single token is operator 'token'; no token at all is an open API") {
  Fixture f;
  f.options.operators = nullptr;
  f.options.token = "s3cret";
  HttpResponse r = f.call("POST", "/rigs/r1/commands", "s3cret");
  CHECK(r.status == 200);
  CHECK(body_of(r)["caller"] == "token");
  CHECK(r.audit->caller.name == "token");
  CHECK(f.call("POST", "/rigs/r1/commands", "alice-t").status == 401);
  f.options.token.clear();
  r = f.call("POST", "/rigs/r1/commands");
  CHECK(r.status == 200);
  CHECK(body_of(r)["caller"] == "");
  REQUIRE(r.audit);
  CHECK_FALSE(r.audit->caller.authenticated);
}

TEST_CASE("access: every non-GET answer carries its audit context, refusals included; GETs none") {
  Fixture f;
  HttpResponse r = f.call("POST", "/rigs/r1/commands", "alice-t");
  REQUIRE(r.audit);
  CHECK(r.audit->caller.name == "alice");
  CHECK(r.audit->request == "POST /rigs/r1/commands");
  CHECK(r.audit->target == "rig:r1");
  CHECK(r.audit->peer == "127.0.0.1");
  r = f.call("PUT", "/cmds/c9", "view-t");
  REQUIRE(r.audit);
  CHECK(r.audit->target == "cmd:c9");
  CHECK(r.audit->caller.role == Role::viewer);
  r = f.call("POST", "/rigs/r1/commands", "bad");
  REQUIRE(r.audit);
  CHECK_FALSE(r.audit->caller.authenticated);
  CHECK(f.call("POST", "/nowhere", "alice-t").audit);
  CHECK_FALSE(f.call("GET", "/rigs/r1", "alice-t").audit);
}

TEST_CASE("audit: the line is key=value, quoted where needed") {
  const Caller alice{"alice", Role::operator_, true};
  AuditEntry e;
  e.at_ms = 1'733'000'000'123;
  e.caller = &alice;
  e.peer = "127.0.0.1";
  e.request = "POST /v1/rigs/rig-1/commands";
  e.target = "rig:rig-1";
  e.status = "202";
  e.result = "cmd_id:0190";
  CHECK(audit_line(e) ==
        "time=2024-11-30T20:53:20.123Z operator=alice role=operator peer=127.0.0.1 "
        "request=\"POST /v1/rigs/rig-1/commands\" target=rig:rig-1 status=202 result=cmd_id:0190");
  e.caller = nullptr;
  e.peer = "";
  e.target = "rig:a b\"c\\d=e\n";
  CHECK(audit_line(e) ==
        "time=2024-11-30T20:53:20.123Z operator=- role=- peer=- request=\"POST /v1/rigs/rig-1/commands\" "
        "target=\"rig:a b\\\"c\\\\d=e\\x0a\" status=202 result=cmd_id:0190");
  CHECK(audit_line(e).find('\n') == std::string::npos);
  const Caller open;  // unauthenticated: no name shown even if one were set
  e.caller = &open;
  CHECK(audit_line(e).find("operator=- role=-") != std::string::npos);
  CHECK(audit_value("") == "-");
  CHECK(audit_value("plain") == "plain");
  CHECK(audit_value("a=b") == "\"a=b\"");
  CHECK(audit_value("tab\there") == "\"tab\\x09here\"");
  CHECK(audit_peer("::ffff:127.0.0.1") == "127.0.0.1");
  CHECK(audit_peer("::1") == "::1");
  CHECK(audit_peer("10.0.0.1") == "10.0.0.1");
}

TEST_CASE("audit: the result is the answer's error, or the id it made") {
  CHECK(audit_result_of_body(R"({"error":"forbidden","detail":"x"})") == "error:forbidden");
  CHECK(audit_result_of_body(R"({"cmd_id":"c-1","state":"queued"})") == "cmd_id:c-1");
  CHECK(audit_result_of_body(R"({"job_id":"j-1","rigs":[]})") == "job_id:j-1");
  CHECK(audit_result_of_body(R"({"rig_id":"r","closed":true})") == "-");
  CHECK(audit_result_of_body("not json") == "-");
  CHECK(audit_result_of_body("") == "-");
  CHECK(audit_result_of_body("[1,2]") == "-");
  CHECK(audit_result_of_body(R"({"cmd_id":7})") == "-");
}

TEST_CASE("audit: a file gets one flushed line per entry, appended") {
  char dir[] = "/tmp/fleetlink-audit-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/audit.log";
  {
    std::ofstream(path) << "an older line\n";
  }
  const Caller alice{"alice", Role::operator_, true};
  AuditEntry e;
  e.caller = &alice;
  e.request = "stream send";
  e.status = "queued";
  auto log = AuditLog::open_file(path);
  REQUIRE(log);
  (*log)->write(e);
  // Flushed at once: readable before the log is closed.
  std::stringstream ss;
  ss << std::ifstream(path).rdbuf();
  CHECK(ss.str() == "an older line\n" + audit_line(e) + "\n");
  (*log)->write(e);
  log->reset();
  std::stringstream again;
  again << std::ifstream(path).rdbuf();
  CHECK(again.str() == "an older line\n" + audit_line(e) + "\n" + audit_line(e) + "\n");
  auto bad = AuditLog::open_file(std::string(dir) + "/no/such/dir/audit.log");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().detail.find("cannot open the audit log") != std::string::npos);
  std::remove(path.c_str());
  rmdir(dir);
}
