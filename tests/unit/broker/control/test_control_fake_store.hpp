#pragma once
// A CommandStore for the control plane's unit tests: it keeps jobs (what the
// control plane writes), committed or not, and answers job queries like the
// SQLite store (newest first, by finished / since / before / limit). Commands
// live in the FakeFleet.
#include <map>
#include <string>
#include <vector>

#include "store/command_store.hpp"

namespace fleetlink::broker::testing {

class FakeJobStore final : public CommandStore {
 public:
  std::map<std::string, JobRecord, std::less<>> jobs;  // what a reader sees (writes are visible at once)
  std::vector<JobRecord> puts;                         // every put_job, in order
  bool is_durable = true;

  std::string_view name() const noexcept override { return "fake"; }
  bool durable() const noexcept override { return is_durable; }
  bool up() const noexcept override { return true; }
  Expected<StoreSnapshot> load() override {
    StoreSnapshot s;
    for (const auto& [id, j] : jobs)
      if (!j.finished) s.open_jobs.push_back(j);
    return s;
  }
  void put_command(const CommandView&, bool) override {}
  void put_rig(const RigRecord&) override {}
  void put_job(const JobRecord& j) override {
    puts.push_back(j);
    // A finished job's record is not changed again (SqliteStore's combine()).
    if (auto it = jobs.find(j.job_id); it != jobs.end() && it->second.finished) return;
    jobs[j.job_id] = j;
  }
  Expected<void> commit() override { return {}; }
  bool pending() const noexcept override { return false; }
  void find(std::string_view, CommandCallback done) override { done(std::nullopt); }
  void find_by_key(std::string_view, CommandCallback done) override { done(std::nullopt); }
  void open_commands_of(std::string_view, CommandsCallback done) override { done({}); }
  void list_commands(const CommandQuery&, CommandsCallback done) override { done({}); }
  void find_job(std::string_view job_id, JobCallback done) override {
    const auto it = jobs.find(job_id);
    done(it == jobs.end() ? std::nullopt : std::optional<JobRecord>(it->second));
  }
  void list_jobs(const JobQuery& q, JobsCallback done) override {
    std::vector<JobRecord> out;
    for (auto it = jobs.rbegin(); it != jobs.rend() && out.size() < q.limit; ++it) {
      const JobRecord& j = it->second;
      if (q.finished && j.finished != *q.finished) continue;
      if (j.created_at_ms < q.since_ms) continue;
      if (!q.before_job_id.empty() && j.job_id >= q.before_job_id) continue;
      out.push_back(j);
    }
    done(std::move(out));
  }
  std::uint64_t foreign_writes() override { return 0; }
  std::size_t prune(const RetentionPolicy&, std::uint64_t) override { return 0; }
};

}  // namespace fleetlink::broker::testing
