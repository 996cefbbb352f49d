// fleetlink-agent entry point: configuration, signals, and the agent loop.
// Exit codes: 0 clean stop (or --check-config found nothing wrong, --version),
// 2 configuration error, 1 other fatal error.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "agent.hpp"
#include "common/log.hpp"
#include "common/log_repeat.hpp"
#include "config.hpp"

namespace {

int g_signal_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  const int saved = errno;
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

int check_config(const fleetlink::agent::AgentConfig& cfg) {
  using namespace fleetlink::agent;
  ConfigReport report = validate_config(cfg);
  if (report.ok()) {
    std::vector<std::string> warnings;
    auto reg = build_registry(cfg, &warnings);
    if (!reg) {
      report.errors.push_back(reg.error().detail);
    } else {
      auto allowed = allowed_kinds(cfg, **reg);
      if (!allowed) {
        report.errors.push_back(allowed.error().detail);
      } else {
        // The kinds the HELLO will offer, against the protocol's limits.
        const std::vector<std::string> kinds(allowed->begin(), allowed->end());
        if (std::string problem = hello_config_problem(cfg, kinds); !problem.empty())
          report.errors.push_back(problem);
      }
    }
    for (auto& w : warnings) report.warnings.push_back(w);
  }
  const std::string src = cfg.config_file.empty() ? "(no config file; flags only)" : cfg.config_file;
  for (const auto& w : report.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  for (const auto& e : report.errors) std::fprintf(stderr, "error: %s\n", e.c_str());
  if (!report.ok()) {
    std::fprintf(stderr, "fleetlink-agent: configuration %s has %zu error(s)\n", src.c_str(),
                 report.errors.size());
    return 2;
  }
  std::printf("fleetlink-agent: configuration %s is valid (rig %s)\n", src.c_str(), cfg.rig_id.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fleetlink::agent;
  ParseOutcome parsed = parse_command_line(argc, argv);
  if (parsed.status == ParseStatus::exit) {
    std::fputs(parsed.output.c_str(), parsed.exit_code == 0 ? stdout : stderr);
    return parsed.exit_code;
  }
  AgentConfig& cfg = parsed.config;
  namespace log = fleetlink::log;
  log::detect_journal();
  // validate_config() reports a level that does not parse; until then, info.
  log::Level level = log::Level::info;
  log::parse_level(cfg.log_level, level);
  log::set_level(level);
  log::set_repeat_policy(log::RepeatPolicy{cfg.log_repeat_limit, std::uint64_t{cfg.log_repeat_interval_s} * 1000});

  if (cfg.check_config) return check_config(cfg);

  const ConfigReport report = validate_config(cfg);
  for (const auto& w : report.warnings) FL_WARN("config: %s", w.c_str());
  if (!report.ok()) {
    for (const auto& e : report.errors) FL_ERROR("config: %s", e.c_str());
    FL_ERROR("refusing to start: %zu configuration error(s) (see fleetlink-agent --check-config)",
             report.errors.size());
    return 2;
  }

  ::signal(SIGPIPE, SIG_IGN);
  if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) {
    FL_ERROR("pipe: %s", std::strerror(errno));
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);

  Agent agent(cfg);
  if (auto ok = agent.init(); !ok) {
    FL_ERROR("cannot start: %s", ok.error().detail.c_str());
    return ok.error().code == fleetlink::Errc::invalid_argument ? 2 : 1;
  }
  std::thread signals([&agent] {
    unsigned char b = 0;
    for (;;) {
      const ssize_t n = ::read(g_signal_pipe[0], &b, 1);
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    if (b != 0) FL_INFO("signal %d: stopping", static_cast<int>(b));
    agent.stop();
  });
  const int rc = agent.run();
  const unsigned char zero = 0;
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &zero, 1);
  signals.join();
  log::flush_suppressed(true);
  FL_INFO("stopped");
  return rc;
}
