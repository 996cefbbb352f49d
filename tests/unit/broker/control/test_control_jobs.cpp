// Fan-out jobs: target selection, concurrency, max_errors (numbers and shares),
// every rig outcome, the deadline, the record and a job resumed from it
// (pure, FakeFleet and FakeJobStore); cancel, exit codes and first lines, a dry
// run's preview, and a version-1 record.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "control/job_json.hpp"
#include "control/jobs.hpp"
#include "test_control_fake_fleet.hpp"
#include "test_control_fake_store.hpp"

using fleetlink::broker::CommandState;
using fleetlink::broker::CommandView;
using fleetlink::broker::default_job_deadline_s;
using fleetlink::broker::EnqueueError;
using fleetlink::broker::EnqueueFailure;
using fleetlink::broker::Job;
using fleetlink::broker::job_from_record;
using fleetlink::broker::job_json_text;
using fleetlink::broker::job_record;
using fleetlink::broker::JobRecord;
using fleetlink::broker::JobCancel;
using fleetlink::broker::JobRequest;
using fleetlink::broker::JobRigOutcome;
using fleetlink::broker::JobState;
using fleetlink::broker::JobTable;
using fleetlink::broker::JobTargets;
using fleetlink::broker::kJobReconcileIntervalMs;
using fleetlink::broker::kJobSaveIntervalMs;
using fleetlink::broker::kMaxJobDeadlineS;
using fleetlink::broker::parse_rig_share;
using fleetlink::broker::RigShare;
using fleetlink::broker::testing::FakeFleet;
using fleetlink::broker::testing::FakeJobStore;
using fleetlink::broker::testing::make_rig;

namespace {

constexpr std::uint64_t kT0 = 1'800'000'000'000ULL;

FakeFleet fleet_of(std::initializer_list<std::pair<const char*, const char*>> rigs) {
  FakeFleet f;
  for (const auto& [id, lab] : rigs) {
    auto r = make_rig(id);
    r.labels = {{"lab", lab}};
    f.rig_map[id] = r;
  }
  return f;
}

// The fleet's record of cmd_id is now in `state` (final or not).
void set_state(FakeFleet& f, const std::string& cmd_id, CommandState state, std::string detail = {}) {
  CommandView& v = f.commands[cmd_id];
  v.cmd_id = cmd_id;
  v.state = state;
  v.detail = std::move(detail);
}

std::vector<JobRigOutcome> outcomes(const Job& j) {
  std::vector<JobRigOutcome> out;
  for (const auto& r : j.rigs) out.push_back(r.outcome);
  return out;
}

JobRequest request(const char* kind) {
  JobRequest r;
  r.kind = kind;
  return r;
}

RigShare share(const char* text) {
  const auto s = parse_rig_share(text);
  REQUIRE(s.has_value());
  return *s;
}

using O = JobRigOutcome;

}  // namespace

TEST_CASE("jobs: select by ids, glob and labels (all must match)") {
  FakeFleet f = fleet_of({{"rig-0401", "b2"}, {"rig-0402", "b3"}, {"rig-0500", "b2"}});
  JobTargets t;
  t.glob = "rig-04*";
  CHECK(JobTable::select(f, t) == std::vector<std::string>{"rig-0401", "rig-0402"});
  t.labels = {{"lab", "b2"}};
  CHECK(JobTable::select(f, t) == std::vector<std::string>{"rig-0401"});
  JobTargets ids;
  ids.ids = {"rig-0500", "gone", "rig-0500"};
  CHECK(JobTable::select(f, ids) == std::vector<std::string>{"gone", "rig-0500"});
  CHECK(JobTable::select(f, JobTargets{}).empty());
}

TEST_CASE("jobs: max_concurrency sends the next rig as each command finishes") {
  FakeFleet f = fleet_of({{"a", "x"}, {"b", "x"}, {"c", "x"}});
  JobTable table;
  JobRequest req = request("dmesg");
  req.max_concurrency = RigShare{2, 0, false};
  const Job& j = table.start(f, req, {"a", "b", "c"}, "job-1", kT0);
  CHECK(outcomes(j) == std::vector{O::dispatched, O::dispatched, O::pending});
  CHECK(table.running() == 1);
  set_state(f, j.rigs[0].cmd_id, CommandState::succeeded);
  CHECK(table.command_finished(f, j.rigs[0].cmd_id, kT0 + 1));
  CHECK(outcomes(j) == std::vector{O::ok, O::dispatched, O::dispatched});
  CHECK_FALSE(table.command_finished(f, "not-a-job-command", kT0 + 1));
  set_state(f, j.rigs[1].cmd_id, CommandState::succeeded);
  set_state(f, j.rigs[2].cmd_id, CommandState::succeeded);
  table.command_finished(f, j.rigs[1].cmd_id, kT0 + 2);
  CHECK(j.state() == JobState::running);
  table.command_finished(f, j.rigs[2].cmd_id, kT0 + 3);
  CHECK(j.finished());
  CHECK(j.state() == JobState::done);
  CHECK(j.finished_at_ms == kT0 + 3);
  CHECK(j.count(O::ok) == 3);
  CHECK(table.running() == 0);
  CHECK(table.find("job-1") == &j);
}

