// The jobs' routes: POST /v1/jobs and POST /v1/commands, GET /v1/jobs (the
// store's history), GET /v1/jobs/{id} and its older name GET /v1/batches/{id}
// (FakeFleet, FakeJobStore, no sockets).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "control/control_json.hpp"
#include "control/job_json.hpp"
#include "control/jobs.hpp"
#include "control/routes.hpp"
#include "test_control_fake_fleet.hpp"
#include "test_control_fake_store.hpp"

using fleetlink::broker::BrokerMetrics;
using fleetlink::broker::CommandState;
using fleetlink::broker::CommandView;
using fleetlink::broker::ControlApiOptions;
using fleetlink::broker::handle_control_request;
using fleetlink::broker::HttpRequest;
using fleetlink::broker::HttpResponse;
using fleetlink::broker::JobRequest;
using fleetlink::broker::JobTable;
using fleetlink::broker::testing::FakeFleet;
using fleetlink::broker::testing::FakeJobStore;
using fleetlink::broker::testing::make_rig;
using ordered = nlohmann::ordered_json;

namespace {

constexpr std::uint64_t kNow = 1'800'000'010'000ULL;

struct Fixture {
  FakeFleet fleet;
  BrokerMetrics metrics;
  FakeJobStore store;
  JobTable jobs{&store, 8};
  ControlApiOptions options;

  Fixture() {
    fleet.rig_map["rig-1"] = make_rig("rig-1");
    fleet.rig_map["rig-2"] = make_rig("rig-2");
    options.store = &store;
    options.jobs = &jobs;
  }
  HttpResponse call(std::string method, std::string path, std::string body = {}, std::uint64_t now = kNow) {
    HttpRequest req;
    req.method = std::move(method);
    if (const auto q = path.find('?'); q != std::string::npos) {
      req.query = path.substr(q + 1);
      path.resize(q);
    }
    req.path = std::move(path);
    req.body = std::move(body);
    return settle_record(handle_control_request(req, fleet, metrics, options, now), fleet);
  }
};

ordered body_of(const HttpResponse& r) { return ordered::parse(r.body); }

std::string header(const HttpResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return {};
}

}  // namespace

TEST_CASE("jobs api: POST /v1/commands answers the job, byte for byte what the JSON library writes, with batch_id") {
  Fixture f;
  // One connected rig (dispatched), one listed id that was never seen and is not
  // ASCII (refused, its id and detail need escaping like the library does).
  HttpResponse r = f.call("POST", "/v1/commands",
                          R"({"kind":"dmesg","args":{"lines":"5"},"targets":{"ids":["rig-1","rig-\u00e9\"q"]}})");
  REQUIRE(r.status == 202);
  const ordered j = body_of(r);
  CHECK(fleetlink::broker::dump_json(j) == r.body);  // byte for byte, key order included
  const std::string id = j["job_id"].get<std::string>();
  CHECK(j["batch_id"] == id);
  CHECK(header(r, "Location") == "/v1/jobs/" + id);
  REQUIRE(j["rigs"].size() == 2);
  CHECK(j["counts"]["total"] == 2);
  CHECK(j["counts"]["dispatched"] == 1);
  CHECK(j["counts"]["refused"] == 1);
  CHECK(j["counts"]["silent"] == 0);
  CHECK(j["state"] == "running");
  CHECK(j["deadline_s"] == 370);
  CHECK(j["rigs"][0]["rig_id"] == "rig-1");
  CHECK(j["rigs"][0]["error"].is_null());
  CHECK(j["rigs"][1]["rig_id"] == "rig-\u00e9\"q");
  CHECK(j["rigs"][1]["cmd_id"].is_null());
  CHECK(j["rigs"][1]["state"].is_null());
  CHECK(j["rigs"][1]["error"] == "unknown_rig");
  // The record comes first: the job is in the store, and persisted with its commands.
  CHECK(f.store.jobs.count(id) == 1);
  CHECK(f.fleet.persisted == 1);
  // The command's state as the fleet knows it.
  const std::string cmd_id = j["rigs"][0]["cmd_id"].get<std::string>();
  CommandView v;
  v.cmd_id = cmd_id;
  v.state = CommandState::acked;
  f.fleet.commands[cmd_id] = v;
  const HttpResponse again = f.call("GET", "/v1/batches/" + id);
  REQUIRE(again.status == 200);
  const ordered k = body_of(again);
  CHECK(fleetlink::broker::dump_json(k) == again.body);
  CHECK(k["batch_id"] == id);
  CHECK(k["rigs"][0]["state"] == "acked");
  const ordered as_job = body_of(f.call("GET", "/v1/jobs/" + id));
  CHECK_FALSE(as_job.contains("batch_id"));
  CHECK(as_job["job_id"] == id);
  CHECK(as_job["rigs"][0]["state"] == "acked");
}

