#pragma once
// A scriptable in-memory Fleet for the control API's unit tests: the real
// data plane is exercised by the integration tests.
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "control/http_message.hpp"
#include "fleet/fleet.hpp"

namespace fleetlink::broker::testing {

class FakeFleet final : public Fleet {
 public:
  std::map<std::string, RigView, std::less<>> rig_map;
  std::map<std::string, CommandView, std::less<>> commands;
  std::optional<EnqueueFailure> next_failure;  // returned by the next enqueue, then cleared
  std::vector<std::pair<std::string, StringMap>> enqueued;  // kind, args
  std::vector<CommandRequest> requests;                      // every request, in full
  std::uint64_t persisted = 0;                               // persist() calls (the batch numbers)
  std::function<void()> on_persist;                          // called by each persist()
  bool persist_fails = false;
  std::vector<std::string> reconnected;
  std::vector<std::string> cancelled;   // cmd_ids passed to cancel()
  bool cancel_accepts = true;           // false: a cancel is already pending
  std::optional<std::chrono::milliseconds> drain_window;
  bool is_ready = true;
  EventBus bus;
  std::uint64_t next_seq = 1;
  bool record_enqueued = false;  // enqueue() also puts the command in `commands` (queued)
  mutable int list_calls = 0;    // list_commands() calls

  // Several brokers: rigs connected elsewhere get their commands through
  // enqueue_routed, whose answers the test gives (routed, oldest first).
  std::set<std::string, std::less<>> elsewhere;
  std::deque<std::pair<CommandRequest, std::function<void(RoutedOutcome)>>> routed;
  // A store that answers later: command_then's answers wait in `reads` for the test.
  bool later = false;
  mutable std::deque<std::pair<std::string, std::function<void(std::optional<CommandView>)>>> reads;
  // Shared jobs: hold_job's answers wait in `holds` for the test.
  bool shared = false;
  struct HoldCall {
    std::string job_id;
    bool take = false;
    std::function<void(JobHold)> done;
  };
  std::deque<HoldCall> holds;

  bool routes_elsewhere(std::string_view rig_id) const override { return elsewhere.count(rig_id) != 0; }
  void enqueue_routed(CommandRequest request, std::function<void(RoutedOutcome)> done) override {
    if (!routes_elsewhere(request.rig_id)) return Fleet::enqueue_routed(std::move(request), std::move(done));
    routed.emplace_back(std::move(request), std::move(done));
  }
  // The oldest routed command gets its owner's answer.
  void answer_routed(EnqueueOutcome outcome) {
    auto [req, done] = std::move(routed.front());
    routed.pop_front();
    done(RoutedOutcome{std::move(outcome), std::nullopt, "broker-b"});
  }
  bool reads_later() const override { return later; }
  void command_then(std::string_view cmd_id, std::function<void(std::optional<CommandView>)> done) const override {
    if (!later) return done(command(cmd_id));
    reads.emplace_back(std::string(cmd_id), std::move(done));
  }
  // Every waiting read gets what `commands` holds now.
  void answer_reads() {
    while (!reads.empty()) {
      auto [id, done] = std::move(reads.front());
      reads.pop_front();
      done(command(id));
    }
  }
  bool shares_jobs() const override { return shared; }
  void hold_job(std::string_view job_id, bool take, std::function<void(JobHold)> done) override {
    if (!shared) return Fleet::hold_job(job_id, take, std::move(done));
    holds.push_back({std::string(job_id), take, std::move(done)});
  }
  void answer_hold(bool held, std::string holder = {}) {
    HoldCall c = std::move(holds.front());
    holds.pop_front();
    c.done(JobHold{held, held ? broker_id() : std::move(holder), std::nullopt});
  }