TEST_CASE("jobs: every rig's command carries the job's per-command fields") {
  FakeFleet f = fleet_of({{"a", "x"}, {"b", "x"}});
  JobTable table;
  JobRequest req = request("suite");
  req.args = {{"suite", "7"}};
  req.deliver_within_s = 30;
  req.timeout_s = 90;
  req.hold = true;
  table.start(f, req, {"a", "b", "never-seen"}, "job-f", kT0);
  REQUIRE(f.requests.size() == 3);
  for (const auto& r : f.requests) {
    CHECK(r.kind == "suite");
    CHECK(r.args.at("suite") == "7");
    CHECK(r.deliver_within_s == 30u);
    CHECK(r.timeout_s == 90u);
    CHECK(r.hold);
    CHECK(r.job_id == "job-f");
    CHECK(r.cmd_id.empty());
  }
  CHECK(f.requests[2].rig_id == "never-seen");  // held (the fake accepts it with "hold")
}

TEST_CASE("jobs: refusals and failures count as errors; over max_errors the rest is skipped") {
  FakeFleet f = fleet_of({{"a", "x"}, {"c", "x"}, {"d", "x"}});
  JobTable table;
  JobRequest req = request("suite");
  req.max_concurrency = RigShare{1, 0, false};
  req.max_errors = RigShare{1, 0, false};
  const Job& j = table.start(f, req, {"a", "b-gone", "c", "d"}, "job-2", kT0);
  CHECK(outcomes(j) == std::vector{O::dispatched, O::pending, O::pending, O::pending});
  set_state(f, j.rigs[0].cmd_id, CommandState::failed, "exit 3");
  table.command_finished(f, j.rigs[0].cmd_id, kT0 + 1);
  // a failed (1 error, allowed); b-gone refused (2 > 1): stop; c, d skipped.
  CHECK(outcomes(j) == std::vector{O::failed, O::refused, O::skipped, O::skipped});
  CHECK(j.rigs[0].error == "failed");
  CHECK(j.rigs[0].detail == "exit 3");
  CHECK(j.rigs[1].error == "unknown_rig");
  CHECK(j.rigs[2].detail.find("stopped after 2 errors (max_errors 1)") != std::string::npos);
  CHECK(j.stopped);
  CHECK(j.errors() == 2);
  CHECK(j.state() == JobState::stopped);
  CHECK(table.running() == 0);
}

TEST_CASE("jobs: a failed rig shows its command's final state and why") {
  FakeFleet f = fleet_of({{"r1", "x"}, {"r2", "x"}, {"r3", "x"}, {"r4", "x"}, {"r5", "x"}, {"r6", "x"}, {"r7", "x"},
                          {"r8", "x"}});
  JobTable table;
  const Job& j = table.start(f, request("dmesg"), {"r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8"}, "job-o", kT0);
  const CommandState finals[] = {CommandState::succeeded,     CommandState::failed,   CommandState::timed_out,
                                 CommandState::cancelled,     CommandState::interrupted,
                                 CommandState::undeliverable, CommandState::rejected};
  for (std::size_t i = 0; i < std::size(finals); ++i) set_state(f, j.rigs[i].cmd_id, finals[i], "why " + std::to_string(i));
  // r7: a NACK without a detail of the fleet's own; r8: gone from the history.
  f.commands[j.rigs[6].cmd_id].detail.clear();
  f.commands[j.rigs[6].cmd_id].nack = fleetlink::msg::Nack{1, j.rigs[6].cmd_id, fleetlink::msg::NackReason::busy, "no room", 0};
  for (std::size_t i = 0; i < 8; ++i) table.command_finished(f, j.rigs[i].cmd_id, kT0 + 1);
  CHECK(j.rigs[0].outcome == O::ok);
  CHECK(j.rigs[0].state == CommandState::succeeded);
  const char* errors[] = {"failed", "timed_out", "cancelled", "interrupted", "undeliverable", "rejected"};
  for (std::size_t i = 1; i < 7; ++i) {
    CAPTURE(i);
    CHECK(j.rigs[i].outcome == O::failed);
    CHECK(j.rigs[i].error == errors[i - 1]);
    CHECK(j.rigs[i].state == finals[i]);
  }
  CHECK(j.rigs[1].detail == "why 1");
  CHECK(j.rigs[6].detail == "busy: no room");
  CHECK(j.rigs[7].outcome == O::failed);
  CHECK(j.rigs[7].error == "unknown");
  CHECK(j.count(O::failed) == 7);
  CHECK(j.state() == JobState::done);  // no max_errors: every rig was tried
}

