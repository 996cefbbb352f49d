#pragma once
// The broker's settings: one struct, filled from the command line and/or a
// config file (CLI11 INI, every flag is also a key). See docs/OPERATIONS.md and
// packaging/config/broker.conf, which lists every option with its default.
//
// Reading a configuration is three steps, each reporting every problem it finds
// (not just the first), each problem naming where the value came from (the file,
// its line and the key, or the flag):
//   parse_command_line()  the syntax: unknown keys, values that are not numbers
//   validate()            ranges and the constraints between options (pure)
//   check_files()         the files named: certificates, key, CA, CRLs, token, ticket key, state directory
// The broker refuses to start on any error; --check-config prints the same report
// and exits without opening a socket or the command store.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.hpp"
#include "net/host_port.hpp"

namespace fleetlink::broker {

struct BrokerConfig {
  HostPort listen{"0.0.0.0", 8443};
  std::string cert, key, ca;
  std::string crl;                       // PEM CRLs: a file or a directory of them; empty: revocation not checked
  HostPort plain_listen;                 // host empty: no plain listener
  HostPort control{"127.0.0.1", 8080};
  std::string control_token;             // resolved from --control-token-file too
  std::string control_token_file;
  std::string operators_file;            // operators by name, role and token hash (app/operators.hpp)
  std::string audit_log;                 // one line per mutating call; empty: the broker's log, "audit: "
  bool control_open = false;             // an open control API (no token) may listen beyond loopback
  std::string control_cert, control_key; // both: the control listener is HTTPS
  bool metrics_open = false;             // GET /metrics needs no token even when tokens are configured
  bool hash_token = false;               // --hash-token: print the hash of the token on stdin, exit
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
  std::uint32_t handshake_timeout_ms = 10000;  // accept -> TLS and upgrade done, or closed (accept_gate.hpp)
  std::uint32_t max_handshakes_per_address = 32;  // not-yet-handshaken connections per source (0: no bound)
  std::uint32_t control_max_connections = 64;     // control-port connections at once
  std::uint32_t control_idle_timeout_ms = 60000;  // a control connection with no request is closed after
  // Descriptors under RLIMIT_NOFILE rig sockets leave to the control port, the store and lws.
  std::uint64_t fd_reserve() const noexcept { return std::uint64_t{control_max_connections} + 32; }
  std::string tls_ticket_key_file;             // empty: no TLS session tickets (tls_tuning.hpp)
  std::uint32_t tls_ticket_lifetime_s = 86400;
  // Rig tokens (docs/OPERATIONS.md, "Rig tokens"): off | optional | required.
  std::string rig_token = "off";
  std::string rig_token_keys;                  // a PEM public key, or a directory of <kid>.pem
  std::uint32_t rig_token_max_lifetime_s = 86400;
  std::uint32_t rig_token_leeway_s = 60;       // clock skew allowed for exp, nbf, iat
  std::string rig_token_audience;              // empty: aud is not checked
  double rig_rate = 200;
  double rig_burst = 400;
  std::uint32_t drain_window_ms = 10000;
  std::uint32_t drain_deadline_ms = 0;   // 0: the drain's window + 5000 (fleet/drain.hpp)
  std::uint32_t command_history = 10000;   // finished commands kept in memory (the store keeps more)
  // The command store (docs/OPERATIONS.md, "The command store").
  std::string store = "sqlite";                      // sqlite | redis | none
  std::string state_dir = "/var/lib/fleetlink-broker";
  std::uint32_t store_commit_interval_ms = 20;
  std::uint32_t store_retention_days = 30;
  std::uint64_t store_max_commands = 1'000'000;
  // Artifacts (docs/OPERATIONS.md, "Artifacts"): files rigs upload beside the command channel.
  std::string artifact_dir;                          // "" : <state-dir>/artifacts
  std::uint32_t artifact_max_mib = 1024;             // one artifact
  std::uint32_t artifact_command_max_mib = 4096;     // all artifacts of one command
  std::uint32_t artifact_store_max_mib = 20480;      // the whole store (oldest pruned first)
  std::uint32_t artifact_retention_days = 7;
  std::uint32_t artifact_max_uploads = 64;           // uploads in progress at once
  // An S3-compatible store instead (docs/OPERATIONS.md §12.5): rigs PUT to a
  // presigned URL. Off while artifact_s3_endpoint is empty.
  std::string artifact_s3_endpoint;                  // "http(s)://host[:port]"
  std::string artifact_s3_bucket;
  std::string artifact_s3_region = "us-east-1";
  std::string artifact_s3_prefix = "fleetlink";      // keys: <prefix>/<cmd_id>/<name>
  std::string artifact_s3_addressing = "path";       // path | virtual
  std::string artifact_s3_access_key_file;           // the access key id, one line
  std::string artifact_s3_secret_key_file;           // the secret access key, one line
  std::uint32_t artifact_s3_url_ttl_s = 900;         // a presigned URL is valid this long
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
  std::string log_level_name = "info";
  log::Level log_level = log::Level::info;
  // Repeated warnings (common/log.hpp): at most this many lines per thing per interval.
  std::uint32_t log_repeat_limit = 10;
  std::uint32_t log_repeat_interval_s = 60;

  // Where the settings came from, for messages that name the file and key.
  std::string config_file;                      // "" : flags only
  std::map<std::string, int> config_file_keys;  // key -> its line in config_file
  std::vector<std::string> from_command_line;   // flags given on the command line (without "--")
  bool check_config = false;

  // Some token is configured (the old single one, or an operators file): the API is not open.
  bool control_has_tokens() const {
    return !control_token.empty() || !control_token_file.empty() || !operators_file.empty();
  }

};

// Every problem found, each a sentence that starts with where: "--cert: ...",
// "/etc/fleetlink/broker.conf:12: key 'cert': ...".
struct ConfigReport {
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
  bool ok() const noexcept { return errors.empty(); }
};

enum class ParseStatus { run, exit };
struct ParseOutcome {
  ParseStatus status = ParseStatus::run;
  int exit_code = 0;       // with ParseStatus::exit: 0 after --help/--version, 2 on a usage error
  std::string output;      // with ParseStatus::exit: the help or version text (stdout) or the error (stderr)
  BrokerConfig config;     // with ParseStatus::run
  ConfigReport report;     // with ParseStatus::run: what reading the values found (unknown keys, not numbers)
};
ParseOutcome parse_command_line(int argc, const char* const* argv);

// Ranges, choices and the constraints between options (no file is read).
ConfigReport validate(const BrokerConfig& cfg);
// The files the configuration names (readable, PEM, the key of the certificate, a
// token in the token file, a private ticket key, a usable state directory); adds to `report`.
void check_files(const BrokerConfig& cfg, ConfigReport& report);

// Where `key` was set: "--key" (a flag, or the default), or "FILE:LINE: key 'key'".
std::string config_origin(const BrokerConfig& cfg, std::string_view key);

// The option closest to a misspelt one ("ping_interval_ms" -> "ping-interval-ms"), or "".
std::string closest_option(std::string_view key, const std::vector<std::string>& options);

}  // namespace fleetlink::broker
