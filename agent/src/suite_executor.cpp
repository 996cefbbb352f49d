#include "suite_executor.hpp"

#include <chrono>

#include "process_output.hpp"

namespace fleetlink::agent {
namespace {

std::string known_ids(const SuiteTable& suites) {
  std::string out;
  std::size_t n = 0;
  for (const auto& [id, spec] : suites) {
    if (n++ == 20) {
      out += ", ...";
      break;
    }
    if (!out.empty()) out += ", ";
    out += id;
  }
  return out;
}

}  // namespace

SuiteExecutor::SuiteExecutor(SuiteTable suites, std::size_t max_running, std::shared_ptr<ProcessGroupRecord> groups)
    : suites_(std::move(suites)), groups_(std::move(groups)), jobs_(max_running) {}

void SuiteExecutor::start(const CommandContext& ctx, std::shared_ptr<Reporter> reporter) {
  auto arg = ctx.args.find("suite");
  if (arg == ctx.args.end() || arg->second.empty()) {
    reporter->finish(start_failure("missing argument \"suite\" (the suite id)"));
    return;
  }
  auto it = suites_.find(arg->second);
  if (it == suites_.end()) {
    reporter->finish(start_failure(
        suites_.empty() ? "unknown suite '" + arg->second + "': no suites configured (--suites)"
                        : "unknown suite '" + arg->second + "' (configured: " +
                              known_ids(suites_) + ")"));
    return;
  }
  const SuiteSpec spec = it->second;
  jobs_.launch(ctx.cmd_id, reporter, [spec, reporter, groups = groups_, cmd_id = ctx.cmd_id](ProcessRunner& runner) {
    SpawnSpec s;
    s.group_record = groups.get();
    s.cmd_id = cmd_id;
    s.argv = spec.argv;
    s.cwd = spec.cwd;
    s.env = spec.env;
    s.user = spec.user;
    RunLimits limits;
    limits.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(spec.timeout);
    limits.kill_grace = std::chrono::duration_cast<std::chrono::milliseconds>(spec.kill_grace);
    OutputCollector output(reporter);
    auto run = runner.run(s, limits, {}, [&output](std::string_view b) { output.feed(b); });
    if (!run) return start_failure("suite " + spec.id + " could not start: " + run.error().detail);
    return outcome_from_run(*run, output, "suite " + spec.id);
  });
}

void SuiteExecutor::cancel(std::string_view cmd_id) { jobs_.cancel(cmd_id); }

}  // namespace fleetlink::agent
