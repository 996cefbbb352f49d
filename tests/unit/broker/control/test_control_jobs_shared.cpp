// Fan-out jobs across brokers: rigs on another broker get their commands
// through their owner (answers later), command records read from a store that
// answers later, a job's hold in the registry, and a job whose holder is gone
// taken over by another broker (pure: FakeFleet and FakeJobStore give every
// answer when the test says).
#include <doctest/doctest.h>

#include <memory>

#include "control/job_json.hpp"
#include "control/jobs.hpp"
#include "test_control_fake_fleet.hpp"
#include "test_control_fake_store.hpp"

using fleetlink::broker::CommandState;
using fleetlink::broker::CommandView;
using fleetlink::broker::EnqueueError;
using fleetlink::broker::EnqueueFailure;
using fleetlink::broker::EnqueueOk;
using fleetlink::broker::Job;
using fleetlink::broker::JobRequest;
using fleetlink::broker::JobRigOutcome;
using fleetlink::broker::JobState;
using fleetlink::broker::JobTable;
using fleetlink::broker::kJobAdoptIntervalMs;
using fleetlink::broker::kJobReconcileIntervalMs;
using fleetlink::broker::RigShare;
using fleetlink::broker::testing::FakeFleet;
using fleetlink::broker::testing::FakeJobStore;
using fleetlink::broker::testing::make_rig;

namespace {

constexpr std::uint64_t kT0 = 1'800'000'000'000ULL;
using O = JobRigOutcome;

FakeFleet fleet_of(std::initializer_list<const char*> rigs) {
  FakeFleet f;
  for (const char* id : rigs) f.rig_map[id] = make_rig(id);
  f.record_enqueued = true;
  return f;
}

void set_state(FakeFleet& f, const std::string& cmd_id, CommandState state, const std::string& rig = {}) {
  CommandView& v = f.commands[cmd_id];
  v.cmd_id = cmd_id;
  v.state = state;
  if (!rig.empty()) v.rig_id = rig;
}

std::vector<O> outcomes(const Job& j) {
  std::vector<O> out;
  for (const auto& r : j.rigs) out.push_back(r.outcome);
  return out;
}

JobRequest dmesg(std::uint64_t concurrency = 0) {
  JobRequest r;
  r.kind = "dmesg";
  if (concurrency != 0) r.max_concurrency = RigShare{concurrency, 0, false};
  return r;
}

EnqueueOk ok_for(const std::string& cmd_id, const std::string& rig, CommandState state = CommandState::queued) {
  EnqueueOk ok;
  ok.cmd_id = cmd_id;
  ok.rig_id = rig;
  ok.seq = 7;
  ok.state = state;
  return ok;
}

EnqueueFailure failure(EnqueueError e, const std::string& rig, const std::string& cmd_id = {}) {
  EnqueueFailure f;
  f.error = e;
  f.rig_id = rig;
  f.detail = "said by the owner";
  f.cmd_id = cmd_id;
  return f;
}

}  // namespace

TEST_CASE("shared jobs: a rig on another broker gets its command through its owner, answered later") {
  FakeFleet f = fleet_of({"a", "b", "c"});
  f.elsewhere = {"b", "c"};
  JobTable table;
  std::uint64_t now = kT0;
  table.set_clock([&] { return now; });
  const Job& j = table.start(f, dmesg(2), {"a", "b", "c"}, "job-1", kT0);
  // a here at once; b routed (dispatched, no cmd_id until its owner answers); c waits for a slot.
  CHECK(outcomes(j) == std::vector{O::dispatched, O::dispatched, O::pending});
  CHECK(j.rigs[1].cmd_id.empty());
  REQUIRE(f.routed.size() == 1);
  CHECK(f.routed.front().first.rig_id == "b");
  CHECK(f.routed.front().first.job_id == "job-1");

  const std::uint64_t persisted = f.persisted;
  f.answer_routed(ok_for("cmd-b", "b"));
  CHECK(j.rigs[1].cmd_id == "cmd-b");
  CHECK(j.rigs[1].outcome == O::dispatched);
  set_state(f, "cmd-b", CommandState::succeeded, "b");
  now = kT0 + 100;
  CHECK(table.command_finished(f, "cmd-b", now));
  CHECK(j.rigs[1].outcome == O::ok);
  // Its slot went to c, routed too.
  CHECK(j.rigs[2].outcome == O::dispatched);
  REQUIRE(f.routed.size() == 1);
  CHECK(f.routed.front().first.rig_id == "c");
  // The owner refuses c: an error like a local refusal, and the job goes on to its end.
  now = kT0 + 200;
  f.answer_routed(failure(EnqueueError::unsupported_kind, "c"));
  CHECK(j.rigs[2].outcome == O::refused);
  CHECK(j.rigs[2].error == "unsupported_kind");
  CHECK(j.rigs[2].detail == "said by the owner");
  CHECK(f.persisted > persisted);  // what an answer sends on is made durable
  set_state(f, j.rigs[0].cmd_id, CommandState::succeeded, "a");
  table.command_finished(f, j.rigs[0].cmd_id, kT0 + 300);
  CHECK(j.state() == JobState::done);
  CHECK(j.count(O::ok) == 2);
  CHECK(j.count(O::refused) == 1);
}

