#pragma once
// A CommandStore in memory for the fleet core's unit tests: it keeps what is
// committed (what was put but not committed is lost by a "crash"), so a test can
// start a second FleetCore on the same store as a broker restart would, or two
// cores on one store as two brokers sharing a state directory.
#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "fleet/lifecycle.hpp"
#include "store/command_store.hpp"

namespace fleetlink::broker::testing {

class MemoryStore final : public CommandStore {
 public:
  struct Shared {
    std::map<std::string, CommandView> commands;
    std::map<std::string, RigRecord> rigs;
    std::map<std::string, JobRecord> jobs;
    std::uint64_t generation = 0;  // bumped by every commit
    int commits = 0;
    bool fail_commits = false;
  };

  explicit MemoryStore(std::shared_ptr<Shared> shared = std::make_shared<Shared>()) : shared_(std::move(shared)) {}
  std::shared_ptr<Shared> shared() const { return shared_; }

  std::string_view name() const noexcept override { return "memory"; }
  bool durable() const noexcept override { return true; }
  bool up() const noexcept override { return true; }

  Expected<StoreSnapshot> load() override {
    StoreSnapshot s;
    for (const auto& [id, v] : shared_->commands)
      if (!is_final(v.state)) s.open_commands.push_back(v);
    for (const auto& [id, r] : shared_->rigs) s.rigs.push_back(r);
    for (const auto& [id, j] : shared_->jobs)
      if (!j.finished) s.open_jobs.push_back(j);
    return s;
  }
  void put_command(const CommandView& v, bool with_result) override {
    CommandView copy = v;
    if (!with_result) {
      copy.result.reset();
      copy.nack.reset();
      copy.streamed_output.clear();
    }
    pending_.push_back(std::move(copy));
  }
  void put_rig(const RigRecord& r) override { pending_rigs_.push_back(r); }
  void put_job(const JobRecord& j) override { pending_jobs_.push_back(j); }
  Expected<void> commit() override {
    if (shared_->fail_commits) return make_error(Errc::io, "disk full (test)");
    while (!batches_.empty()) finish_next();
    apply(pending_, pending_rigs_, pending_jobs_);
    return {};
  }

  // Manual batches: submit() only queues, and the test says when each batch is
  // durable (finish_next), as a store with a writer thread would, later.
  bool manual = false;
  std::uint64_t submit() override {
    if (!manual) return CommandStore::submit();
    if (!pending()) return submitted_;
    batches_.push_back(Batch{++submitted_, std::move(pending_), std::move(pending_rigs_), std::move(pending_jobs_)});
    pending_.clear();
    pending_rigs_.clear();
    pending_jobs_.clear();
    return submitted_;
  }
  // The oldest queued batch becomes durable (or fails once, staying queued).
  void finish_next(bool ok = true) {
    if (batches_.empty()) return;
    Batch& b = batches_.front();
    if (!ok) {
      outcomes_.push_back({b.number, Expected<void>{make_error(Errc::io, "disk full (test)")}});
      return;
    }
    apply(b.commands, b.rigs, b.jobs);
    durable_ = b.number;
    outcomes_.push_back({b.number, Expected<void>{}});
    batches_.pop_front();
  }
  std::size_t queued_batches() const { return batches_.size(); }
  std::uint64_t durable_through() const noexcept override {
    return manual ? durable_ : CommandStore::durable_through();
  }
  std::vector<BatchOutcome> take_outcomes() override {
    if (!manual) return CommandStore::take_outcomes();
    std::vector<BatchOutcome> out;
    out.swap(outcomes_);
    return out;
  }

  // interval_slice_rows(): 0, every interval's steps at once (the default).
  std::size_t slice_rows = 0;
  std::size_t interval_slice_rows() const noexcept override { return slice_rows; }

