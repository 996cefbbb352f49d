#include "control/batches.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <set>
#include <utility>

namespace fleetlink::broker {

const char* to_string(BatchRigOutcome o) noexcept {
  switch (o) {
    case BatchRigOutcome::pending: return "pending";
    case BatchRigOutcome::dispatched: return "dispatched";
    case BatchRigOutcome::ok: return "ok";
    case BatchRigOutcome::failed: return "failed";
    case BatchRigOutcome::refused: return "refused";
    case BatchRigOutcome::skipped: return "skipped";
  }
  return "unknown";
}

bool Batch::finished() const noexcept {
  // Once stopped, every pending rig was marked skipped.
  return in_flight == 0 && (stopped || next_pending >= rigs.size());
}

namespace {

bool labels_match(const StringMap& want, const StringMap& have) {
  for (const auto& [k, v] : want) {
    const auto it = have.find(k);
    if (it == have.end() || it->second != v) return false;
  }
  return true;
}

bool labels_match(const StringMap& want, const Fleet::LabelList& have) {
  for (const auto& [k, v] : want) {
    const auto it = std::lower_bound(have.begin(), have.end(), k,
                                     [](const auto& label, const std::string& key) { return label.first < key; });
    if (it == have.end() || it->first != k || it->second != v) return false;
  }
  return true;
}

bool glob_match(const std::string& glob, const std::string& rig_id) {
  return glob.empty() || fnmatch(glob.c_str(), rig_id.c_str(), 0) == 0;
}

}  // namespace

std::vector<std::string> BatchTable::select(const Fleet& fleet, const BatchTargets& targets) {
  std::set<std::string> chosen;
  if (targets.empty()) return {};
  if (!targets.ids.empty()) {
    for (const std::string& id : targets.ids) {
      if (!glob_match(targets.glob, id)) continue;
      const std::optional<RigView> rig = fleet.rig(id);
      // A listed rig that is not connected is kept: the batch shows it refused.
      if (rig && !labels_match(targets.labels, rig->labels)) continue;
      chosen.insert(id);
    }
    return {chosen.begin(), chosen.end()};
  }
  std::vector<std::string> out;
  fleet.visit_rig_labels([&](std::string_view rig_id, const Fleet::LabelList& labels) {
    std::string id(rig_id);
    if (glob_match(targets.glob, id) && labels_match(targets.labels, labels)) out.push_back(std::move(id));
  });
  std::sort(out.begin(), out.end());  // rig ids are unique in the fleet
  return out;
}

const Batch& BatchTable::start(Fleet& fleet, BatchRequest request,
                               std::vector<std::string> rig_ids, std::string batch_id,
                               std::uint64_t now_ms) {
  // Forget the oldest finished batches beyond the history.
  while (order_.size() >= history_ && !order_.empty()) {
    auto it = batches_.find(order_.front());
    if (it != batches_.end()) {
      for (const BatchRig& r : it->second.rigs) {
        if (r.outcome == BatchRigOutcome::dispatched) in_flight_.erase(r.cmd_id);
      }
      if (!it->second.finished()) --running_;
      batches_.erase(it);
    }
    order_.pop_front();
  }
  Batch batch;
  batch.batch_id = batch_id;
  batch.kind = std::move(request.kind);
  batch.args = std::move(request.args);
  batch.max_concurrency = request.max_concurrency;
  batch.max_errors = request.max_errors;
  batch.created_at_ms = now_ms;
  for (std::string& id : rig_ids) batch.rigs.push_back(BatchRig{std::move(id), {}, {}, {}, {}});
  auto [it, inserted] = batches_.emplace(batch_id, std::move(batch));
  order_.push_back(batch_id);
  Batch& b = it->second;
  ++running_;  // until proven finished
  dispatch(fleet, b);
  update_running(b, true);
  return b;
}

void BatchTable::note_error(Batch& batch) {
  ++batch.errors;
  if (batch.max_errors && batch.errors > *batch.max_errors && !batch.stopped) {
    batch.stopped = true;
    for (BatchRig& r : batch.rigs) {
      if (r.outcome == BatchRigOutcome::pending) {
        r.outcome = BatchRigOutcome::skipped;
        r.detail = "the batch stopped after " + std::to_string(batch.errors) + " errors";
      }
    }
  }
}

void BatchTable::dispatch(Fleet& fleet, Batch& batch) {
  for (; batch.next_pending < batch.rigs.size(); ++batch.next_pending) {
    if (batch.stopped) return;
    if (batch.max_concurrency != 0 && batch.in_flight >= batch.max_concurrency) return;
    const std::size_t i = batch.next_pending;
    BatchRig& r = batch.rigs[i];
    if (r.outcome != BatchRigOutcome::pending) continue;
    CommandRequest request;
    request.rig_id = r.rig_id;
    request.kind = batch.kind;
    request.args = batch.args;
    request.job_id = batch.batch_id;
    EnqueueOutcome outcome = fleet.enqueue(std::move(request));
    if (const auto* ok = std::get_if<EnqueueOk>(&outcome)) {
      r.cmd_id = ok->cmd_id;
      r.outcome = BatchRigOutcome::dispatched;
      ++batch.in_flight;
      in_flight_[ok->cmd_id] = {&batch, i};
    } else {
      const auto& failure = std::get<EnqueueFailure>(outcome);
      r.outcome = BatchRigOutcome::refused;
      r.error = to_string(failure.error);
      r.detail = failure.detail;
      note_error(batch);
    }
  }
}

void BatchTable::update_running(Batch& batch, bool was_running) {
  if (was_running && batch.finished()) --running_;
}

bool BatchTable::command_finished(Fleet& fleet, std::string_view cmd_id) {
  const auto it = in_flight_.find(cmd_id);
  if (it == in_flight_.end()) return false;
  const auto [batch_ptr, index] = it->second;
  in_flight_.erase(it);
  if (batch_ptr == nullptr || index >= batch_ptr->rigs.size()) return false;
  Batch& batch = *batch_ptr;
  BatchRig& r = batch.rigs[index];
  bool ok = false;
  const bool known = fleet.read_command(r.cmd_id, [&](const CommandView& cmd) {
    ok = cmd.state == CommandState::succeeded;
    if (!ok) {
      r.error = to_string(cmd.state);
      r.detail = cmd.detail;
    }
  });
  if (!known) {
    r.error = "unknown";
    r.detail = "the command is no longer in the broker's history";
  }
  r.outcome = ok ? BatchRigOutcome::ok : BatchRigOutcome::failed;
  --batch.in_flight;
  if (!ok) note_error(batch);
  dispatch(fleet, batch);
  update_running(batch, true);
  return true;
}

const Batch* BatchTable::find(std::string_view batch_id) const {
  const auto it = batches_.find(batch_id);
  return it == batches_.end() ? nullptr : &it->second;
}

}  // namespace fleetlink::broker