TEST_CASE("shared jobs: an owner that did not answer in time is followed by the command's id") {
  FakeFleet f = fleet_of({"b"});
  f.elsewhere = {"b"};
  JobTable table;
  table.set_clock([] { return kT0 + 10; });
  const Job& j = table.start(f, dmesg(), {"b"}, "job-1", kT0);
  f.answer_routed(failure(EnqueueError::route_timeout, "b", "cmd-b"));
  // It may be there: dispatched under its cmd_id, not refused.
  CHECK(j.rigs[0].outcome == O::dispatched);
  CHECK(j.rigs[0].cmd_id == "cmd-b");
  // The periodic read-back finds it finished.
  set_state(f, "cmd-b", CommandState::succeeded, "b");
  table.tick(f, kT0 + kJobReconcileIntervalMs);
  CHECK(j.rigs[0].outcome == O::ok);
  CHECK(j.state() == JobState::done);
}

TEST_CASE("shared jobs: an answer after the job's deadline cancels the command it names") {
  FakeFleet f = fleet_of({"b"});
  f.elsewhere = {"b"};
  JobTable table;
  table.set_clock([] { return kT0 + 10; });
  JobRequest req = dmesg();
  req.deadline_s = 5;
  const Job& j = table.start(f, req, {"b"}, "job-1", kT0);
  table.tick(f, kT0 + 5000);
  REQUIRE(j.state() == JobState::expired);
  CHECK(j.rigs[0].outcome == O::silent);
  CHECK(j.rigs[0].error == "never_acknowledged");
  set_state(f, "cmd-late", CommandState::queued, "b");
  f.answer_routed(ok_for("cmd-late", "b"));
  CHECK(f.cancelled == std::vector<std::string>{"cmd-late"});
  CHECK(j.rigs[0].outcome == O::silent);  // the report stands
}

