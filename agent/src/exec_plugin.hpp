#pragma once
// Executable plugins: a program named `fleetlink-<kind>` in the plugin
// directory provides command kind <kind>. Each command is one run of the
// program: the command arrives as one JSON line on stdin, stdout+stderr is the
// output, the exit code is the exit code, and an optional result line
//   {"fleetlink_result": {"status": "failed", "exit_code": 3, "detail": "..."}}
// overrides them. The full contract is in docs/PROTOCOL.md, "Executable plugins".
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "fleetlink/executor.hpp"
#include "process_groups.hpp"
#include "process_jobs.hpp"

namespace fleetlink::agent {

inline constexpr std::string_view kExecPluginPrefix = "fleetlink-";
inline constexpr std::string_view kResultLineMarker = "{\"fleetlink_result\"";
inline constexpr std::size_t kMaxResultLine = 4096;  // PIPE_BUF: one atomic write()

struct ExecPluginOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds kill_grace{std::chrono::seconds(5)};
  std::size_t max_running = 16;  // runs of one plugin at once; more are refused `failed` (busy)
  std::shared_ptr<ProcessGroupRecord> groups;  // where each run's process group is recorded (none: not)
};

// What a result line said; every field is optional.
struct ExecPluginResult {
  std::optional<msg::Status> status;  // only ok or failed are accepted
  std::optional<std::int32_t> exit_code;
  std::optional<std::string> detail;
};

// Parses one line (without its newline). Not a result line -> nullopt;
// a result line with bad contents -> an error naming the problem.
std::optional<Expected<ExecPluginResult>> parse_result_line(std::string_view line);

// Sits between the child's output and the OutputCollector: passes every byte
// through except result lines, which it keeps (the last one wins).
class ResultLineFilter {
 public:
  using Downstream = std::function<void(std::string_view)>;
  explicit ResultLineFilter(Downstream downstream);
  void feed(std::string_view bytes);
  void finish();  // end of stream: a held partial line is judged as the last line

  const std::optional<ExecPluginResult>& result() const noexcept { return result_; }
  const std::string& problem() const noexcept { return problem_; }  // a malformed result line

 private:
  void complete_held_line(std::string& out);

  Downstream downstream_;
  bool at_line_start_ = true;
  bool holding_ = false;
  std::string held_;  // at most kMaxResultLine + 1 bytes
  std::optional<ExecPluginResult> result_;
  std::string problem_;
};

// True for a valid kind name: 1-64 of a-z 0-9 _ - (starts with a letter or digit).
bool valid_plugin_kind(std::string_view kind);

class ExecPlugin final : public Executor {
 public:
  ExecPlugin(std::string kind, std::string program, ExecPluginOptions options = {});
  std::string_view kind() const override { return kind_; }
  void start(const CommandContext& ctx, std::shared_ptr<Reporter> reporter) override;
  void cancel(std::string_view cmd_id) override;
  const std::string& program() const noexcept { return program_; }

 private:
  std::string kind_;
  std::string program_;
  ExecPluginOptions options_;
  ProcessJobs jobs_;  // last member: destroyed (and joined) first
};

// The JSON line a run receives on stdin (with its trailing newline).
std::string exec_plugin_request(const CommandContext& ctx);

}  // namespace fleetlink::agent
