// fleetlink-broker: parse the configuration, run the data plane and the
// control API on one libuv loop, exit 0 after a drain.
#include <uv.h>

#include <csignal>
#include <cstdio>
#include <string>

#include "app/broker_app.hpp"
#include "app/config.hpp"
#include "app/operators.hpp"
#include "app/stores.hpp"
#include "store/embedded_registry.hpp"
#include "common/log.hpp"
#include "common/log_repeat.hpp"
#include "observe/metrics.hpp"

#if defined(FLEETLINK_BROKER_MIMALLOC)
#include <mimalloc.h>
#endif

using namespace fleetlink::broker;

namespace {
// Said at start-up, so that an operator reading a heap profile knows whose malloc it was.
std::string allocator_name() {
#if defined(FLEETLINK_BROKER_MIMALLOC)
  int v = mi_version();
  return "mimalloc " + std::to_string(v / 100) + "." + std::to_string(v % 100 / 10) + "." + std::to_string(v % 10);
#else
  return "glibc malloc";
#endif
}

// --check-config: the report, then 0 when nothing is wrong, else 2. No socket, no store.
int check_config(const BrokerConfig& cfg, const ConfigReport& report) {
  const std::string src = cfg.config_file.empty() ? "(no config file; flags only)" : cfg.config_file;
  for (const auto& w : report.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  for (const auto& e : report.errors) std::fprintf(stderr, "error: %s\n", e.c_str());
  if (!report.ok()) {
    std::fprintf(stderr, "fleetlink-broker: configuration %s has %zu error(s)\n", src.c_str(), report.errors.size());
    return 2;
  }
  std::printf("fleetlink-broker: configuration %s is valid (broker %s, listen %s, control %s, store %s)\n",
              src.c_str(), cfg.broker_id.c_str(), cfg.listen.to_string().c_str(), cfg.control.to_string().c_str(),
              cfg.store.c_str());
  return 0;
}

// --hash-token: the token is the first line of stdin (a trailing CR/LF dropped);
// its hash goes to stdout, to be the third field of an operators file's line.
int hash_token() {
  std::string token;
  int c = 0;
  while ((c = std::fgetc(stdin)) != EOF && c != '\n') token.push_back(static_cast<char>(c));
  if (!token.empty() && token.back() == '\r') token.pop_back();
  if (token.empty()) {
    std::fprintf(stderr, "fleetlink-broker --hash-token: no token on stdin (give it as the first line)\n");
    return 2;
  }
  std::printf("%s\n", token_hash_text(token).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ParseOutcome parsed = parse_command_line(argc, argv);
  if (parsed.status == ParseStatus::exit) {
    std::fputs(parsed.output.c_str(), parsed.exit_code == 0 ? stdout : stderr);
    return parsed.exit_code;
  }
  if (parsed.config.hash_token) return hash_token();
  BrokerConfig cfg = std::move(parsed.config);
  ConfigReport report = std::move(parsed.report);
  fleetlink::log::set_level(cfg.log_level);
  fleetlink::log::set_repeat_policy(
      fleetlink::log::RepeatPolicy{cfg.log_repeat_limit, std::uint64_t{cfg.log_repeat_interval_s} * 1000});
  ConfigReport checked = validate(cfg);
  report.errors.insert(report.errors.end(), checked.errors.begin(), checked.errors.end());
  report.warnings.insert(report.warnings.end(), checked.warnings.begin(), checked.warnings.end());
  check_files(cfg, report);
  if (cfg.check_config) return check_config(cfg, report);
  for (const auto& w : report.warnings) FL_WARN("config: %s", w.c_str());
  if (!report.ok()) {
    for (const auto& e : report.errors) FL_ERROR("config: %s", e.c_str());
    FL_ERROR("refusing to start: %zu configuration error(s) (see fleetlink-broker --check-config)",
             report.errors.size());
    return 2;
  }
  std::signal(SIGPIPE, SIG_IGN);

  uv_loop_t loop;
  uv_loop_init(&loop);
  BrokerMetrics metrics;
  int exit_code = 0;
  {
    auto store = open_command_store(cfg);
    if (!store) {
      FL_ERROR("cannot start: command store: %s", store.error().detail.c_str());
      uv_loop_close(&loop);
      return 1;
    }
    BrokerApp broker(cfg, &loop, metrics, std::make_unique<EmbeddedRegistry>(), std::move(*store));
    auto started = broker.start();
    if (!started) {
      FL_ERROR("cannot start: %s", started.error().detail.c_str());
      broker.shutdown();
      uv_loop_close(&loop);
      return 1;
    }
    int control_port = cfg.control.port;
    if (broker.control_port() > 0) control_port = broker.control_port();
    char line[512];
    std::snprintf(line, sizeof line, "fleetlink-broker ready control=%s:%d listen=%s:%d%s",
                  cfg.control.host.c_str(), control_port, cfg.listen.host.c_str(), broker.listen_port(),
                  cfg.plain_listen.host.empty()
                      ? ""
                      : (" plain=" + cfg.plain_listen.host + ":" + std::to_string(broker.plain_port())).c_str());
    std::fprintf(stdout, "%s\n", line);
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", line);
    std::fflush(stderr);
    FL_INFO("broker id=%s strict=%d ping=%ums pong=%ums missed=%u outbox=%u store=%s state_dir=%s allocator=%s",
            cfg.broker_id.c_str(), cfg.strict ? 1 : 0, cfg.ping_interval_ms, cfg.pong_timeout_ms,
            cfg.max_missed_pongs, cfg.outbox_capacity, cfg.store.c_str(),
            cfg.store == "none" ? "-" : cfg.state_dir.c_str(), allocator_name().c_str());
    uv_run(&loop, UV_RUN_DEFAULT);
    exit_code = broker.exit_code();
    broker.shutdown();
  }
  uv_run(&loop, UV_RUN_NOWAIT);
  if (uv_loop_close(&loop) != 0) {
    // lws may still hold a handle it closes late; one more turn, then give up quietly.
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
  }
  fleetlink::log::flush_suppressed(true);
  FL_INFO("exit %d", exit_code);
  return exit_code;
}