  EnqueueOutcome enqueue(CommandRequest request) override {
    if (next_failure) {
      EnqueueFailure f = *next_failure;
      next_failure.reset();
      return f;
    }
    const std::string rig_id = request.rig_id;
    if (rig_map.find(rig_id) == rig_map.end() && !request.hold) {
      EnqueueFailure f;
      f.error = EnqueueError::unknown_rig;
      f.rig_id = rig_id;
      f.detail = "rig " + rig_id + " has never connected";
      return f;
    }
    enqueued.emplace_back(request.kind, request.args);
    requests.push_back(std::move(request));
    EnqueueOk ok;
    ok.cmd_id = "cmd-" + std::to_string(next_seq);
    ok.rig_id = rig_id;
    ok.seq = next_seq++;
    if (record_enqueued) {
      const CommandRequest& r = requests.back();
      CommandView v;
      v.cmd_id = ok.cmd_id;
      v.rig_id = rig_id;
      v.kind = r.kind;
      v.args = r.args;
      v.job_id = r.job_id;
      v.state = CommandState::queued;
      commands[ok.cmd_id] = v;
    }
    return ok;
  }
  std::uint64_t persist() override {
    if (on_persist) on_persist();
    return ++persisted;
  }
  void when_recorded(std::uint64_t, std::function<void(const Expected<void>&)> then) override {
    if (persist_fails) return then(Expected<void>{make_error(Errc::io, "disk full (test)")});
    then(Expected<void>{});
  }
  std::vector<CommandView> list_commands(const CommandQuery& q) const override {
    ++list_calls;
    std::vector<CommandView> out;
    for (auto it = commands.rbegin(); it != commands.rend() && out.size() < q.limit; ++it) {
      const CommandView& v = it->second;
      if (!q.rig_id.empty() && v.rig_id != q.rig_id) continue;
      if (q.state && v.state != *q.state) continue;
      if (!q.job_id.empty() && v.job_id != q.job_id) continue;
      if (!q.before_cmd_id.empty() && v.cmd_id >= q.before_cmd_id) continue;
      out.push_back(v);
    }
    return out;
  }
  std::vector<RigView> rigs() const override {
    std::vector<RigView> out;
    for (const auto& [id, r] : rig_map) out.push_back(r);
    return out;
  }
  std::optional<RigView> rig(std::string_view rig_id) const override {
    auto it = rig_map.find(rig_id);
    if (it == rig_map.end()) return std::nullopt;
    return it->second;
  }
  std::optional<CommandView> command(std::string_view cmd_id) const override {
    auto it = commands.find(cmd_id);
    if (it == commands.end()) return std::nullopt;
    return it->second;
  }
  bool force_reconnect(std::string_view rig_id) override {
    if (rig_map.find(rig_id) == rig_map.end()) return false;
    reconnected.emplace_back(rig_id);
    return true;
  }
  CancelOutcome cancel(std::string_view cmd_id) override {
    const auto it = commands.find(cmd_id);
    if (it == commands.end()) return CancelOutcome::unknown;
    if (is_final(it->second.state)) return CancelOutcome::finished;
    if (!cancel_accepts) return CancelOutcome::pending;
    cancelled.emplace_back(cmd_id);
    return CancelOutcome::requested;
  }
  void start_drain(std::chrono::milliseconds window) override { drain_window = window; }
  bool draining() const override { return drain_window.has_value(); }
  bool ready() const override { return is_ready; }
  std::string broker_id() const override { return "broker-test"; }
  EventBus& events() override { return bus; }

  void emit(const FleetEvent& e) { bus.emit(e); }
};

inline RigView make_rig(const std::string& id) {
  RigView r;
  r.rig_id = id;
  r.state = "connected";
  r.boot_id = "01938a2b-0000-7000-8000-000000000001";
  r.agent_version = "0.1.0";
  r.labels = {{"lab", "b2"}};
  r.kinds = {"dmesg", "reboot"};
  r.peer = "127.0.0.1:40000";
  r.connected_at_ms = 1'800'000'000'000ULL;
  r.last_seen_ms = 1'800'000'001'000ULL;
  r.outbox_capacity = 128;
  return r;
}

// What the transport does with an answer that promises a store batch: the
// answer once it is durable, or its store_unavailable answer.
inline HttpResponse settle_record(HttpResponse r, Fleet& fleet) {
  if (r.after_record == 0) return r;
  std::optional<Expected<void>> outcome;
  fleet.when_recorded(r.after_record, [&](const Expected<void>& kept) { outcome = kept; });
  r.after_record = 0;
  if (outcome && !*outcome && r.if_unrecorded) return r.if_unrecorded(outcome->error());
  return r;
}

}  // namespace fleetlink::broker::testing
