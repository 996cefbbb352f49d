#include "app/config.hpp"

#include <arpa/inet.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

namespace fleetlink::broker {

namespace {

std::string default_hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == 0) return "broker";
  return buf;
}

std::string trim(std::string s) {
  auto b = s.find_first_not_of(" \t\r\n");
  auto e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string{} : s.substr(b, e - b + 1);
}

}  // namespace

ParseOutcome parse_command_line(int argc, char** argv) {
  BrokerConfig cfg;
  CLI::App app{"fleetlink-broker: holds the rigs' WebSocket connections and routes commands"};
  app.set_config("--config", "", "config file (INI/TOML); every flag is also a key");
  app.allow_config_extras(CLI::config_extras_mode::error);  // a misspelt key must not be ignored
  std::string listen = "0.0.0.0:8443", plain_listen, control = "127.0.0.1:8080";
  std::string token_file, log_level = "info";
  app.add_option("--listen", listen, "wss listener for rigs (path /agent)");
  app.add_option("--cert", cfg.cert, "server certificate (PEM)");
  app.add_option("--key", cfg.key, "server private key (PEM)");
  app.add_option("--ca", cfg.ca, "CA that signs rig certificates (mTLS required)");
  app.add_option("--plain-listen", plain_listen, "plain ws listener, loopback only (bench/dev)");
  app.add_option("--control", control, "HTTP control API listener");
  app.add_option("--control-token", cfg.control_token, "bearer token for the control API");
  app.add_option("--control-token-file", token_file, "file holding the control API token");
  app.add_option("--broker-id", cfg.broker_id, "this broker's id (default: hostname)");
  app.add_option("--ping-interval-ms", cfg.ping_interval_ms)->check(CLI::Range(1u, 3600000u));
  app.add_option("--pong-timeout-ms", cfg.pong_timeout_ms)->check(CLI::Range(1u, 3600000u));
  app.add_option("--max-missed-pongs", cfg.max_missed_pongs)->check(CLI::Range(1u, 1000u));
  app.add_option("--unresponsive-after-ms", cfg.unresponsive_after_ms,
                 "a rig whose oldest unacknowledged command waits this long is shown unresponsive")
      ->check(CLI::Range(100u, 3600000u));
  app.add_option("--hello-timeout-ms", cfg.hello_timeout_ms)->check(CLI::Range(1u, 3600000u));
  app.add_option("--outbox-capacity", cfg.outbox_capacity)->check(CLI::Range(1u, 1000000u));
  app.add_option("--max-frame-bytes", cfg.max_frame_bytes)->check(CLI::Range(256u, 64u << 20));
  app.add_option("--ws-rx-buffer-bytes", cfg.ws_rx_buffer_bytes,
                 "receive buffer per rig connection: the most read from a rig per wakeup")
      ->check(CLI::Range(128u, 65536u));
  app.add_option("--accept-rate", cfg.accept_rate, "new connections per second")->check(CLI::PositiveNumber);
  app.add_option("--accept-burst", cfg.accept_burst)->check(CLI::PositiveNumber);
  app.add_option("--retry-after-min-s", cfg.retry_after_min_s);
  app.add_option("--retry-after-max-s", cfg.retry_after_max_s);
  app.add_option("--max-pending-handshakes", cfg.max_pending_handshakes,
                 "accepted sockets whose TLS handshake/upgrade may run at once; the rest wait in the backlog")
      ->check(CLI::Range(1u, 1000000u));
  app.add_option("--tls-accept-timeout-s", cfg.tls_accept_timeout_s,
                 "a TLS handshake (and other lws-level waits) not finished by then is dropped")
      ->check(CLI::Range(1u, 3600u));
  app.add_option("--tls-ticket-key-file", cfg.tls_ticket_key_file,
                 "TLS 1.3 session tickets with this key (made 0600 if missing): rigs resume after a restart");
  app.add_option("--tls-ticket-lifetime-s", cfg.tls_ticket_lifetime_s, "how long a session ticket may be resumed")
      ->check(CLI::Range(60u, 604800u));
  app.add_option("--rig-rate", cfg.rig_rate, "inbound frames/s per connection")->check(CLI::PositiveNumber);
  app.add_option("--rig-burst", cfg.rig_burst)->check(CLI::PositiveNumber);
  app.add_option("--drain-window-ms", cfg.drain_window_ms);
  app.add_option("--drain-deadline-ms", cfg.drain_deadline_ms, "default: window + 5000");
  app.add_option("--command-history", cfg.command_history, "finished commands kept in memory")
      ->check(CLI::Range(1u, 10000000u));
  app.add_option("--store", cfg.store,
                 "where commands are recorded: sqlite (in --state-dir), redis (with --registry redis: shared by "
                 "every broker) or none (memory only)")
      ->check(CLI::IsMember({"sqlite", "redis", "none"}))
      ->capture_default_str();
  app.add_option("--state-dir", cfg.state_dir, "the broker's state: commands.db (and the ticket key if so set)");
  app.add_option("--store-commit-interval-ms", cfg.store_commit_interval_ms,
                 "steps of commands are committed at least this often (new commands at once)")
      ->check(CLI::Range(1u, 10000u));
  app.add_option("--store-retention-days", cfg.store_retention_days, "finished commands and jobs kept this long")
      ->check(CLI::Range(1u, 3650u));
  app.add_option("--store-max-commands", cfg.store_max_commands, "at most this many commands kept")
      ->check(CLI::Range(std::uint64_t{1000}, std::uint64_t{1000000000}));
  std::string redis;
  app.add_option("--registry", cfg.registry,
                 "who owns which rig: embedded (this broker alone) or redis (several brokers, one fleet)")
      ->check(CLI::IsMember({"embedded", "redis"}))
      ->capture_default_str();
  app.add_option("--redis", redis, "Redis for --registry redis (host:port, default 127.0.0.1:6379)");
  app.add_option("--redis-prefix", cfg.redis_prefix, "before every Redis key and channel (several fleets on one Redis)");
  app.add_option("--registry-ttl-ms", cfg.registry_ttl_ms, "a rig's registry entry lives this long unless refreshed")
      ->check(CLI::Range(3000u, 3600000u))
      ->capture_default_str();
  app.add_option("--registry-refresh-ms", cfg.registry_refresh_ms, "registry entries of connected rigs are refreshed this often")
      ->check(CLI::Range(1000u, 3600000u))
      ->capture_default_str();
  app.add_option("--mesh-answer-ms", cfg.mesh_answer_ms,
                 "another broker's answer to a routed command, cancel or reconnect is awaited this long")
      ->check(CLI::Range(100u, 60000u))
      ->capture_default_str();
  app.add_option("--reconcile-grace-ms", cfg.reconcile_grace_ms,
                 "a rig back with a new boot_id has this long to report its old boot's commands")
      ->check(CLI::Range(1u, 3600000u));
  app.add_option("--cancel-grace-ms", cfg.cancel_grace_ms, "a CANCEL unanswered this long ends the command cancelled")
      ->check(CLI::Range(1u, 3600000u));
  app.add_flag("--strict", cfg.strict, "unknown message types close 4422 (default: counted, ignored)");
  app.add_option("--log-level", log_level)->check(CLI::IsMember({"debug", "info", "warn", "error"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  auto l = parse_host_port(listen);
  if (!l) { std::cerr << "fleetlink-broker: --listen: " << l.error().detail << "\n"; return 2; }
  cfg.listen = *l;
  auto c = parse_host_port(control);
  if (!c) { std::cerr << "fleetlink-broker: --control: " << c.error().detail << "\n"; return 2; }
  cfg.control = *c;
  if (!plain_listen.empty()) {
    auto p = parse_host_port(plain_listen);
    if (!p) { std::cerr << "fleetlink-broker: --plain-listen: " << p.error().detail << "\n"; return 2; }
    cfg.plain_listen = *p;
  }
  if (!redis.empty()) {
    auto r = parse_host_port(redis);
    if (!r) { std::cerr << "fleetlink-broker: --redis: " << r.error().detail << "\n"; return 2; }
    cfg.redis = *r;
  }
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) { std::cerr << "fleetlink-broker: cannot read --control-token-file " << token_file << "\n"; return 2; }
    std::stringstream ss;
    ss << in.rdbuf();
    cfg.control_token = trim(ss.str());
  }
  if (cfg.broker_id.empty()) cfg.broker_id = default_hostname();
  log::parse_level(log_level, cfg.log_level);  // one of the four: checked above
  if (auto v = validate(cfg); !v) {
    std::cerr << "fleetlink-broker: " << v.error().detail << "\n";
    return 2;
  }
  return cfg;
}

Expected<void> validate(const BrokerConfig& cfg) {
  if (!cfg.plain_listen.host.empty() && !is_loopback_host(cfg.plain_listen.host))
    return make_error(Errc::invalid_argument,
                      "--plain-listen " + cfg.plain_listen.to_string() +
                          " refused: the plain ws listener is only allowed on a loopback address "
                          "(127.0.0.0/8 or ::1)");
  if (cfg.cert.empty() || cfg.key.empty() || cfg.ca.empty())
    return make_error(Errc::invalid_argument, "--cert, --key and --ca are required (rigs connect with mutual TLS)");
  if (cfg.retry_after_min_s > cfg.retry_after_max_s)
    return make_error(Errc::invalid_argument, "--retry-after-min-s is larger than --retry-after-max-s");
  if (cfg.outbox_capacity == 0) return make_error(Errc::invalid_argument, "--outbox-capacity must be at least 1");
  if (cfg.store == "redis" && cfg.registry != "redis")
    return make_error(Errc::invalid_argument, "--store redis needs --registry redis (the same Redis)");
  if (cfg.registry_refresh_ms * 2 > cfg.registry_ttl_ms)
    return make_error(Errc::invalid_argument,
                      "--registry-refresh-ms must be at most half of --registry-ttl-ms (an entry would expire "
                      "between two refreshes of a live rig)");
  return {};
}

}  // namespace fleetlink::broker
