// Fan-out batches: target selection, concurrency, max_errors (pure, FakeFleet).
#include <doctest/doctest.h>

#include "control/batches.hpp"
#include "test_control_fake_fleet.hpp"

using fleetlink::broker::Batch;
using fleetlink::broker::BatchRequest;
using fleetlink::broker::BatchRigOutcome;
using fleetlink::broker::BatchTable;
using fleetlink::broker::BatchTargets;
using fleetlink::broker::CommandState;
using fleetlink::broker::CommandView;
using fleetlink::broker::testing::FakeFleet;
using fleetlink::broker::testing::make_rig;

namespace {

FakeFleet fleet_of(std::initializer_list<std::pair<const char*, const char*>> rigs) {
  FakeFleet f;
  for (const auto& [id, lab] : rigs) {
    auto r = make_rig(id);
    r.labels = {{"lab", lab}};
    f.rig_map[id] = r;
  }
  return f;
}

// The fleet finishes cmd_id with a RESULT of this status.
void finish(FakeFleet& f, const std::string& cmd_id, fleetlink::msg::Status status) {
  CommandView v;
  v.cmd_id = cmd_id;
  v.state = status == fleetlink::msg::Status::ok || status == fleetlink::msg::Status::scheduled
                ? CommandState::succeeded
                : CommandState::failed;
  fleetlink::msg::Result res;
  res.status = status;
  v.result = res;
  f.commands[cmd_id] = v;
}

std::vector<BatchRigOutcome> outcomes(const Batch& b) {
  std::vector<BatchRigOutcome> out;
  for (const auto& r : b.rigs) out.push_back(r.outcome);
  return out;
}

}  // namespace

TEST_CASE("batches: select by ids, glob and labels (all must match)") {
  FakeFleet f = fleet_of({{"rig-0401", "b2"}, {"rig-0402", "b3"}, {"rig-0500", "b2"}});
  BatchTargets t;
  t.glob = "rig-04*";
  CHECK(BatchTable::select(f, t) == std::vector<std::string>{"rig-0401", "rig-0402"});
  t.labels = {{"lab", "b2"}};
  CHECK(BatchTable::select(f, t) == std::vector<std::string>{"rig-0401"});
  BatchTargets ids;
  ids.ids = {"rig-0500", "gone", "rig-0500"};
  CHECK(BatchTable::select(f, ids) == std::vector<std::string>{"gone", "rig-0500"});
  CHECK(BatchTable::select(f, BatchTargets{}).empty());
}

TEST_CASE("batches: max_concurrency sends the next rig as each command finishes") {
  FakeFleet f = fleet_of({{"a", "x"}, {"b", "x"}, {"c", "x"}});
  BatchTable table;
  BatchRequest req;
  req.kind = "dmesg";
  req.max_concurrency = 2;
  const Batch& b = table.start(f, req, {"a", "b", "c"}, "batch-1", 1);
  CHECK(outcomes(b) == std::vector{BatchRigOutcome::dispatched, BatchRigOutcome::dispatched,
                                   BatchRigOutcome::pending});
  CHECK(table.running() == 1);
  finish(f, b.rigs[0].cmd_id, fleetlink::msg::Status::ok);
  CHECK(table.command_finished(f, b.rigs[0].cmd_id));
  CHECK(outcomes(b) == std::vector{BatchRigOutcome::ok, BatchRigOutcome::dispatched,
                                   BatchRigOutcome::dispatched});
  CHECK_FALSE(table.command_finished(f, "not-a-batch-command"));
  finish(f, b.rigs[1].cmd_id, fleetlink::msg::Status::ok);
  finish(f, b.rigs[2].cmd_id, fleetlink::msg::Status::scheduled);
  table.command_finished(f, b.rigs[1].cmd_id);
  table.command_finished(f, b.rigs[2].cmd_id);
  CHECK(b.finished());
  CHECK(table.running() == 0);
  CHECK(table.find("batch-1") == &b);
}

TEST_CASE("batches: refusals and failures count as errors; over max_errors the rest is skipped") {
  FakeFleet f = fleet_of({{"a", "x"}, {"c", "x"}, {"d", "x"}});
  BatchTable table;
  BatchRequest req;
  req.kind = "suite";
  req.max_concurrency = 1;
  req.max_errors = 1;
  const Batch& b = table.start(f, req, {"a", "b-gone", "c", "d"}, "batch-2", 1);
  CHECK(outcomes(b) == std::vector{BatchRigOutcome::dispatched, BatchRigOutcome::pending,
                                   BatchRigOutcome::pending, BatchRigOutcome::pending});
  finish(f, b.rigs[0].cmd_id, fleetlink::msg::Status::failed);
  table.command_finished(f, b.rigs[0].cmd_id);
  // a failed (1 error, allowed); b-gone refused (2 > 1): stop; c, d skipped.
  CHECK(outcomes(b) == std::vector{BatchRigOutcome::failed, BatchRigOutcome::refused,
                                   BatchRigOutcome::skipped, BatchRigOutcome::skipped});
  CHECK(b.rigs[0].error == "failed");
  CHECK(b.rigs[1].error == "unknown_rig");
  CHECK(b.stopped);
  CHECK(b.finished());
  CHECK(table.running() == 0);
}

TEST_CASE("batches: the history is bounded") {
  FakeFleet f = fleet_of({{"a", "x"}});
  BatchTable table(2);
  BatchRequest req;
  req.kind = "dmesg";
  table.start(f, req, {"a"}, "b1", 1);
  table.start(f, req, {"a"}, "b2", 1);
  table.start(f, req, {"a"}, "b3", 1);
  CHECK(table.find("b1") == nullptr);
  CHECK(table.find("b3") != nullptr);
  CHECK(table.running() == 2);
}
