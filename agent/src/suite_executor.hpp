#pragma once
// Command kind "suite": args {"suite": "<id>"} runs the configured suite as its
// own process group, streams its output, reports its exit code or signal, kills
// the group on timeout (TERM, then KILL after the grace period) and on cancel.
#include <memory>
#include <string_view>

#include "fleetlink/executor.hpp"
#include "process_groups.hpp"
#include "process_jobs.hpp"
#include "suite_config.hpp"

namespace fleetlink::agent {

class SuiteExecutor final : public Executor {
 public:
  // max_running: suite runs at once (all suites together); more are refused `failed` (busy).
  // groups: where each run's process group is recorded (none: not recorded).
  explicit SuiteExecutor(SuiteTable suites, std::size_t max_running = 8,
                         std::shared_ptr<ProcessGroupRecord> groups = nullptr);
  ~SuiteExecutor() override = default;  // ProcessJobs cancels and waits for running suites

  std::string_view kind() const override { return "suite"; }
  void start(const CommandContext& ctx, std::shared_ptr<Reporter> reporter) override;
  void cancel(std::string_view cmd_id) override;

  const SuiteTable& suites() const noexcept { return suites_; }
  std::size_t running() const { return jobs_.running(); }

 private:
  SuiteTable suites_;
  std::shared_ptr<ProcessGroupRecord> groups_;
  ProcessJobs jobs_;  // last member: destroyed (and joined) first
};

}  // namespace fleetlink::agent
