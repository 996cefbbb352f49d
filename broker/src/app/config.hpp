#pragma once
// The broker's settings: one struct, filled from the command line and/or a
// config file (CLI11 INI/TOML, every flag is also a key). See docs/OPERATIONS.md.
#include <cstdint>
#include <string>
#include <variant>

#include "common/log.hpp"
#include "net/host_port.hpp"
#include "fleetlink/expected.hpp"

namespace fleetlink::broker {

struct BrokerConfig {
  HostPort listen{"0.0.0.0", 8443};
  std::string cert, key, ca;
  HostPort plain_listen;                 // host empty: no plain listener
  HostPort control{"127.0.0.1", 8080};
  std::string control_token;             // resolved from --control-token-file too
  std::string broker_id;                 // default: hostname
  std::uint32_t ping_interval_ms = 20000;
  std::uint32_t pong_timeout_ms = 10000;
  std::uint32_t unresponsive_after_ms = 10000;
  std::uint32_t max_missed_pongs = 3;
  std::uint32_t hello_timeout_ms = 10000;
  std::uint32_t outbox_capacity = 128;
  std::uint32_t max_frame_bytes = 131072;
  std::uint32_t ws_rx_buffer_bytes = 128;  // lws reads at most this much per wakeup (and keeps it per rig)
  double accept_rate = 50;
  double accept_burst = 100;
  std::uint32_t retry_after_min_s = 5;
  std::uint32_t retry_after_max_s = 15;
  std::uint32_t max_pending_handshakes = 256;  // accepted, TLS/upgrade not finished yet
  std::uint32_t tls_accept_timeout_s = 30;     // lws kills a TLS accept not finished by then
  std::string tls_ticket_key_file;             // empty: no TLS session tickets (tls_tuning.hpp)
  std::uint32_t tls_ticket_lifetime_s = 86400;
  double rig_rate = 200;
  double rig_burst = 400;
  std::uint32_t drain_window_ms = 10000;
  std::uint32_t drain_deadline_ms = 0;   // 0: window + 5000
  std::uint32_t command_history = 10000;   // finished commands kept in memory (the store keeps more)
  // The command store (docs/OPERATIONS.md, "The command store").
  std::string store = "sqlite";                      // sqlite | none
  std::string state_dir = "/var/lib/fleetlink-broker";
  std::uint32_t store_commit_interval_ms = 20;
  std::uint32_t store_retention_days = 30;
  std::uint64_t store_max_commands = 1'000'000;
  // Several brokers, one fleet (docs/OPERATIONS.md, "Several brokers").
  std::string registry = "embedded";                 // embedded | redis
  HostPort redis{"127.0.0.1", 6379};
  std::string redis_prefix;                          // before every key and channel ("" : rig:<id>, broker:<id>, fleet)
  std::uint32_t registry_ttl_ms = 60000;
  std::uint32_t registry_refresh_ms = 10000;
  std::uint32_t mesh_answer_ms = 3000;
  std::uint32_t reconcile_grace_ms = 30000;
  std::uint32_t cancel_grace_ms = 30000;
  bool strict = false;
  log::Level log_level = log::Level::info;

  std::uint32_t effective_drain_deadline_ms() const {
    return drain_deadline_ms ? drain_deadline_ms : drain_window_ms + 5000;
  }
};

// Either a config to run with, or an exit code (0 after --help, 2 on a usage error)
// whose message has already been printed.
using ParseOutcome = std::variant<BrokerConfig, int>;
ParseOutcome parse_command_line(int argc, char** argv);

// Semantic checks that do not depend on parsing: loopback-only plain listener,
// ranges. Error detail is a sentence for the operator.
Expected<void> validate(const BrokerConfig& cfg);

}  // namespace fleetlink::broker