  bool pending() const noexcept override {
    return !pending_.empty() || !pending_rigs_.empty() || !pending_jobs_.empty();
  }
  void find(std::string_view cmd_id, CommandCallback done) override {
    const auto it = shared_->commands.find(std::string(cmd_id));
    done(it == shared_->commands.end() ? std::nullopt : std::optional<CommandView>(it->second));
  }
  void find_by_key(std::string_view key, CommandCallback done) override {
    for (const auto& [id, v] : shared_->commands)
      if (!key.empty() && v.idempotency_key == key) return done(v);
    done(std::nullopt);
  }
  void open_commands_of(std::string_view rig_id, CommandsCallback done) override {
    std::vector<CommandView> out;
    for (const auto& [id, v] : shared_->commands)
      if (v.rig_id == rig_id && !is_final(v.state)) out.push_back(v);
    done(std::move(out));
  }
  // Reads see this store's pending writes over what is committed, as SqliteStore's do.
  void list_commands(const CommandQuery& q, CommandsCallback done) override {
    std::map<std::string, CommandView> seen = shared_->commands;
    for (const CommandView& v : pending_) {
      auto [it, fresh] = seen.emplace(v.cmd_id, v);
      if (!fresh && !is_final(it->second.state) && lifecycle::rank(v.state) >= lifecycle::rank(it->second.state))
        it->second = v;
    }
    std::vector<CommandView> out;
    for (auto it = seen.rbegin(); it != seen.rend() && out.size() < q.limit; ++it) {
      const CommandView& v = it->second;
      if (!q.rig_id.empty() && v.rig_id != q.rig_id) continue;
      if (q.state && v.state != *q.state) continue;
      if (!q.job_id.empty() && v.job_id != q.job_id) continue;
      if (v.enqueued_at_ms < q.since_ms) continue;
      if (!q.before_cmd_id.empty() && v.cmd_id >= q.before_cmd_id) continue;
      out.push_back(v);
    }
    done(std::move(out));
  }
  void find_job(std::string_view job_id, JobCallback done) override {
    const auto it = shared_->jobs.find(std::string(job_id));
    done(it == shared_->jobs.end() ? std::nullopt : std::optional<JobRecord>(it->second));
  }
  void list_jobs(const JobQuery&, JobsCallback done) override {
    std::vector<JobRecord> out;
    for (const auto& [id, j] : shared_->jobs) out.push_back(j);
    done(std::move(out));
  }
  // Commits by other instances on the same Shared: what a second broker wrote.
  std::uint64_t foreign_writes() override { return shared_->generation - own_; }
  std::size_t prune(const RetentionPolicy&, std::uint64_t) override { return 0; }

  // What the store holds of a command (committed only).
  std::optional<CommandView> stored(const std::string& cmd_id) const {
    const auto it = shared_->commands.find(cmd_id);
    return it == shared_->commands.end() ? std::nullopt : std::optional<CommandView>(it->second);
  }

 private:
  std::shared_ptr<Shared> shared_;
  std::vector<CommandView> pending_;
  std::vector<RigRecord> pending_rigs_;
  std::vector<JobRecord> pending_jobs_;
  std::uint64_t own_ = 0;
  struct Batch {
    std::uint64_t number = 0;
    std::vector<CommandView> commands;
    std::vector<RigRecord> rigs;
    std::vector<JobRecord> jobs;
  };
  std::deque<Batch> batches_;
  std::uint64_t submitted_ = 0;
  std::uint64_t durable_ = 0;
  std::vector<BatchOutcome> outcomes_;

  void apply(std::vector<CommandView>& commands, std::vector<RigRecord>& rigs, std::vector<JobRecord>& jobs) {
    for (CommandView& v : commands) {
      auto it = shared_->commands.find(v.cmd_id);
      if (it == shared_->commands.end()) {
        shared_->commands.emplace(v.cmd_id, std::move(v));
        continue;
      }
      CommandView& old = it->second;
      if (is_final(old.state) || lifecycle::rank(v.state) < lifecycle::rank(old.state)) {
        if (v.result && !old.result) old.result = v.result;  // a late result is kept
        continue;
      }
      if (!v.result && old.result) v.result = old.result;
      if (!v.nack && old.nack) v.nack = old.nack;
      old = std::move(v);
    }
    for (RigRecord& r : rigs) shared_->rigs[r.rig_id] = std::move(r);
    for (JobRecord& j : jobs) shared_->jobs[j.job_id] = std::move(j);
    const bool wrote = !commands.empty() || !rigs.empty() || !jobs.empty();
    commands.clear();
    rigs.clear();
    jobs.clear();
    if (wrote) {
      ++shared_->generation;
      ++own_;
      ++shared_->commits;
    }
  }
};

}  // namespace fleetlink::broker::testing