TEST_CASE("shared jobs: a store that answers later is read before a rig settles, and before the deadline ends it") {
  FakeFleet f = fleet_of({"a", "b"});
  f.later = true;
  JobTable table;
  std::uint64_t now = kT0;
  table.set_clock([&] { return now; });
  JobRequest req = dmesg();
  req.deadline_s = 60;
  const Job& j = table.start(f, req, {"a", "b"}, "job-1", kT0);
  set_state(f, j.rigs[0].cmd_id, CommandState::succeeded, "a");
  CHECK(table.command_finished(f, j.rigs[0].cmd_id, kT0 + 1));
  CHECK(j.rigs[0].outcome == O::dispatched);  // not until the store answers
  REQUIRE(f.reads.size() == 1);
  now = kT0 + 2;
  f.answer_reads();
  CHECK(j.rigs[0].outcome == O::ok);

  // The deadline: the rig's command is read first, and the job ends with what it says.
  set_state(f, j.rigs[1].cmd_id, CommandState::running, "b");
  table.tick(f, kT0 + 60'000);
  CHECK(j.state() == JobState::running);
  CHECK(j.expiring);
  table.tick(f, kT0 + 61'000);  // a tick meanwhile does not expire it twice
  now = kT0 + 61'500;
  f.answer_reads();
  CHECK(j.state() == JobState::expired);
  CHECK(j.rigs[1].outcome == O::silent);
  CHECK(j.rigs[1].error == "never_answered");
  CHECK(j.finished_at_ms == kT0 + 61'500);
}

TEST_CASE("shared jobs: answers that come after the table is gone find nothing") {
  FakeFleet f = fleet_of({"b"});
  f.elsewhere = {"b"};
  {
    JobTable table;
    table.start(f, dmesg(), {"b"}, "job-1", kT0);
  }
  REQUIRE(f.routed.size() == 1);
  f.answer_routed(ok_for("cmd-b", "b"));  // no crash, no effect (ASan would see one)
  CHECK(f.cancelled.empty());
}

TEST_CASE("shared jobs: the hold is claimed at the start and renewed; a job another broker holds is dropped here") {
  FakeFleet f = fleet_of({"a"});
  f.shared = true;
  FakeJobStore store;
  JobTable table(&store, 16);
  std::vector<std::string> notices;
  table.set_notices([&](const std::string& n) { notices.push_back(n); });
  const Job& j = table.start(f, dmesg(), {"a"}, "job-1", kT0);
  REQUIRE(f.holds.size() == 1);
  CHECK(f.holds.front().take);
  CHECK(f.holds.front().job_id == "job-1");
  f.answer_hold(true);
  CHECK(&j == table.find("job-1"));

  table.tick(f, kT0 + 10'000);
  REQUIRE_FALSE(f.holds.empty());
  CHECK_FALSE(f.holds.front().take);  // a renewal
  f.answer_hold(true);
  CHECK(table.find("job-1") != nullptr);
  table.tick(f, kT0 + 20'000);
  while (!f.holds.empty() && f.holds.front().take) f.answer_hold(false, "broker-b");  // takeover scans
  REQUIRE_FALSE(f.holds.empty());
  f.answer_hold(false, "broker-b");
  CHECK(table.find("job-1") == nullptr);
  CHECK(table.running() == 0);
  REQUIRE_FALSE(notices.empty());
  CHECK(notices.back().find("broker-b") != std::string::npos);
}

TEST_CASE("shared jobs: an unfinished job whose holder is gone is taken over and finished, nothing sent twice") {
  FakeFleet f1 = fleet_of({"a", "b", "c"});
  FakeJobStore store;
  std::string job_id;
  std::string first_cmd;
  {
    // Broker 1 starts a job one rig at a time, and dies with rig a's command in flight.
    JobTable one(&store, 16);
    const Job& j = one.start(f1, dmesg(1), {"a", "b", "c"}, "job-1", kT0);
    job_id = j.job_id;
    first_cmd = j.rigs[0].cmd_id;
  }
  REQUIRE(store.jobs.count("job-1") == 1);

  // Broker 2 shares the store (its fleet holds the commands' records).
  FakeFleet f2 = fleet_of({"a", "b", "c"});
  f2.commands = f1.commands;
  f2.next_seq = 100;
  f2.shared = true;
  JobTable two(&store, 16);
  std::vector<std::string> notices;
  two.set_notices([&](const std::string& n) { notices.push_back(n); });
  two.set_clock([] { return kT0 + kJobAdoptIntervalMs; });
  two.tick(f2, kT0 + kJobAdoptIntervalMs);
  REQUIRE(f2.holds.size() == 1);
  CHECK(f2.holds.front().take);
  // While its holder lives, the claim loses: nothing happens.
  f2.answer_hold(false, "broker-1");
  CHECK(two.find("job-1") == nullptr);
  CHECK(f2.requests.empty());

  // Its holder gone: the claim wins and the job goes on where its commands are.
  two.tick(f2, kT0 + 2 * kJobAdoptIntervalMs);
  REQUIRE(f2.holds.size() == 1);
  f2.answer_hold(true);
  const Job* j = two.find("job-1");
  REQUIRE(j != nullptr);
  CHECK(j->rigs[0].cmd_id == first_cmd);  // followed, not sent again
  CHECK(outcomes(*j) == std::vector{O::dispatched, O::pending, O::pending});
  CHECK(f2.requests.empty());
  REQUIRE_FALSE(notices.empty());
  CHECK(notices.back().find("taken over") != std::string::npos);

  set_state(f2, first_cmd, CommandState::succeeded, "a");
  two.command_finished(f2, first_cmd, kT0 + 2 * kJobAdoptIntervalMs + 1);
  REQUIRE(f2.requests.size() == 1);
  CHECK(f2.requests[0].rig_id == "b");
}

TEST_CASE("shared jobs: at start-up only the jobs this broker holds are resumed") {
  FakeFleet f1 = fleet_of({"a"});
  FakeJobStore store;
  {
    JobTable one(&store, 16);
    one.start(f1, dmesg(), {"a"}, "job-1", kT0);
    one.start(f1, dmesg(), {"a"}, "job-2", kT0);
  }
  FakeFleet f2 = fleet_of({"a"});
  f2.commands = f1.commands;
  f2.shared = true;
  JobTable two(&store, 16);
  std::vector<std::string> resumed;
  std::vector<fleetlink::broker::JobRecord> open;
  for (const auto& [id, rec] : store.jobs) open.push_back(rec);
  two.resume_all(f2, open, kT0 + 1, [&](fleetlink::Expected<const Job*> j) {
    REQUIRE(j);
    resumed.push_back((*j)->job_id);
  });
  REQUIRE(f2.holds.size() == 2);
  CHECK(two.arriving() == 2);
  f2.answer_hold(true);                // job-1: this broker's
  f2.answer_hold(false, "broker-b");   // job-2: another live broker drives it
  CHECK(resumed == std::vector<std::string>{"job-1"});
  CHECK(two.find("job-2") == nullptr);
  CHECK(two.arriving() == 0);
}
