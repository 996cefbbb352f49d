// fleetlink-broker: parse the configuration, run the data plane and the
// control API on one libuv loop, exit 0 after a drain.
#include <uv.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>

#include "app/broker_app.hpp"
#include "app/config.hpp"
#include "app/stores.hpp"
#include "store/embedded_registry.hpp"
#include "common/log.hpp"
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
}  // namespace

int main(int argc, char** argv) {
  auto parsed = parse_command_line(argc, argv);
  if (auto* code = std::get_if<int>(&parsed)) return *code;
  BrokerConfig cfg = std::get<BrokerConfig>(std::move(parsed));
  fleetlink::log::set_level(cfg.log_level);
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
  FL_INFO("exit %d", exit_code);
  return exit_code;
}
