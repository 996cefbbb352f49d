// The control API's routing and bodies, against a fake Fleet (no sockets).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "control/control_json.hpp"
#include "control/jobs.hpp"
#include "control/reload.hpp"
#include "control/routes.hpp"
#include "test_control_fake_fleet.hpp"
#include "test_control_fake_store.hpp"

using fleetlink::broker::BrokerMetrics;
using fleetlink::broker::CommandState;
using fleetlink::broker::CommandView;
using fleetlink::broker::ControlApiOptions;
using fleetlink::broker::EnqueueError;
using fleetlink::broker::EventType;
using fleetlink::broker::EventTypes;
using fleetlink::broker::EnqueueFailure;
using fleetlink::broker::handle_control_request;
using fleetlink::broker::HttpRequest;
using fleetlink::broker::HttpResponse;
using fleetlink::broker::testing::FakeFleet;
using fleetlink::broker::testing::make_rig;
using nlohmann::json;

namespace {

constexpr std::uint64_t kNow = 1'800'000'010'000ULL;

struct Fixture {
  FakeFleet fleet;
  BrokerMetrics metrics;
  ControlApiOptions options;

  Fixture() {
    fleet.rig_map["rig-1"] = make_rig("rig-1");
    fleet.rig_map["rig-2"] = make_rig("rig-2");
  }
  HttpResponse call(std::string method, std::string path, std::string body = {},
                    std::string auth = {}) {
    HttpRequest req;
    req.method = std::move(method);
    if (const auto q = path.find('?'); q != std::string::npos) {
      req.query = path.substr(q + 1);
      path.resize(q);
    }
    req.path = std::move(path);
    req.body = std::move(body);
    req.authorization = std::move(auth);
    return settle_record(handle_control_request(req, fleet, metrics, options, kNow), fleet);
  }
};

json body_of(const HttpResponse& r) { return json::parse(r.body); }

std::vector<std::string> keys_of(const json& j) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace

TEST_CASE("control: GET /v1/rigs lists every rig with the documented keys") {
  Fixture f;
  f.fleet.rig_map["rig-1"].last_ack_seq = 7;
  f.fleet.rig_map["rig-1"].last_ack_at_ms = kNow - 47'000;
  const HttpResponse r = f.call("GET", "/v1/rigs");
  CHECK(r.status == 200);
  CHECK(r.content_type == "application/json");
  const json j = body_of(r);
  REQUIRE(j["rigs"].size() == 2);
  const json& rig = j["rigs"][0];
  for (const char* key : {"rig_id", "state", "boot_id", "agent_version", "labels", "kinds", "peer",
                          "connected_at", "last_ack_seq", "last_ack_at", "outbox_depth",
                          "outbox_capacity", "unacked"}) {
    CHECK_MESSAGE(rig.contains(key), key);
  }
  CHECK(rig["rig_id"] == "rig-1");
  CHECK(rig["last_ack_seq"] == 7);
  CHECK(rig["last_ack_age_ms"] == 47'000);
  CHECK(rig["last_ack_at"].get<std::string>().size() == 24);
  CHECK(rig["unacked"] == 0);
  CHECK(j["rigs"][1]["last_ack_at"].is_null());
  CHECK_FALSE(rig.contains("unacked_commands"));
}

TEST_CASE("control: GET /v1/rigs/{rig} adds unacked commands; unknown rig is 404") {
  Fixture f;
  fleetlink::broker::UnackedCommand u;
  u.cmd_id = "c1";
  u.seq = 3;
  u.kind = "dmesg";
  u.age_ms = 1500;
  u.sent = true;
  f.fleet.rig_map["rig-2"].unacked.push_back(u);
  HttpResponse r = f.call("GET", "/v1/rigs/rig-2");
  CHECK(r.status == 200);
  json j = body_of(r);
  CHECK(j["unacked"] == 1);
  REQUIRE(j["unacked_commands"].size() == 1);
  CHECK(j["unacked_commands"][0] ==
        json{{"cmd_id", "c1"}, {"seq", 3}, {"kind", "dmesg"}, {"age_ms", 1500}, {"sent", true}});

  r = f.call("GET", "/v1/rigs/nope");
  CHECK(r.status == 404);
  j = body_of(r);
  CHECK(j["error"] == "unknown_rig");
  CHECK(j["rig_id"] == "nope");
}

TEST_CASE("control: POST a command -> 202 with cmd_id and seq; args reach the fleet") {
  Fixture f;
  const HttpResponse r =
      f.call("POST", "/v1/rigs/rig-1/commands", R"({"kind":"dmesg","args":{"lines":"50"}})");
  CHECK(r.status == 202);
  const json j = body_of(r);
  CHECK(j == json{{"cmd_id", "cmd-1"}, {"rig_id", "rig-1"}, {"seq", 1}, {"state", "queued"}, {"held", false},
                  {"existing", false}, {"deliver_by", nullptr}});
  REQUIRE(f.fleet.enqueued.size() == 1);
  CHECK(f.fleet.enqueued[0].first == "dmesg");
  CHECK(f.fleet.enqueued[0].second.at("lines") == "50");
  CHECK(f.fleet.persisted == 1);  // recorded before the 202
}

TEST_CASE("control: a command's optional fields reach the fleet; a failed record is 503") {
  Fixture f;
  HttpResponse r = f.call("POST", "/v1/rigs/rig-1/commands",
                          R"({"kind":"suite","args":{"id":"7"},"cmd_id":"01a00000-0000-7000-8000-00000000000a",)"
                          R"("idempotency_key":"nightly-7","deliver_within_s":60,"timeout_s":7200,"hold":true})");
  CHECK(r.status == 202);
  REQUIRE(f.fleet.requests.size() == 1);
  const fleetlink::broker::CommandRequest& q = f.fleet.requests[0];
  CHECK(q.rig_id == "rig-1");
  CHECK(q.cmd_id == "01a00000-0000-7000-8000-00000000000a");
  CHECK(q.idempotency_key == "nightly-7");
  CHECK(q.deliver_within_s == 60u);
  CHECK(q.timeout_s == 7200u);
  CHECK(q.hold);
  for (const char* body : {R"({"kind":"x","timeout_s":"1h"})", R"({"kind":"x","deliver_within_s":-5})",
                           R"({"kind":"x","hold":1})", R"({"kind":"x","idempotency_key":[]})"}) {
    CHECK_MESSAGE(f.call("POST", "/v1/rigs/rig-1/commands", body).status == 400, body);
  }
  f.fleet.persist_fails = true;
  r = f.call("POST", "/v1/rigs/rig-1/commands", R"({"kind":"dmesg"})");
  CHECK(r.status == 503);
  CHECK(body_of(r)["error"] == "store_unavailable");
}

TEST_CASE("control: GET /v1/commands lists history with filters; bad filters are 400") {
  Fixture f;
  for (int i = 1; i <= 3; ++i) {
    CommandView c;
    c.cmd_id = "c-" + std::to_string(i);
    c.rig_id = i == 2 ? "rig-2" : "rig-1";
    c.state = i == 3 ? CommandState::failed : CommandState::succeeded;
    f.fleet.commands[c.cmd_id] = c;
  }
  json j = body_of(f.call("GET", "/v1/commands?rig=rig-1"));
  REQUIRE(j["commands"].size() == 2);
  CHECK(j["commands"][0]["cmd_id"] == "c-3");
  CHECK_FALSE(j["commands"][0].contains("result"));
  j = body_of(f.call("GET", "/v1/commands?state=failed"));
  REQUIRE(j["commands"].size() == 1);
  j = body_of(f.call("GET", "/v1/commands?limit=1"));
  CHECK(j["commands"].size() == 1);
  CHECK(j["next_before"] == "c-3");
  for (const char* q : {"state=lost", "limit=0", "limit=5000", "since=yesterday"})
    CHECK_MESSAGE(f.call("GET", std::string("/v1/commands?") + q).status == 400, q);
}

TEST_CASE("control: numbers in args are accepted as their text") {
  Fixture f;
  const HttpResponse r = f.call("POST", "/v1/rigs/rig-1/commands", R"({"kind":"dmesg","args":{"lines":50}})");
  CHECK(r.status == 202);
  CHECK(f.fleet.enqueued.at(0).second.at("lines") == "50");
}

TEST_CASE("control: bad bodies are 400 with a clear detail") {
  Fixture f;
  for (const char* body : {"", "{", "[]", R"({"args":{}})", R"({"kind":""})", R"({"kind":5})",
                           R"({"kind":"dmesg","args":[1]})",
                           R"({"kind":"dmesg","args":{"a":{"b":1}}})"}) {
    const HttpResponse r = f.call("POST", "/v1/rigs/rig-1/commands", body);
    CHECK_MESSAGE(r.status == 400, body);
    const json j = body_of(r);
    CHECK(j["error"] == "bad_request");
    CHECK_FALSE(j["detail"].get<std::string>().empty());
  }
  CHECK(f.fleet.enqueued.empty());
}

TEST_CASE("control: enqueue refusals map to 404/422/503/400") {
  Fixture f;
  HttpResponse r = f.call("POST", "/v1/rigs/ghost/commands", R"({"kind":"dmesg"})");
  CHECK(r.status == 404);
  CHECK(body_of(r)["error"] == "unknown_rig");

  EnqueueFailure unsupported;
  unsupported.error = EnqueueError::unsupported_kind;
  unsupported.rig_id = "rig-1";
  unsupported.detail = "rig-1 does not run kind 'x'";
  f.fleet.next_failure = unsupported;
  r = f.call("POST", "/v1/rigs/rig-1/commands", R"({"kind":"x"})");
  CHECK(r.status == 422);
  CHECK(body_of(r)["error"] == "unsupported_kind");

  EnqueueFailure draining;
  draining.error = EnqueueError::draining;
  draining.rig_id = "rig-1";
  f.fleet.next_failure = draining;
  r = f.call("POST", "/v1/rigs/rig-1/commands", R"({"kind":"dmesg"})");
  CHECK(r.status == 503);
  CHECK(body_of(r)["error"] == "draining");
}

TEST_CASE("control: a full outbox is 503 rig_unresponsive with exactly the contract's keys") {
  Fixture f;
  EnqueueFailure full;
  full.error = EnqueueError::rig_unresponsive;
  full.rig_id = "rig-1";
  full.detail = "outbox full (128/128), oldest queued cmd age 47s";
  full.last_ack_seq = 41;
  full.last_ack_at_ms = 1'800'000'000'123ULL;
  full.suggested_action = "force_reconnect";
  f.fleet.next_failure = full;
  const HttpResponse r = f.call("POST", "/v1/rigs/rig-1/commands", R"({"kind":"dmesg"})");
  CHECK(r.status == 503);
  const json j = body_of(r);
  CHECK(keys_of(j) == std::vector<std::string>{"detail", "error", "last_ack_at", "last_ack_seq",
                                               "rig_id", "suggested_action"});
  CHECK(j["error"] == "rig_unresponsive");
  CHECK(j["rig_id"] == "rig-1");
  CHECK(j["detail"] == "outbox full (128/128), oldest queued cmd age 47s");
  CHECK(j["last_ack_seq"] == 41);
  CHECK(j["last_ack_at"] == "2027-01-15T08:00:00.123Z");
  CHECK(j["suggested_action"] == "force_reconnect");

  // Never acknowledged: last_ack_at is null, the keys stay the same.
  full.last_ack_at_ms.reset();
  full.last_ack_seq = 0;
  f.fleet.next_failure = full;
  const json j2 = body_of(f.call("POST", "/v1/rigs/rig-1/commands", R"({"kind":"dmesg"})"));
  CHECK(j2["last_ack_at"].is_null());
  CHECK(keys_of(j2).size() == 6);
}

TEST_CASE("control: GET /v1/commands/{id} shows state, nack and result; unknown is 404") {
  Fixture f;
  CommandView c;
  c.cmd_id = "c-9";
  c.rig_id = "rig-1";
  c.kind = "dmesg";
  c.args = {{"lines", "2"}};
  c.seq = 4;
  c.state = CommandState::succeeded;
  c.enqueued_at_ms = 1'800'000'000'000ULL;
  c.sent_at_ms = 1'800'000'000'001ULL;
  c.acked_at_ms = 1'800'000'000'002ULL;
  c.finished_at_ms = 1'800'000'000'010ULL;
  fleetlink::msg::Result res;
  res.cmd_id = "c-9";
  res.status = fleetlink::msg::Status::ok;
  res.output = {'a', '\n', 0xff, 'b'};  // invalid UTF-8 byte in the middle
  res.started_at_ms = 1'800'000'000'003ULL;
  res.finished_at_ms = 1'800'000'000'009ULL;
  c.result = res;
  f.fleet.commands["c-9"] = c;

  HttpResponse r = f.call("GET", "/v1/commands/c-9");
  CHECK(r.status == 200);
  json j = body_of(r);
  for (const char* key : {"cmd_id", "rig_id", "kind", "args", "idempotency_key", "job_id", "seq", "attempts",
                          "state", "detail", "enqueued_at", "sent_at", "acked_at", "running_at", "finished_at",
                          "deliver_by", "timeout_s", "acked_boot_id", "cancel_requested_at", "duplicate", "nack",
                          "result", "streamed_bytes"}) {
    CHECK_MESSAGE(j.contains(key), key);
  }
  CHECK(j["state"] == "succeeded");
  CHECK(j["nack"].is_null());
  CHECK(j["result"]["status"] == "ok");
  CHECK(j["result"]["output"] == "a\n\xEF\xBF\xBD" "b");
  for (const char* key : {"status", "exit_code", "signal", "output", "truncated", "dropped_bytes",
                          "detail", "started_at", "finished_at"}) {
    CHECK_MESSAGE(j["result"].contains(key), key);
  }

  c.state = CommandState::rejected;
  c.result.reset();
  fleetlink::msg::Nack nack;
  nack.reason = fleetlink::msg::NackReason::not_allowed;
  nack.detail = "kind not allowed";
  c.nack = nack;
  f.fleet.commands["c-9"] = c;
  j = body_of(f.call("GET", "/v1/commands/c-9"));
  CHECK(j["state"] == "rejected");
  CHECK(j["nack"] == json{{"reason", "not_allowed"}, {"detail", "kind not allowed"}});
  CHECK(j["result"].is_null());

  r = f.call("GET", "/v1/commands/nope");
  CHECK(r.status == 404);
  CHECK(body_of(r)["error"] == "unknown_command");
}

TEST_CASE("control: reconnect closes the rig or answers 404") {
  Fixture f;
  HttpResponse r = f.call("POST", "/v1/rigs/rig-2/reconnect");
  CHECK(r.status == 200);
  CHECK(body_of(r) == json{{"rig_id", "rig-2"}, {"closed", true}});
  CHECK(f.fleet.reconnected == std::vector<std::string>{"rig-2"});
  r = f.call("POST", "/v1/rigs/ghost/reconnect");
  CHECK(r.status == 404);
  CHECK(body_of(r)["error"] == "unknown_rig");
}

TEST_CASE("control: drain takes an optional window") {
  Fixture f;
  f.options.default_drain_window = std::chrono::milliseconds(3000);
  HttpResponse r = f.call("POST", "/v1/admin/drain", R"({"window_ms":2000})");
  CHECK(r.status == 202);
  CHECK(body_of(r) == json{{"draining", true}, {"window_ms", 2000}});
  // The drain starts once the answer is out (a broker with no rigs exits at once).
  CHECK_FALSE(f.fleet.draining());
  REQUIRE(r.after_sent);
  r.after_sent(f.fleet);
  REQUIRE(f.fleet.drain_window);
  CHECK(f.fleet.drain_window->count() == 2000);

  Fixture g;
  g.options.default_drain_window = std::chrono::milliseconds(3000);
  r = g.call("POST", "/v1/admin/drain");
  CHECK(r.status == 202);
  CHECK(body_of(r)["window_ms"] == 3000);
  r.after_sent(g.fleet);
  CHECK(g.fleet.drain_window->count() == 3000);

  Fixture h;
  CHECK(h.call("POST", "/v1/admin/drain", R"({"window_ms":-5})").status == 400);
  CHECK(h.call("POST", "/v1/admin/drain", R"({"window_ms":"soon"})").status == 400);
  CHECK_FALSE(h.fleet.draining());
}

namespace {

// The application's side of POST /v1/admin/reload, as the route sees it.
struct FakeReloader final : fleetlink::broker::Reloader {
  fleetlink::broker::ReloadOutcome answer;
  std::vector<std::string> triggers;
  fleetlink::broker::ReloadOutcome reload(std::string_view trigger) override {
    triggers.emplace_back(trigger);
    return answer;
  }
};

}  // namespace

TEST_CASE("control: POST /v1/admin/reload answers what changed, or 500 reload_failed with why") {
  Fixture f;
  FakeReloader reloader;
  f.options.reloader = &reloader;
  reloader.answer.ok = true;
  reloader.answer.changes = {"CRLs from /etc/fleetlink/crl: 1 listing 1 revoked serial(s)"};
  reloader.answer.rigs_to_check = 12;
  HttpResponse r = f.call("POST", "/v1/admin/reload");
  CHECK(r.status == 200);
  CHECK(body_of(r) == json{{"reloaded", true},
                           {"changed", {"CRLs from /etc/fleetlink/crl: 1 listing 1 revoked serial(s)"}},
                           {"warnings", json::array()},
                           {"rigs_to_check", 12}});
  REQUIRE(reloader.triggers.size() == 1);
  CHECK(reloader.triggers[0] == "POST /v1/admin/reload by -");  // an open API: no operator name
  REQUIRE(r.audit);  // a mutating call: audited like the others
  CHECK(r.audit->request == "POST /v1/admin/reload");

  reloader.answer = {};
  reloader.answer.detail = "--key '/k' is not the private key of --cert '/c'";
  r = f.call("POST", "/v1/admin/reload", "{}");
  CHECK(r.status == 500);
  CHECK(body_of(r) == json{{"error", "reload_failed"}, {"detail", "--key '/k' is not the private key of --cert '/c'"}});

  CHECK(f.call("POST", "/v1/admin/reload", "[1]").status == 400);  // a body, if any, is a JSON object
  CHECK(reloader.triggers.size() == 2);
  CHECK(f.call("GET", "/v1/admin/reload").status == 405);

  Fixture none;  // a broker without a reloader
  r = none.call("POST", "/v1/admin/reload");
  CHECK(r.status == 503);
}

TEST_CASE("control: health, readiness, metrics and the dashboard") {
  Fixture f;
  HttpResponse r = f.call("GET", "/healthz");
  CHECK(r.status == 200);
  CHECK(r.body == "ok");

  r = f.call("GET", "/readyz");
  CHECK(r.status == 200);
  CHECK(body_of(r)["ready"] == true);
  f.fleet.is_ready = false;
  r = f.call("GET", "/readyz");
  CHECK(r.status == 503);
  CHECK(body_of(r)["ready"] == false);
  CHECK(body_of(r)["because"].is_array());  // the fleet's reasons (FleetCore's are tested with it)

  r = f.call("GET", "/metrics");
  CHECK(r.status == 200);
  CHECK(r.content_type.rfind("text/plain; version=0.0.4", 0) == 0);
  CHECK(r.body.find("fleetlink_broker_connections_open") != std::string::npos);
  CHECK(r.body.find("fleetlink_broker_process_resident_memory_bytes") != std::string::npos);
  CHECK(r.body.find("fleetlink_broker_process_open_fds") != std::string::npos);

  r = f.call("GET", "/");
  CHECK(r.status == 200);
  CHECK(r.content_type.rfind("text/html", 0) == 0);
  CHECK(r.body.find("Force reconnect") != std::string::npos);
  CHECK(r.body.find("/v1/rigs") != std::string::npos);
  CHECK(r.body.find("http://") == std::string::npos);   // no external assets
  CHECK(r.body.find("https://") == std::string::npos);
}

TEST_CASE("control: unknown paths 404, wrong methods 405, events ask for a stream") {
  Fixture f;
  HttpResponse r = f.call("GET", "/v2/rigs");
  CHECK(r.status == 404);
  CHECK(body_of(r)["error"] == "not_found");
  CHECK(f.call("GET", "/v1/rigs/rig-1/nothing").status == 404);
  r = f.call("DELETE", "/v1/rigs");
  CHECK(r.status == 405);
  CHECK(body_of(r)["error"] == "method_not_allowed");
  CHECK(f.call("GET", "/v1/rigs/rig-1/commands").status == 405);
  r = f.call("GET", "/v1/events");
  CHECK(r.status == 200);
  CHECK(r.event_stream);
  CHECK(r.content_type == "text/event-stream");
}

TEST_CASE("control: bearer token guards everything but health, readiness and the page") {
  Fixture f;
  f.options.token = "s3cret";
  HttpResponse r = f.call("GET", "/v1/rigs");
  CHECK(r.status == 401);
  CHECK(body_of(r)["error"] == "unauthorized");
  // No token and a wrong one are told apart (a client says which to its user).
  CHECK(body_of(r)["reason"] == "missing_token");
  const auto www_authenticate = [](const HttpResponse& resp) {
    for (const auto& [name, value] : resp.headers)
      if (name == "WWW-Authenticate") return value;
    return std::string();
  };
  CHECK(www_authenticate(r) == "Bearer realm=\"fleetlink\"");
  HttpResponse wrong = f.call("GET", "/v1/rigs", {}, "Bearer wrong");
  CHECK(wrong.status == 401);
  CHECK(body_of(wrong)["error"] == "unauthorized");
  CHECK(body_of(wrong)["reason"] == "bad_token");
  CHECK(www_authenticate(wrong) == "Bearer realm=\"fleetlink\", error=\"invalid_token\"");
  CHECK(body_of(f.call("GET", "/v1/rigs", {}, "Bearer s3cre"))["reason"] == "bad_token");
  CHECK(body_of(f.call("GET", "/v1/rigs", {}, "Bearer "))["reason"] == "missing_token");
  CHECK(body_of(f.call("GET", "/v1/rigs", {}, "Basic s3cret"))["reason"] == "missing_token");
  CHECK(f.call("GET", "/v1/rigs", {}, "Bearer s3cret ").status == 200);
  CHECK(f.call("GET", "/v1/rigs", {}, "Bearer s3cret").status == 200);
  CHECK(f.call("GET", "/v1/rigs", {}, "bearer s3cret").status == 200);
  CHECK(f.call("GET", "/metrics").status == 401);
  CHECK(f.call("POST", "/v1/rigs/rig-1/reconnect").status == 401);
  CHECK(f.fleet.reconnected.empty());
  CHECK(f.call("GET", "/healthz").status == 200);
  CHECK(f.call("GET", "/readyz").status == 200);
  CHECK(f.call("GET", "/").status == 200);
}

TEST_CASE("control: ?wait=acked|done holds the answer until the command gets there") {
  Fixture f;
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/rigs/rig-1/commands";
  req.query = "wait=acked&timeout_ms=1500";
  req.body = R"({"kind":"dmesg"})";
  HttpResponse r = handle_control_request(req, f.fleet, f.metrics, f.options, kNow);
  CHECK(r.status == 202);
  REQUIRE(r.hold);
  CHECK(r.hold->cmd_id == "cmd-1");
  CHECK(r.hold->rig_id == "rig-1");
  CHECK(r.hold->seq == 1);
  CHECK_FALSE(r.hold->until_done);
  CHECK(r.hold->timeout_ms == 1500);

  using fleetlink::broker::FleetEvent;
  using fleetlink::broker::held_command_reached;
  CHECK_FALSE(held_command_reached(*r.hold, FleetEvent{EventType::command_acked, "rig-1", "other", "", 0}));
  CHECK(held_command_reached(*r.hold, FleetEvent{EventType::command_acked, "rig-1", "cmd-1", "", 0}));
  CHECK(held_command_reached(*r.hold, FleetEvent{EventType::command_done, "rig-1", "cmd-1", "rejected", 0}));
  auto done_hold = *r.hold;
  done_hold.until_done = true;
  CHECK_FALSE(held_command_reached(done_hold, FleetEvent{EventType::command_acked, "rig-1", "cmd-1", "", 0}));
  CHECK(held_command_reached(done_hold, FleetEvent{EventType::command_done, "rig-1", "cmd-1", "", 0}));

  // The answer shows the state the command is in now.
  CommandView c;
  c.cmd_id = "cmd-1";
  c.rig_id = "rig-1";
  c.seq = 1;
  c.state = CommandState::acked;
  f.fleet.commands["cmd-1"] = c;
  const HttpResponse answer = fleetlink::broker::held_command_answer(*r.hold, f.fleet);
  CHECK(answer.status == 202);
  CHECK(body_of(answer) ==
        json{{"cmd_id", "cmd-1"}, {"rig_id", "rig-1"}, {"seq", 1}, {"state", "acked"}});

  // Bad parameters are refused before anything is enqueued.
  req.query = "wait=forever";
  CHECK(handle_control_request(req, f.fleet, f.metrics, f.options, kNow).status == 400);
  req.query = "wait=done&timeout_ms=abc";
  CHECK(handle_control_request(req, f.fleet, f.metrics, f.options, kNow).status == 400);
  CHECK(f.fleet.enqueued.size() == 1);
  // Without wait, nothing is held.
  req.query.clear();
  CHECK_FALSE(handle_control_request(req, f.fleet, f.metrics, f.options, kNow).hold);
}

TEST_CASE("control: GET /v1/rigs filters by state, rig glob and label") {
  Fixture f;
  f.fleet.rig_map["rig-0414"] = make_rig("rig-0414");
  f.fleet.rig_map["rig-0414"].state = "unresponsive";
  f.fleet.rig_map["rig-0414"].labels = {{"lab", "a1"}};
  auto ids = [&](const std::string& query) {
    HttpRequest req;
    req.method = "GET";
    req.path = "/v1/rigs";
    req.query = query;
    const json j = body_of(handle_control_request(req, f.fleet, f.metrics, f.options, kNow));
    std::vector<std::string> out;
    for (const auto& r : j["rigs"]) out.push_back(r["rig_id"].get<std::string>());
    return out;
  };
  CHECK(ids("").size() == 3);
  CHECK(ids("state=unresponsive") == std::vector<std::string>{"rig-0414"});
  CHECK(ids("rig=rig-0*") == std::vector<std::string>{"rig-0414"});
  CHECK(ids("rig=rig-%5B12%5D") == std::vector<std::string>{"rig-1", "rig-2"});
  CHECK(ids("label=lab=b2") == std::vector<std::string>{"rig-1", "rig-2"});
  CHECK(ids("label=lab") == std::vector<std::string>{"rig-0414", "rig-1", "rig-2"});
  CHECK(ids("state=connected&label=lab=a1").empty());
}

TEST_CASE("control: POST /v1/commands/{id}/cancel -> 202 / 404 / 409") {
  Fixture f;
  CommandView running;
  running.cmd_id = "c-run";
  running.rig_id = "rig-1";
  running.state = CommandState::acked;
  f.fleet.commands["c-run"] = running;
  CommandView finished = running;
  finished.cmd_id = "c-done";
  finished.state = CommandState::succeeded;
  f.fleet.commands["c-done"] = finished;

  HttpResponse r = f.call("POST", "/v1/commands/c-run/cancel");
  CHECK(r.status == 202);
  CHECK(body_of(r) == json{{"cmd_id", "c-run"}, {"state", "acked"}, {"cancel_sent", true}});
  CHECK(f.fleet.cancelled == std::vector<std::string>{"c-run"});

  r = f.call("POST", "/v1/commands/c-done/cancel");
  CHECK(r.status == 409);
  CHECK(body_of(r)["error"] == "not_running");
  CHECK(body_of(r)["state"] == "succeeded");

  r = f.call("POST", "/v1/commands/ghost/cancel");
  CHECK(r.status == 404);
  CHECK(body_of(r)["error"] == "unknown_command");

  // A second cancel while the first is on its way.
  f.fleet.cancel_accepts = false;
  r = f.call("POST", "/v1/commands/c-run/cancel");
  CHECK(r.status == 409);
  CHECK(body_of(r)["error"] == "cancel_pending");

  r = f.call("GET", "/v1/commands/c-run/cancel");
  CHECK(r.status == 405);
  CHECK(f.fleet.cancelled.size() == 1);
}

TEST_CASE("control: GET /v1/events takes an optional list of event types") {
  Fixture f;
  HttpResponse r = f.call("GET", "/v1/events");
  CHECK(r.event_stream);
  CHECK(r.event_types == EventTypes::all());
  r = f.call("GET", "/v1/events?types=command_acked,command_running");
  CHECK(r.event_stream);
  CHECK(r.event_types == EventTypes{EventType::command_acked, EventType::command_running});
  r = f.call("GET", "/v1/events?types=command_acked,nope");
  CHECK_FALSE(r.event_stream);
  CHECK(r.status == 400);
  CHECK(body_of(r)["detail"].get<std::string>().find("'nope'") != std::string::npos);
}

