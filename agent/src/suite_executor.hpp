#pragma once
// Command kind "suite": args {"suite": "<id>"} runs the configured suite as its
// own process group, streams its output, reports its exit code or signal, kills
// the group on timeout (TERM, then KILL after the grace period) and on cancel.
#include <fstream>
#include <memory>
#include <string>
#include <string_view>

#include "fleetlink/executor.hpp"
#include "process_groups.hpp"
#include "process_jobs.hpp"
#include "suite_config.hpp"

namespace fleetlink::agent {

// A run's full combined output, written as it streams (the output.log artifact).
class OutputLog {
 public:
  explicit OutputLog(std::string path);  // "": keeps nothing
  void write(std::string_view bytes);
  bool close();  // true: complete
  const std::string& path() const noexcept { return path_; }
  const std::string& error() const noexcept { return error_; }

 private:
  std::string path_;
  std::ofstream file_;
  std::string error_;
};

// After a run: attaches output.log and the files the suite's `artifacts` globs match.
void attach_artifacts(Reporter& reporter, const SuiteSpec& spec, OutputLog& log, Outcome& outcome);

class SuiteExecutor final : public Executor {
 public:
  static constexpr std::size_t kDefaultMaxRunning = 8;
  // max_running: suite runs at once (all suites together); more are refused `failed` (busy).
  // groups: where each run's process group is recorded (none: not recorded).
  // artifact_root: where a run's full output is written (<root>/<cmd_id>/output.log) to
  // be attached as an artifact; empty: no artifacts are attached.
  explicit SuiteExecutor(SuiteTable suites, std::size_t max_running = kDefaultMaxRunning,
                         std::shared_ptr<ProcessGroupRecord> groups = nullptr, std::string artifact_root = {});
  ~SuiteExecutor() override = default;  // ProcessJobs cancels and waits for running suites

  std::string_view kind() const override { return "suite"; }
  void start(const CommandContext& ctx, std::shared_ptr<Reporter> reporter) override;
  void cancel(std::string_view cmd_id) override;

  const SuiteTable& suites() const noexcept { return suites_; }
  std::size_t running() const { return jobs_.running(); }

 private:
  SuiteTable suites_;
  std::shared_ptr<ProcessGroupRecord> groups_;
  std::string artifact_root_;
  ProcessJobs jobs_;  // last member: destroyed (and joined) first
};

}  // namespace fleetlink::agent