TEST_CASE("jobs: the deadline ends the job: silent rigs, skipped ones, the unacknowledged cancelled") {
  FakeFleet f = fleet_of({{"a", "x"}, {"b", "x"}, {"c", "x"}, {"d", "x"}, {"e", "x"}, {"f", "x"}});
  JobTable table;
  JobRequest req = request("suite");
  req.max_concurrency = RigShare{5, 0, false};
  req.deadline_s = 60;
  const Job& j = table.start(f, req, {"a", "b", "c", "d", "e", "f"}, "job-d", kT0);
  CHECK(j.deadline_at_ms == kT0 + 60'000);
  set_state(f, j.rigs[0].cmd_id, CommandState::succeeded);
  table.command_finished(f, j.rigs[0].cmd_id, kT0 + 1000);  // f is sent now
  set_state(f, j.rigs[1].cmd_id, CommandState::sent);
  set_state(f, j.rigs[2].cmd_id, CommandState::queued);     // held for an offline rig
  set_state(f, j.rigs[3].cmd_id, CommandState::acked);
  set_state(f, j.rigs[4].cmd_id, CommandState::running);
  set_state(f, j.rigs[5].cmd_id, CommandState::failed);     // its event has not arrived yet
  table.tick(f, kT0 + 59'999);
  CHECK(j.state() == JobState::running);
  table.tick(f, kT0 + 60'000);
  CHECK(j.state() == JobState::expired);
  CHECK(j.expired);
  CHECK(outcomes(j) == std::vector{O::ok, O::silent, O::silent, O::silent, O::silent, O::failed});
  CHECK(j.rigs[1].error == "never_acknowledged");
  CHECK(j.rigs[1].state == CommandState::sent);
  CHECK(j.rigs[2].error == "never_acknowledged");
  CHECK(j.rigs[3].error == "never_answered");
  CHECK(j.rigs[3].state == CommandState::acked);
  CHECK(j.rigs[4].error == "never_answered");
  CHECK(j.rigs[5].error == "failed");
  // Only the commands never acknowledged are withdrawn: they must not run after the job reported them.
  CHECK(f.cancelled == std::vector<std::string>{j.rigs[1].cmd_id, j.rigs[2].cmd_id});
  CHECK(j.count(O::silent) == 4);
  CHECK(j.errors() == 5);
  CHECK(table.running() == 0);
  // A late event for a silent rig changes nothing.
  set_state(f, j.rigs[3].cmd_id, CommandState::succeeded);
  CHECK_FALSE(table.command_finished(f, j.rigs[3].cmd_id, kT0 + 61'000));
  CHECK(j.rigs[3].outcome == O::silent);
}

TEST_CASE("jobs: rigs still pending at the deadline are skipped") {
  FakeFleet f = fleet_of({{"a", "x"}, {"b", "x"}, {"c", "x"}});
  JobTable table;
  JobRequest req = request("dmesg");
  req.max_concurrency = RigShare{1, 0, false};
  req.deadline_s = 5;
  const Job& j = table.start(f, req, {"a", "b", "c"}, "job-p", kT0);
  set_state(f, j.rigs[0].cmd_id, CommandState::running);
  table.tick(f, kT0 + 5000);
  CHECK(outcomes(j) == std::vector{O::silent, O::skipped, O::skipped});
  CHECK(j.rigs[1].detail.find("deadline") != std::string::npos);
  CHECK(j.state() == JobState::expired);
  CHECK(f.enqueued.size() == 1);
}

TEST_CASE("jobs: the default deadline is the longest its commands can take") {
  JobRequest dmesg = request("dmesg");  // deliver_within_s 300, timeout_s 60
  CHECK(default_job_deadline_s(dmesg, 100) == 300 + 60 + 10);
  dmesg.deliver_within_s = 20;
  dmesg.timeout_s = 5;
  CHECK(default_job_deadline_s(dmesg, 100) == 35);
  // Waves: 10 rigs, 3 at a time, 4 waves.
  dmesg.max_concurrency = RigShare{3, 0, false};
  CHECK(default_job_deadline_s(dmesg, 10) == 4 * 25 + 10);
  dmesg.max_concurrency = share("50%");
  CHECK(default_job_deadline_s(dmesg, 10) == 2 * 25 + 10);
  dmesg.max_concurrency = RigShare{0, 0, false};  // all at once
  CHECK(default_job_deadline_s(dmesg, 10) == 35);
  JobRequest suite = request("suite");  // 600 + 86400
  suite.max_concurrency = RigShare{1, 0, false};
  CHECK(default_job_deadline_s(suite, 50) == kMaxJobDeadlineS);

  FakeFleet f = fleet_of({{"a", "x"}});
  JobTable table;
  const Job& j = table.start(f, request("dmesg"), {"a"}, "job-dd", kT0);
  CHECK(j.deadline_s == 370);
  CHECK(j.deadline_at_ms == kT0 + 370'000);
}

TEST_CASE("jobs: shares: a number or a percentage of the job's rigs, rounded down") {
  CHECK(parse_rig_share("3") == RigShare{3, 0, false});
  CHECK(parse_rig_share("10%") == RigShare{0, 1000, true});
  CHECK(parse_rig_share("12.5%") == RigShare{0, 1250, true});
  CHECK(parse_rig_share("0.25%") == RigShare{0, 25, true});
  CHECK(parse_rig_share("100%") == RigShare{0, 10000, true});
  for (const char* bad : {"", "%", "-1", "10.%", "1.234%", "100.5%", "101%", "3x", "x%", "1e3", " 3", "2000000"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_rig_share(bad).has_value());
  }
  CHECK(share("10%").of(29) == 2);
  CHECK(share("10%").of(30) == 3);
  CHECK(share("12.5%").of(8) == 1);
  CHECK(share("3").of(2) == 3);
  CHECK(share("12.5%").text() == "12.5%");
  CHECK(share("0.25%").text() == "0.25%");
  CHECK(share("50%").text() == "50%");

  // max_errors "50%" of 4 rigs is 2: the third failure stops the job.
  FakeFleet f = fleet_of({{"a", "x"}, {"b", "x"}, {"c", "x"}, {"d", "x"}});
  JobTable table;
  JobRequest req = request("suite");
  req.max_concurrency = share("25%");  // one at a time
  req.max_errors = share("50%");
  const Job& j = table.start(f, req, {"a", "b", "c", "d"}, "job-s", kT0);
  CHECK(j.max_concurrency == 1);
  CHECK(j.max_errors == 2u);
  for (std::size_t i = 0; i < 3; ++i) {
    set_state(f, j.rigs[i].cmd_id, CommandState::failed);
    table.command_finished(f, j.rigs[i].cmd_id, kT0 + i);
  }
  CHECK(outcomes(j) == std::vector{O::failed, O::failed, O::failed, O::skipped});
  CHECK(j.state() == JobState::stopped);

  // A percentage of concurrency is at least one rig; of errors it may be none.
  JobTable t2;
  JobRequest tiny = request("dmesg");
  tiny.max_concurrency = share("1%");
  tiny.max_errors = share("1%");
  const Job& k = t2.start(f, tiny, {"a", "b", "c"}, "job-t", kT0);
  CHECK(k.max_concurrency == 1);
  CHECK(k.max_errors == 0u);
}

TEST_CASE("jobs: the record: written at the start, at most every few seconds while it changes, and at the end") {
  FakeFleet f = fleet_of({{"a", "x"}, {"b", "x"}, {"c", "x"}});
  f.record_enqueued = true;
  FakeJobStore store;
  JobTable table(&store, 4);
  const Job& j = table.start(f, request("dmesg"), {"a", "b", "c"}, "job-r", kT0);
  REQUIRE(store.puts.size() == 1);
  CHECK_FALSE(store.puts[0].finished);
  CHECK(store.puts[0].created_at_ms == kT0);
  set_state(f, j.rigs[0].cmd_id, CommandState::succeeded);
  table.command_finished(f, j.rigs[0].cmd_id, kT0 + 100);
  CHECK(store.puts.size() == 1);  // not on every rig's outcome
  table.tick(f, kT0 + kJobSaveIntervalMs - 1);
  CHECK(store.puts.size() == 1);
  table.tick(f, kT0 + kJobSaveIntervalMs);
  CHECK(store.puts.size() == 2);
  table.tick(f, kT0 + 2 * kJobSaveIntervalMs);
  CHECK(store.puts.size() == 2);  // nothing changed since
  set_state(f, j.rigs[1].cmd_id, CommandState::succeeded);
  set_state(f, j.rigs[2].cmd_id, CommandState::failed);
  table.command_finished(f, j.rigs[1].cmd_id, kT0 + 20'000);
  table.command_finished(f, j.rigs[2].cmd_id, kT0 + 20'001);
  REQUIRE(store.puts.size() == 3);  // the end, at once
  CHECK(store.puts[2].finished);
  const auto back = job_from_record(store.puts[2], true);
  REQUIRE(back);
  CHECK(back->state() == JobState::done);
  CHECK(back->finished_at_ms == kT0 + 20'001);
  CHECK(outcomes(*back) == std::vector{O::ok, O::ok, O::failed});
  CHECK(back->rigs[2].state == CommandState::failed);
}

TEST_CASE("jobs: a large job hands its commands to the store in chunks as it makes them, its own record first") {
  FakeFleet f;
  std::vector<std::string> ids;
  for (int i = 0; i < 2500; ++i) {
    ids.push_back("rig-" + std::to_string(i));
    f.rig_map[ids.back()] = make_rig(ids.back());
  }
  FakeJobStore store;
  std::vector<std::pair<std::size_t, std::size_t>> at_persist;  // (commands made, job records put)
  f.on_persist = [&] { at_persist.emplace_back(f.enqueued.size(), store.puts.size()); };
  JobTable table(&store, 4);
  const Job& j = table.start(f, request("dmesg"), ids, "job-big", kT0);
  CHECK(f.enqueued.size() == 2500);
  // Each chunk goes once made; the last one is the caller's persist() (after the answer is built).
  CHECK(at_persist == std::vector<std::pair<std::size_t, std::size_t>>{{1024, 1}, {2048, 1}});
  REQUIRE(store.puts.size() == 2);  // before the first chunk, then the whole job
  CHECK(store.puts[0].job_id == "job-big");
  CHECK_FALSE(store.puts[0].finished);
  CHECK(j.count(JobRigOutcome::dispatched) == 2500);
  // A small job: none of this, one record and the caller's persist().
  f.on_persist = {};
  const std::size_t puts = store.puts.size();
  const std::uint64_t persisted = f.persisted;
  table.start(f, request("dmesg"), {"rig-1", "rig-2"}, "job-small", kT0);
  CHECK(f.persisted == persisted);
  CHECK(store.puts.size() == puts + 1);
}

TEST_CASE("jobs: a record read back is the job, byte for byte in the API's JSON") {
  FakeFleet f = fleet_of({{"a", "x"}, {"b", "x"}});
  JobTable table;
  JobRequest req = request("suite");
  req.args = {{"suite", "n\u00e9\"w"}};
  req.targets.glob = "*";
  req.targets.labels = {{"lab", "x"}};
  req.max_concurrency = share("50%");
  req.max_errors = share("12.5%");
  req.deliver_within_s = 7;
  req.timeout_s = 8;
  req.deadline_s = 100;
  const Job& j = table.start(f, req, {"a", "b", "gone"}, "job-rt", kT0);
  set_state(f, j.rigs[0].cmd_id, CommandState::failed, "exit code 3 \u2013 \"bad\"");
  table.command_finished(f, j.rigs[0].cmd_id, kT0 + 1);
  const JobRecord rec = job_record(j);
  CHECK(std::count(rec.body.begin(), rec.body.end(), '\n') == 1);  // two lines: head, rigs
  const auto full = job_from_record(rec, true);
  REQUIRE(full);
  CHECK(job_json_text(*full, nullptr, true) == job_json_text(j, nullptr, true));
  const auto head = job_from_record(rec, false);
  REQUIRE(head);
  CHECK(head->rigs.empty());
  CHECK(job_json_text(*head, nullptr, false) == job_json_text(j, nullptr, false));
  const auto api = nlohmann::ordered_json::parse(job_json_text(j, nullptr, false));
  CHECK(api["max_concurrency_given"] == "50%");
  CHECK(api["max_errors_given"] == "12.5%");
  CHECK(api["max_errors"] == 0);
  CHECK(api["counts"]["total"] == 3);

  JobRecord broken = rec;
  broken.body = "{\"v\":1}";
  CHECK_FALSE(job_from_record(broken, false));
  broken.body = "not json";
  CHECK_FALSE(job_from_record(broken, false));
  broken.body = rec.body.substr(0, rec.body.find('\n'));
  CHECK(job_from_record(broken, false));
  CHECK_FALSE(job_from_record(broken, true));  // no rigs line
}

TEST_CASE("jobs: a restarted broker resumes an unfinished job from its record and its commands") {
  // Broker 1: five rigs, two at a time; its record is written at the start.
  FakeFleet f = fleet_of({{"a", "x"}, {"b", "x"}, {"c", "x"}, {"d", "x"}, {"e", "x"}});
  f.record_enqueued = true;
  FakeJobStore store;
  std::string job_id;
  {
    JobTable table(&store, 4);
    JobRequest req = request("suite");
    req.max_concurrency = RigShare{2, 0, false};
    req.timeout_s = 77;
    const Job& j = table.start(f, req, {"a", "b", "c", "d", "e"}, "job-x", kT0);
    job_id = j.job_id;
    // a succeeds; c is sent in its place (after the last record: the record still says pending).
    set_state(f, j.rigs[0].cmd_id, CommandState::succeeded);
    table.command_finished(f, j.rigs[0].cmd_id, kT0 + 100);
    CHECK(j.rigs[2].outcome == O::dispatched);
    // b fails while the broker is down... (its record says so, no event reaches anybody)
    set_state(f, j.rigs[1].cmd_id, CommandState::failed, "exit 1");
    // ... and c was acknowledged.
    set_state(f, j.rigs[2].cmd_id, CommandState::acked);
  }  // kill -9: the table is gone, its last record is the first one
  REQUIRE(store.jobs.size() == 1);
  const JobRecord record = store.jobs.begin()->second;
  CHECK_FALSE(record.finished);

  // Broker 2.
  f.enqueued.clear();
  f.requests.clear();
  JobTable table(&store, 4);
  const auto resumed = table.resume(f, record, kT0 + 10'000);
  REQUIRE(resumed);
  const Job& j = **resumed;
  CHECK(j.job_id == job_id);
  CHECK(j.max_concurrency == 2);
  CHECK(table.running() == 1);
  // a ok and b failed (from their commands), c in flight; d sent now (one slot free), e waits.
  CHECK(outcomes(j) == std::vector{O::ok, O::failed, O::dispatched, O::dispatched, O::pending});
  CHECK(j.rigs[1].error == "failed");
  CHECK(j.rigs[1].detail == "exit 1");
  REQUIRE(f.requests.size() == 1);
  CHECK(f.requests[0].rig_id == "d");
  CHECK(f.requests[0].job_id == job_id);
  CHECK(f.requests[0].timeout_s == 77u);
  CHECK(store.puts.back().job_id == job_id);  // the resumed state is written back
  CHECK(table.resume(f, record, kT0 + 10'000).has_value() == false);  // once

  // It goes on to its end.
  set_state(f, j.rigs[2].cmd_id, CommandState::succeeded);
  CHECK(table.command_finished(f, j.rigs[2].cmd_id, kT0 + 11'000));
  CHECK(j.rigs[4].outcome == O::dispatched);
  set_state(f, j.rigs[3].cmd_id, CommandState::succeeded);
  set_state(f, j.rigs[4].cmd_id, CommandState::succeeded);
  table.command_finished(f, j.rigs[3].cmd_id, kT0 + 12'000);
  table.command_finished(f, j.rigs[4].cmd_id, kT0 + 12'001);
  CHECK(j.state() == JobState::done);
  CHECK(outcomes(j) == std::vector{O::ok, O::failed, O::ok, O::ok, O::ok});
  CHECK(store.jobs.at(job_id).finished);
}

TEST_CASE("jobs: a resumed job whose deadline passed while the broker was down ends at once") {
  FakeFleet f = fleet_of({{"a", "x"}, {"b", "x"}});
  f.record_enqueued = true;
  FakeJobStore store;
  JobRecord record;
  {
    JobTable table(&store, 4);
    JobRequest req = request("dmesg");
    req.deadline_s = 30;
    req.max_concurrency = RigShare{1, 0, false};
    table.start(f, req, {"a", "b"}, "job-late", kT0);
    record = store.jobs.at("job-late");
  }
  f.commands.begin()->second.state = CommandState::sent;
  JobTable table(&store, 4);
  const auto resumed = table.resume(f, record, kT0 + 31'000);
  REQUIRE(resumed);
  CHECK((*resumed)->state() == JobState::expired);
  CHECK(outcomes(**resumed) == std::vector{O::silent, O::skipped});
  CHECK(f.requests.size() == 1);  // nothing new was sent
  CHECK(table.running() == 0);
  CHECK(store.jobs.at("job-late").finished);
}

TEST_CASE("jobs: a resumed job pages through its commands, and one whose command is gone fails it") {
  FakeFleet f;
  for (int i = 0; i < 1200; ++i) {
    char id[16];
    std::snprintf(id, sizeof id, "r%04d", i);
    f.rig_map[id] = make_rig(id);
  }
  f.record_enqueued = true;
  FakeJobStore store;
  JobRecord record;
  std::vector<std::string> rigs;
  for (const auto& [id, r] : f.rig_map) rigs.push_back(id);
  {
    JobTable table(&store, 4);
    table.start(f, request("dmesg"), rigs, "job-big", kT0);
    record = store.jobs.at("job-big");
  }
  for (auto& [id, v] : f.commands) v.state = CommandState::succeeded;
  f.commands.erase(f.commands.begin());  // past the retention
  f.list_calls = 0;
  JobTable table(&store, 4);
  const auto resumed = table.resume(f, record, kT0 + 1000);
  REQUIRE(resumed);
  CHECK(f.list_calls == 3);  // 500 + 500 + 199
  CHECK((*resumed)->count(O::ok) == 1199);
  CHECK((*resumed)->count(O::failed) == 1);
  CHECK((*resumed)->state() == JobState::done);
}

TEST_CASE("jobs: commands that ended without an event are found by the periodic read-back") {
  FakeFleet f = fleet_of({{"a", "x"}, {"b", "x"}});
  f.record_enqueued = true;
  JobTable table;
  const Job& j = table.start(f, request("dmesg"), {"a", "b"}, "job-q", kT0);
  table.tick(f, kT0);
  set_state(f, j.rigs[0].cmd_id, CommandState::succeeded);  // another broker finished it
  set_state(f, j.rigs[1].cmd_id, CommandState::acked);
  table.tick(f, kT0 + kJobReconcileIntervalMs - 1);
  CHECK(j.rigs[0].outcome == O::dispatched);
  table.tick(f, kT0 + kJobReconcileIntervalMs);
  CHECK(j.rigs[0].outcome == O::ok);
  CHECK(j.rigs[1].outcome == O::dispatched);
}

TEST_CASE("jobs: a draining broker sends nothing more; its pending rigs wait for the next one") {
  FakeFleet f = fleet_of({{"a", "x"}, {"b", "x"}});
  FakeJobStore store;
  JobTable table(&store, 4);
  JobRequest req = request("dmesg");
  req.max_concurrency = RigShare{1, 0, false};
  const Job& j = table.start(f, req, {"a", "b"}, "job-dr", kT0);
  f.drain_window = std::chrono::milliseconds(1000);
  set_state(f, j.rigs[0].cmd_id, CommandState::succeeded);
  table.command_finished(f, j.rigs[0].cmd_id, kT0 + 1);
  CHECK(outcomes(j) == std::vector{O::ok, O::pending});
  CHECK(j.state() == JobState::running);
  const std::size_t puts = store.puts.size();
  table.save_running(kT0 + 2);
  CHECK(store.puts.size() == puts + 1);
  CHECK_FALSE(store.puts.back().finished);
}

TEST_CASE("jobs: finished jobs beyond the history are forgotten, running ones never") {
  FakeFleet f = fleet_of({{"a", "x"}});
  JobTable table(nullptr, 2);
  const Job& j1 = table.start(f, request("dmesg"), {"a"}, "j1", kT0);
  const std::string c1 = j1.rigs[0].cmd_id;
  table.start(f, request("dmesg"), {"a"}, "j2", kT0);
  table.start(f, request("dmesg"), {"gone"}, "j3", kT0);  // refused: finished at once
  table.start(f, request("dmesg"), {"gone"}, "j4", kT0);
  table.start(f, request("dmesg"), {"gone"}, "j5", kT0);
  CHECK(table.find("j1") != nullptr);  // running
  CHECK(table.find("j3") == nullptr);
  CHECK(table.find("j5") != nullptr);
  CHECK(table.running() == 2);
  set_state(f, c1, CommandState::succeeded);
  table.command_finished(f, c1, kT0 + 1);
  CHECK(table.find("j4") == nullptr);
  CHECK(table.find("j1") != nullptr);
  std::vector<std::string> order;
  table.for_each_newest_first([&](const Job& j) { order.push_back(j.job_id); });
  CHECK(order == std::vector<std::string>{"j5", "j2", "j1"});
}

TEST_CASE("jobs: cancel skips the pending rigs, cancels the commands in flight, ends cancelled") {
  FakeFleet f = fleet_of({{"a", "x"}, {"b", "x"}, {"c", "x"}, {"d", "x"}});
  FakeJobStore store;
  JobTable table(&store);
  JobRequest req = request("suite");
  req.max_concurrency = RigShare{2, 0, false};
  const Job& j = table.start(f, req, {"a", "b", "c", "d"}, "job-c", kT0);
  set_state(f, j.rigs[0].cmd_id, CommandState::running);
  set_state(f, j.rigs[1].cmd_id, CommandState::acked);
  CHECK(table.cancel(f, "nope", kT0 + 1) == JobCancel::unknown);
  CHECK(table.cancel(f, "job-c", kT0 + 1000) == JobCancel::cancelled);
  CHECK(outcomes(j) == std::vector{O::dispatched, O::dispatched, O::skipped, O::skipped});
  CHECK(j.rigs[2].detail.find("the job was cancelled") != std::string::npos);
  CHECK(j.rigs[3].cmd_id.empty());
  CHECK(f.cancelled == std::vector<std::string>{j.rigs[0].cmd_id, j.rigs[1].cmd_id});
  CHECK(j.cancelled_at_ms == kT0 + 1000);
  CHECK(j.state() == JobState::running);  // until its commands have ended
  // Saved at once: the record says it was cancelled.
  REQUIRE(store.jobs.count("job-c") == 1);
  const auto saved = job_from_record(store.jobs.at("job-c"), true);
  REQUIRE(saved);
  CHECK(saved->cancelled_at_ms == kT0 + 1000);
  // Asked again while it ends: cancel_pending (409 on the API), nothing sent twice.
  CHECK(table.cancel(f, "job-c", kT0 + 1500) == JobCancel::pending);
  CHECK(f.cancelled.size() == 2);
  // A command's end starts nothing more.
  set_state(f, j.rigs[0].cmd_id, CommandState::cancelled, "cancelled by the operator");
  table.command_finished(f, j.rigs[0].cmd_id, kT0 + 2000);
  CHECK(f.enqueued.size() == 2);
  CHECK(j.state() == JobState::running);
  set_state(f, j.rigs[1].cmd_id, CommandState::cancelled);
  table.command_finished(f, j.rigs[1].cmd_id, kT0 + 3000);
  CHECK(outcomes(j) == std::vector{O::failed, O::failed, O::skipped, O::skipped});
  CHECK(j.rigs[0].error == "cancelled");
  CHECK(j.rigs[0].state == CommandState::cancelled);
  CHECK(j.state() == JobState::cancelled);
  CHECK(j.finished_at_ms == kT0 + 3000);
  CHECK(f.enqueued.size() == 2);
  CHECK(table.running() == 0);
  // Finished: nothing to cancel.
  CHECK(table.cancel(f, "job-c", kT0 + 4000) == JobCancel::finished);
  // The record reads back cancelled, and the state's name goes both ways.
  const auto final_rec = job_from_record(store.jobs.at("job-c"), true);
  REQUIRE(final_rec);
  CHECK(final_rec->state() == JobState::cancelled);
  CHECK(std::string(to_string(JobState::cancelled)) == "cancelled");
  CHECK(fleetlink::broker::job_state_from_string("cancelled") == JobState::cancelled);
  const auto api = nlohmann::ordered_json::parse(job_json_text(j, nullptr, false));
  CHECK(api["state"] == "cancelled");
  CHECK(api["cancelled_at"] == "2027-01-15T08:00:01.000Z");
}

TEST_CASE("jobs: a job cancelled with nothing in flight ends at once; a finished one cannot be cancelled") {
  FakeFleet f = fleet_of({{"a", "x"}, {"b", "x"}});
  JobTable table;
  JobRequest req = request("suite");
  req.max_concurrency = RigShare{1, 0, false};
  const Job& j = table.start(f, req, {"a", "b"}, "job-1", kT0);
  set_state(f, j.rigs[0].cmd_id, CommandState::succeeded);
  table.command_finished(f, j.rigs[0].cmd_id, kT0 + 1);
  set_state(f, j.rigs[1].cmd_id, CommandState::succeeded);  // its event has not arrived yet
  CHECK(table.cancel(f, "job-1", kT0 + 2) == JobCancel::cancelled);
  CHECK(f.cancelled.empty());  // the fleet said it was final: nothing to cancel
  table.command_finished(f, j.rigs[1].cmd_id, kT0 + 3);
  CHECK(j.state() == JobState::cancelled);  // the operator cancelled it, even if every rig ended ok

  const Job& k = table.start(f, request("dmesg"), {"zz-never-seen"}, "job-2", kT0);
  CHECK(k.state() == JobState::done);  // refused: finished at once
  CHECK(table.cancel(f, "job-2", kT0 + 1) == JobCancel::finished);

  // A deadline that is being read back (expiring): too late to cancel.
  JobRequest slow = request("suite");
  slow.deadline_s = 5;
  FakeFleet later = fleet_of({{"a", "x"}});
  later.later = true;
  JobTable t2;
  const Job& e = t2.start(later, slow, {"a"}, "job-3", kT0);
  t2.tick(later, kT0 + 5000);
  CHECK(e.expiring);
  CHECK(t2.cancel(later, "job-3", kT0 + 5001) == JobCancel::finished);
}

TEST_CASE("jobs: a settled rig keeps its exit code and the first line of its output") {
  FakeFleet f = fleet_of({{"a", "x"}, {"b", "x"}, {"c", "x"}});
  JobTable table;
  const Job& j = table.start(f, request("suite"), {"a", "b", "c"}, "job-x", kT0);
  auto result = [&](std::size_t i, CommandState st, std::int32_t code, std::string out) {
    set_state(f, j.rigs[i].cmd_id, st);
    fleetlink::msg::Result r;
    r.cmd_id = j.rigs[i].cmd_id;
    r.exit_code = code;
    r.output.assign(out.begin(), out.end());
    f.commands[j.rigs[i].cmd_id].result = r;
  };
  result(0, CommandState::succeeded, 0, "all good\nsecond line\n");
  result(1, CommandState::failed, 3, "\xff" "disk full\r\nmore");
  set_state(f, j.rigs[2].cmd_id, CommandState::undeliverable, "never acknowledged");  // no RESULT
  for (std::size_t i = 0; i < 3; ++i) table.command_finished(f, j.rigs[i].cmd_id, kT0 + 1);
  CHECK(j.rigs[0].exit_code == 0);
  CHECK(j.rigs[0].first_line == "all good");
  CHECK(j.rigs[1].exit_code == 3);
  CHECK(j.rigs[1].first_line == "\xef\xbf\xbd" "disk full");  // invalid UTF-8 replaced
  CHECK(j.rigs[1].detail == "exit code 3");
  CHECK_FALSE(j.rigs[2].exit_code.has_value());
  CHECK(j.rigs[2].first_line.empty());
  // In the API's JSON, and through the record.
  const auto api = nlohmann::json::parse(job_json_text(j, nullptr, true));
  CHECK(api["rigs"][0]["exit_code"] == 0);
  CHECK(api["rigs"][0]["output_first_line"] == "all good");
  CHECK(api["rigs"][1]["exit_code"] == 3);
  CHECK(api["rigs"][2]["exit_code"].is_null());
  CHECK(api["rigs"][2]["output_first_line"].is_null());
  const auto back = job_from_record(job_record(j), true);
  REQUIRE(back);
  CHECK(back->rigs[1].exit_code == 3);
  CHECK(back->rigs[1].first_line == j.rigs[1].first_line);
  CHECK_FALSE(back->rigs[2].exit_code.has_value());
  CHECK(job_json_text(*back, nullptr, true) == job_json_text(j, nullptr, true));
}

TEST_CASE("jobs: a first line is cut to kJobFirstLineMax bytes, at a character's start") {
  using fleetlink::broker::first_line_of;
  using fleetlink::broker::kJobFirstLineMax;
  CHECK(first_line_of("") == "");
  CHECK(first_line_of("\nsecond") == "");
  CHECK(first_line_of("one\r\ntwo") == "one");
  const std::string wide(kJobFirstLineMax + 50, 'x');
  CHECK(first_line_of(wide).size() == kJobFirstLineMax);
  // 'e' + U+00E9 (2 bytes) repeated: the cut never splits a character.
  std::string accents = "e";
  while (accents.size() < kJobFirstLineMax + 10) accents += "\xc3\xa9";
  const std::string cut = first_line_of(accents);
  CHECK(cut.size() <= kJobFirstLineMax);
  CHECK(cut.size() >= kJobFirstLineMax - 1);
  CHECK((static_cast<unsigned char>(cut.back()) & 0xC0) != 0xC0);  // not a lead byte left alone
  CHECK(nlohmann::json::parse(nlohmann::json(cut).dump()) == cut);  // valid UTF-8
}

TEST_CASE("jobs: a dry run's preview: the selection with each rig's state, the limits a job would have") {
  FakeFleet f = fleet_of({{"rig-1", "b2"}, {"rig-2", "b2"}, {"rig-3", "b3"}});
  f.rig_map["rig-2"].state = "offline";
  JobRequest req = request("suite");
  req.targets.ids = {"rig-2", "rig-1", "rig-9"};
  req.max_concurrency = share("50%");
  req.max_errors = share("1");
  const auto p = JobTable::preview(f, req);
  REQUIRE(p.rigs.size() == 3);
  CHECK(p.rigs[0].rig_id == "rig-1");
  CHECK(p.rigs[0].state == "connected");
  CHECK(p.rigs[1].state == "offline");
  CHECK(p.rigs[2].rig_id == "rig-9");
  CHECK(p.rigs[2].state == "unknown");
  CHECK(p.max_concurrency == 1);
  CHECK(p.max_errors == 1);
  CHECK(p.deadline_s == default_job_deadline_s(req, 3));
  CHECK(f.enqueued.empty());  // nothing sent
  JobRequest labels = request("dmesg");
  labels.targets.labels = {{"lab", "b3"}};
  labels.deadline_s = 9;
  const auto q = JobTable::preview(f, labels);
  REQUIRE(q.rigs.size() == 1);
  CHECK(q.rigs[0].rig_id == "rig-3");
  CHECK(q.deadline_s == 9);
  CHECK(JobTable::preview(f, request("dmesg")).rigs.empty());
}

TEST_CASE("jobs: a version-1 record (before exit codes and cancel) still loads, and resumes") {
  // As a broker of version 1 wrote it: rigs of six fields, no cancelled_at_ms.
  JobRecord old;
  old.job_id = "job-v1";
  old.created_at_ms = kT0;
  old.finished = false;
  old.body =
      R"({"v":1,"job_id":"job-v1","kind":"suite","args":{"suite":"s"},"targets":{"ids":[],"glob":"*","labels":{}},)"
      R"("created_at_ms":1800000000000,"deadline_s":600,"deadline_at_ms":1800000600000,"finished_at_ms":null,)"
      R"("max_concurrency":1,"max_concurrency_given":"1","max_errors":null,"max_errors_given":null,)"
      R"("deliver_within_s":null,"timeout_s":null,"hold":false,"state":"running","stopped":false,"expired":false,)"
      R"("counts":{"total":2,"pending":1,"dispatched":0,"ok":1,"failed":0,"refused":0,"skipped":0,"silent":0}})"
      "\n"
      R"([["a","ok","cmd-a","succeeded","",""],["b","pending","","","",""]])";
  const auto head = job_from_record(old, false);
  REQUIRE(head);
  CHECK(head->count(O::ok) == 1);
  CHECK_FALSE(head->cancelled_at_ms.has_value());
  const auto full = job_from_record(old, true);
  REQUIRE(full);
  REQUIRE(full->rigs.size() == 2);
  CHECK(full->rigs[0].outcome == O::ok);
  CHECK(full->rigs[0].state == CommandState::succeeded);
  CHECK_FALSE(full->rigs[0].exit_code.has_value());
  CHECK(full->rigs[0].first_line.empty());
  CHECK(full->state() == JobState::running);
  // A version-1 row with eight fields, or a version-2 row with six, is malformed.
  JobRecord mixed = old;
  mixed.body.replace(mixed.body.find("\"v\":1"), 5, "\"v\":2");
  CHECK_FALSE(job_from_record(mixed, true));
  JobRecord future = old;
  future.body.replace(future.body.find("\"v\":1"), 5, "\"v\":3");
  CHECK_FALSE(job_from_record(future, false));
  // It resumes, and is written back as version 2.
  FakeFleet f = fleet_of({{"a", "x"}, {"b", "x"}});
  set_state(f, "cmd-a", CommandState::succeeded);
  f.commands["cmd-a"].rig_id = "a";
  f.commands["cmd-a"].job_id = "job-v1";
  FakeJobStore store;
  JobTable table(&store);
  const auto resumed = table.resume(f, old, kT0 + 1000);
  REQUIRE(resumed);
  CHECK(outcomes(**resumed) == std::vector{O::ok, O::dispatched});
  REQUIRE(store.jobs.count("job-v1") == 1);
  CHECK(store.jobs.at("job-v1").body.rfind(R"({"v":2,)", 0) == 0);
}