TEST_CASE("jobs api: ?rigs=false answers a job without its rig list") {
  Fixture f;
  const std::string body = R"({"kind":"dmesg","targets":{"glob":"rig-*"}})";
  HttpResponse r = f.call("POST", "/v1/commands?rigs=false", body);
  REQUIRE(r.status == 202);
  const ordered j = body_of(r);
  CHECK_FALSE(j.contains("rigs"));
  CHECK(j["counts"]["total"] == 2);
  CHECK(j["counts"]["dispatched"] == 2);
  const std::string id = j["job_id"].get<std::string>();
  CHECK(body_of(f.call("GET", "/v1/batches/" + id))["rigs"].size() == 2);
  CHECK_FALSE(body_of(f.call("GET", "/v1/jobs/" + id + "?rigs=false")).contains("rigs"));
  CHECK(f.call("GET", "/v1/jobs/" + id + "?rigs=maybe").status == 400);
  CHECK(f.call("POST", "/v1/jobs?rigs=1", body).status == 400);
}

TEST_CASE("jobs api: POST /v1/jobs takes shares, a deadline and the per-command fields") {
  Fixture f;
  for (int i = 3; i <= 8; ++i) f.fleet.rig_map["rig-" + std::to_string(i)] = make_rig("rig-" + std::to_string(i));
  HttpResponse r = f.call("POST", "/v1/jobs",
                          R"({"kind":"suite","args":{"suite":"7"},"targets":{"glob":"rig-*"},"max_concurrency":"25%",)"
                          R"("max_errors":"50%","deadline_s":120,"deliver_within_s":30,"timeout_s":60,"hold":false})");
  REQUIRE(r.status == 202);
  const ordered j = body_of(r);
  CHECK_FALSE(j.contains("batch_id"));
  CHECK(j["counts"]["total"] == 8);
  CHECK(j["counts"]["dispatched"] == 2);
  CHECK(j["counts"]["pending"] == 6);
  CHECK(j["max_concurrency"] == 2);
  CHECK(j["max_concurrency_given"] == "25%");
  CHECK(j["max_errors"] == 4);
  CHECK(j["max_errors_given"] == "50%");
  CHECK(j["deadline_s"] == 120);
  CHECK(j["deadline_at"] == fleetlink::broker::iso8601_utc_ms(kNow + 120'000));
  CHECK(j["deliver_within_s"] == 30);
  CHECK(j["timeout_s"] == 60);
  CHECK(j["targets"]["glob"] == "rig-*");
  REQUIRE(f.fleet.requests.size() == 2);
  CHECK(f.fleet.requests[0].deliver_within_s == 30u);
  CHECK(f.fleet.requests[0].timeout_s == 60u);
  CHECK(f.fleet.requests[0].job_id == j["job_id"]);

  r = f.call("POST", "/v1/jobs", R"({"kind":"dmesg","targets":{"ids":["rig-1"]},"max_errors":3})");
  REQUIRE(r.status == 202);
  CHECK(body_of(r)["max_errors"] == 3);
  CHECK(body_of(r)["max_errors_given"] == 3);
}

TEST_CASE("jobs api: malformed requests are refused before anything is sent") {
  Fixture f;
  auto status_of = [&](const std::string& extra) {
    return f.call("POST", "/v1/jobs", R"({"kind":"dmesg","targets":{"glob":"rig-*"})" + extra + "}").status;
  };
  CHECK(status_of("") == 202);
  for (const char* bad : {R"(,"max_errors":"abc")", R"(,"max_errors":"150%")", R"(,"max_errors":-1)",
                          R"(,"max_errors":true)", R"(,"max_concurrency":"0%")", R"(,"max_concurrency":1.5)",
                          R"(,"deadline_s":0)", R"(,"deadline_s":604801)", R"(,"deadline_s":"60")",
                          R"(,"timeout_s":0)", R"(,"deliver_within_s":604801)", R"(,"cmd_id":"x")",
                          R"(,"idempotency_key":"k")", R"(,"hold":"yes")"}) {
    CAPTURE(bad);
    CHECK(status_of(bad) == 400);
  }
  CHECK(status_of(R"(,"deadline_s":604800,"max_errors":"0%","max_concurrency":0)") == 202);
  CHECK(f.call("POST", "/v1/jobs", R"({"targets":{"glob":"*"}})").status == 400);
  CHECK(f.call("POST", "/v1/jobs", R"({"kind":"dmesg"})").status == 400);
  CHECK(f.call("POST", "/v1/jobs", R"({"kind":"dmesg","targets":{}})").status == 400);
  const HttpResponse none = f.call("POST", "/v1/jobs", R"({"kind":"dmesg","targets":{"glob":"nothing-*"}})");
  CHECK(none.status == 422);
  CHECK(body_of(none)["error"] == "no_matching_rigs");
  CHECK(f.fleet.requests.size() == 4);  // the two accepted jobs' two rigs
}

TEST_CASE("jobs api: draining, no store, no table") {
  Fixture f;
  const std::string body = R"({"kind":"dmesg","targets":{"glob":"rig-*"}})";
  f.fleet.persist_fails = true;
  HttpResponse r = f.call("POST", "/v1/jobs", body);
  CHECK(r.status == 503);
  CHECK(body_of(r)["error"] == "store_unavailable");
  CHECK(body_of(r).contains("job_id"));
  f.fleet.persist_fails = false;
  f.fleet.drain_window = std::chrono::milliseconds(1000);
  r = f.call("POST", "/v1/jobs", body);
  CHECK(r.status == 503);
  CHECK(body_of(r)["error"] == "draining");
  CHECK(header(r, "Retry-After") == "5");
  f.options.jobs = nullptr;
  CHECK(f.call("POST", "/v1/commands", body).status == 503);
  CHECK(f.call("GET", "/v1/jobs/nope").status == 404);
}

TEST_CASE("jobs api: GET /v1/jobs lists the store's history newest first, running jobs as memory has them") {
  Fixture f;
  const std::string to_rig1 = R"({"kind":"dmesg","targets":{"ids":["rig-1"]}})";
  const std::string id1 =
      body_of(f.call("POST", "/v1/jobs", R"({"kind":"dmesg","targets":{"glob":"rig-*"}})", kNow))["job_id"];
  const std::string id2 = body_of(f.call("POST", "/v1/jobs", R"({"kind":"dmesg","targets":{"ids":["gone"]}})", kNow + 1000))["job_id"];
  const std::string id3 = body_of(f.call("POST", "/v1/jobs", to_rig1, kNow + 2000))["job_id"];
  REQUIRE(id1 < id2);
  REQUIRE(id2 < id3);
  // One of id1's rigs succeeds: memory knows it, the store's record (written at the start) does not yet.
  const fleetlink::broker::Job* job1 = f.jobs.find(id1);
  REQUIRE(job1 != nullptr);
  const std::string cmd1 = job1->rigs[0].cmd_id;
  f.fleet.commands[cmd1].cmd_id = cmd1;
  f.fleet.commands[cmd1].state = CommandState::succeeded;
  CHECK(f.jobs.command_finished(f.fleet, cmd1, kNow + 2700));
  REQUIRE(fleetlink::broker::job_from_record(f.store.jobs.at(id1), false)->count(
              fleetlink::broker::JobRigOutcome::ok) == 0);

  ordered list = body_of(f.call("GET", "/v1/jobs"));
  REQUIRE(list["jobs"].size() == 3);
  CHECK(list["jobs"][0]["job_id"] == id3);
  CHECK(list["jobs"][1]["job_id"] == id2);
  CHECK(list["jobs"][2]["job_id"] == id1);
  CHECK(list["jobs"][0]["state"] == "running");
  CHECK(list["jobs"][1]["state"] == "done");
  CHECK(list["jobs"][2]["state"] == "running");
  CHECK(list["jobs"][2]["counts"]["ok"] == 1);
  CHECK_FALSE(list["jobs"][0].contains("rigs"));
  CHECK(list["next_before"].is_null());

  list = body_of(f.call("GET", "/v1/jobs?state=running"));
  REQUIRE(list["jobs"].size() == 2);
  CHECK(list["jobs"][0]["job_id"] == id3);
  CHECK(list["jobs"][1]["job_id"] == id1);
  list = body_of(f.call("GET", "/v1/jobs?state=running&limit=1"));
  REQUIRE(list["jobs"].size() == 1);
  CHECK(list["jobs"][0]["job_id"] == id3);
  CHECK(list["next_before"] == id3);
  list = body_of(f.call("GET", "/v1/jobs?state=running&limit=1&before=" + id3));
  REQUIRE(list["jobs"].size() == 1);
  CHECK(list["jobs"][0]["job_id"] == id1);
  list = body_of(f.call("GET", "/v1/jobs?state=done"));
  REQUIRE(list["jobs"].size() == 1);
  CHECK(list["jobs"][0]["job_id"] == id2);
  CHECK(body_of(f.call("GET", "/v1/jobs?state=expired"))["jobs"].empty());
  list = body_of(f.call("GET", "/v1/jobs?since=" + std::to_string(kNow + 1000)));
  CHECK(list["jobs"].size() == 2);
  CHECK(f.call("GET", "/v1/jobs?state=nope").status == 400);
  CHECK(f.call("GET", "/v1/jobs?limit=0").status == 400);
  CHECK(f.call("GET", "/v1/jobs?limit=1001").status == 400);
  CHECK(f.call("GET", "/v1/jobs?since=yesterday").status == 400);
}

TEST_CASE("jobs api: a job no longer in memory is read from the store") {
  Fixture f;
  f.jobs.set_store(&f.store, 1);
  const std::string body = R"({"kind":"dmesg","targets":{"ids":["gone"]}})";
  const std::string old_id = body_of(f.call("POST", "/v1/jobs", body))["job_id"];
  f.call("POST", "/v1/jobs", body);
  REQUIRE(f.jobs.find(old_id) == nullptr);
  HttpResponse r = f.call("GET", "/v1/jobs/" + old_id);
  REQUIRE(r.status == 200);
  ordered j = body_of(r);
  CHECK(j["job_id"] == old_id);
  CHECK(j["state"] == "done");
  CHECK(j["rigs"][0]["error"] == "unknown_rig");
  CHECK(fleetlink::broker::dump_json(j) == r.body);
  CHECK(body_of(f.call("GET", "/v1/batches/" + old_id + "?rigs=false"))["batch_id"] == old_id);
  r = f.call("GET", "/v1/jobs/nope");
  CHECK(r.status == 404);
  CHECK(body_of(r)["error"] == "unknown_job");
  r = f.call("GET", "/v1/batches/nope");
  CHECK(r.status == 404);
  CHECK(body_of(r)["error"] == "unknown_batch");
  f.store.jobs[old_id].body = "garbage";
  CHECK(f.call("GET", "/v1/jobs/" + old_id).status == 500);
  CHECK(body_of(f.call("GET", "/v1/jobs"))["jobs"].size() == 1);  // a broken record is left out of a listing
}

TEST_CASE("jobs api: without a durable store the history is what memory holds") {
  Fixture f;
  f.store.is_durable = false;
  const std::string body = R"({"kind":"dmesg","targets":{"ids":["rig-1"]}})";
  const std::string a = body_of(f.call("POST", "/v1/jobs", body))["job_id"];
  const std::string b = body_of(f.call("POST", "/v1/jobs", body))["job_id"];
  ordered list = body_of(f.call("GET", "/v1/jobs"));
  REQUIRE(list["jobs"].size() == 2);
  CHECK(list["jobs"][0]["job_id"] == b);
  list = body_of(f.call("GET", "/v1/jobs?limit=1"));
  CHECK(list["next_before"] == b);
  list = body_of(f.call("GET", "/v1/jobs?before=" + b));
  REQUIRE(list["jobs"].size() == 1);
  CHECK(list["jobs"][0]["job_id"] == a);
}

TEST_CASE("jobs api: POST /v1/jobs?dry_run=true answers the selection and creates nothing") {
  Fixture f;
  f.fleet.rig_map["rig-2"].state = "offline";
  HttpResponse r = f.call("POST", "/v1/jobs?dry_run=true",
                          R"({"kind":"dmesg","targets":{"ids":["rig-2","rig-1","rig-9"]},"max_concurrency":"50%"})");
  REQUIRE(r.status == 200);
  const ordered j = body_of(r);
  CHECK(j["dry_run"] == true);
  CHECK(j["kind"] == "dmesg");
  CHECK(j["count"] == 3);
  CHECK(j["max_concurrency"] == 1);
  CHECK(j["max_errors"].is_null());
  CHECK(j["deadline_s"].is_number_unsigned());
  REQUIRE(j["rigs"].size() == 3);
  CHECK(j["rigs"][0] == ordered{{"rig_id", "rig-1"}, {"state", "connected"}});
  CHECK(j["rigs"][1] == ordered{{"rig_id", "rig-2"}, {"state", "offline"}});
  CHECK(j["rigs"][2] == ordered{{"rig_id", "rig-9"}, {"state", "unknown"}});
  CHECK_FALSE(j.contains("job_id"));
  // Nothing sent, recorded, or persisted.
  CHECK(f.fleet.enqueued.empty());
  CHECK(f.store.jobs.empty());
  CHECK(f.fleet.persisted == 0);
  CHECK(f.jobs.running() == 0);
  // No match: an empty selection (a real POST would answer 422); malformed requests still refused.
  const ordered none = body_of(f.call("POST", "/v1/jobs?dry_run=true", R"({"kind":"dmesg","targets":{"glob":"x*"}})"));
  CHECK(none["count"] == 0);
  CHECK(f.call("POST", "/v1/jobs?dry_run=true", R"({"kind":"dmesg"})").status == 400);
  CHECK(f.call("POST", "/v1/jobs?dry_run=maybe", R"({"kind":"dmesg","targets":{"glob":"*"}})").status == 400);
  // dry_run=false is a real job.
  CHECK(f.call("POST", "/v1/jobs?dry_run=false", R"({"kind":"dmesg","targets":{"glob":"*"}})").status == 202);
  CHECK(f.fleet.enqueued.size() == 2);
}

TEST_CASE("jobs api: POST /v1/jobs/{id}/cancel: 202 with the job, 404 unknown, 409 finished or elsewhere") {
  Fixture f;
  const ordered created =
      body_of(f.call("POST", "/v1/jobs", R"({"kind":"dmesg","targets":{"glob":"rig-*"},"max_concurrency":1})"));
  const std::string id = created["job_id"];
  const std::string cmd = created["rigs"][0]["cmd_id"];
  f.fleet.commands[cmd].cmd_id = cmd;
  f.fleet.commands[cmd].state = CommandState::running;
  const std::size_t persisted = f.fleet.persisted;
  HttpResponse r = f.call("POST", "/v1/jobs/" + id + "/cancel");
  REQUIRE(r.status == 202);
  ordered j = body_of(r);
  CHECK(fleetlink::broker::dump_json(j) == r.body);
  CHECK(j["job_id"] == id);
  CHECK(j["state"] == "running");  // its command is being cancelled
  CHECK(j["cancelled_at"].is_string());
  CHECK(j["rigs"][1]["outcome"] == "skipped");
  CHECK(j["rigs"][0]["state"] == "running");
  CHECK(f.fleet.cancelled == std::vector<std::string>{cmd});
  CHECK(f.fleet.persisted == persisted + 1);
  // Asked again while its command is ending: 409 cancel_pending, nothing cancelled again.
  r = f.call("POST", "/v1/jobs/" + id + "/cancel");
  CHECK(r.status == 409);
  CHECK(body_of(r)["error"] == "cancel_pending");
  CHECK(body_of(r)["state"] == "running");
  CHECK(body_of(r)["cancelled_at"] == j["cancelled_at"]);
  CHECK(f.fleet.cancelled == std::vector<std::string>{cmd});
  f.fleet.commands[cmd].state = CommandState::cancelled;
  f.jobs.command_finished(f.fleet, cmd, kNow + 1);
  CHECK(body_of(f.call("GET", "/v1/jobs/" + id))["state"] == "cancelled");
  CHECK(body_of(f.call("GET", "/v1/jobs?state=cancelled"))["jobs"].size() == 1);
  r = f.call("POST", "/v1/jobs/" + id + "/cancel");
  CHECK(r.status == 409);
  CHECK(body_of(r)["error"] == "not_running");
  CHECK(body_of(r)["state"] == "cancelled");
  r = f.call("POST", "/v1/jobs/01900000-0000-7000-8000-000000000000/cancel");
  CHECK(r.status == 404);
  CHECK(body_of(r)["error"] == "unknown_job");
  CHECK(f.call("GET", "/v1/jobs/" + id + "/cancel").status == 405);

  // Not in this broker's table, and the store says it runs: another broker drives it.
  fleetlink::broker::JobRecord elsewhere = f.store.jobs.at(id);
  elsewhere.job_id = "job-other";
  elsewhere.finished = false;
  f.store.jobs["job-other"] = elsewhere;
  r = f.call("POST", "/v1/jobs/job-other/cancel");
  CHECK(r.status == 409);
  CHECK(body_of(r)["error"] == "job_elsewhere");
  CHECK(body_of(r)["detail"].get<std::string>().find("another broker") != std::string::npos);
  // Finished, and no longer in memory: the store says so.
  fleetlink::broker::JobRecord done = elsewhere;
  done.job_id = "job-old";
  done.finished = true;
  f.store.jobs["job-old"] = done;
  r = f.call("POST", "/v1/jobs/job-old/cancel");
  CHECK(r.status == 409);
  CHECK(body_of(r)["error"] == "not_running");
}
