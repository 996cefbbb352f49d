#include "suite_executor.hpp"

#include <glob.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "fleetlink/codec.hpp"

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

OutputLog::OutputLog(std::string path) : path_(std::move(path)) {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  file_.open(path_, std::ios::binary | std::ios::trunc);
  if (!file_) error_ = "cannot write " + path_ + (ec ? ": " + ec.message() : std::string());
}

void OutputLog::write(std::string_view bytes) {
  if (!file_) return;
  file_.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!file_) error_ = "writing " + path_ + " failed (disk full?)";
}

bool OutputLog::close() {
  if (!file_.is_open()) return false;
  file_.close();
  return error_.empty();
}

void attach_artifacts(Reporter& reporter, const SuiteSpec& spec, OutputLog& log, Outcome& outcome) {
  std::vector<std::string> problems;
  if (!log.path().empty()) {
    if (log.close()) {
      reporter.attach("output.log", log.path());
    } else {
      problems.push_back("output.log not kept: " + log.error());
    }
  }
  for (const std::string& pattern : spec.artifacts) {
    const std::string full = pattern.front() == '/' || spec.cwd.empty() ? pattern : spec.cwd + "/" + pattern;
    glob_t g{};
    if (::glob(full.c_str(), GLOB_NOSORT, nullptr, &g) == 0) {
      for (std::size_t i = 0; i < g.gl_pathc; ++i) {
        struct stat st {};
        if (::stat(g.gl_pathv[i], &st) != 0 || !S_ISREG(st.st_mode)) continue;
        const std::string name = std::filesystem::path(g.gl_pathv[i]).filename().string();
        if (!reporter.attach(name, g.gl_pathv[i])) problems.push_back("artifact " + name + " not attached (bad or repeated name, or too many)");
      }
    }
    globfree(&g);
  }
  for (const auto& p : problems) {
    if (outcome.detail.size() + p.size() + 2 > kMaxDetailBytes) break;
    outcome.detail += (outcome.detail.empty() ? "" : "; ") + p;
  }
}

SuiteExecutor::SuiteExecutor(SuiteTable suites, std::size_t max_running, std::shared_ptr<ProcessGroupRecord> groups,
                             std::string artifact_root)
    : suites_(std::move(suites)), groups_(std::move(groups)), artifact_root_(std::move(artifact_root)),
      jobs_(max_running) {}

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
  const std::string out_dir = artifact_root_.empty() ? std::string() : artifact_root_ + "/" + ctx.cmd_id;
  jobs_.launch(ctx.cmd_id, reporter, [spec, reporter, groups = groups_, cmd_id = ctx.cmd_id, out_dir](ProcessRunner& runner) {
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
    OutputLog log(out_dir.empty() || !spec.output_artifact ? std::string() : out_dir + "/output.log");
    auto run = runner.run(s, limits, {}, [&output, &log](std::string_view b) {
      output.feed(b);
      log.write(b);
    });
    if (!run) return start_failure("suite " + spec.id + " could not start: " + run.error().detail);
    Outcome outcome = outcome_from_run(*run, output, "suite " + spec.id);
    if (!out_dir.empty()) attach_artifacts(*reporter, spec, log, outcome);
    return outcome;
  });
}

void SuiteExecutor::cancel(std::string_view cmd_id) { jobs_.cancel(cmd_id); }

}  // namespace fleetlink::agent
