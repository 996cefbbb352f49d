#pragma once
// fleetlink-agent configuration: every option is a command-line flag and a key of
// the config file (CLI11 INI, default /etc/fleetlink/agent.conf; a missing default
// file is fine, a missing file named with --config is an error; --config '' reads
// no file, which is how tests keep away from a host's installed config).
//
// validate_config() checks everything a running agent would trip over later and
// explains each problem with where the value came from (file and key, or flag):
// the agent refuses to start half-working, and --check-config prints the same.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fleetlink::agent {

inline constexpr const char* kDefaultConfigFile = "/etc/fleetlink/agent.conf";

struct AgentConfig {
  std::string config_file;                 // the file read ("" if none)
  std::vector<std::string> brokers;
  std::string rig_id;
  std::string cert;
  std::string key;
  std::string ca;
  std::string state_dir = "/var/lib/fleetlink";
  std::vector<std::string> allow;          // allow-kinds (alias: allow); empty: every kind the agent has
  std::string token_file;                  // the rig's token (JWT), re-read at every connection; "" : none
  std::vector<std::string> labels;         // k=v
  std::string plugin_dir;
  std::string plugin_config;
  std::uint32_t plugin_timeout_s = 600;    // an executable plugin's run: TERM after this long,
  std::uint32_t plugin_kill_grace_s = 5;   // then KILL this much later
  std::uint32_t plugin_max_running = 16;   // runs of one executable plugin at once
  std::string suites;
  std::string reboot_command = "systemctl reboot";
  std::uint32_t reboot_delay_ms = 1000;
  std::uint32_t dmesg_default_lines = 500;
  std::uint32_t dmesg_max_lines = 5000;
  std::uint32_t backoff_base_ms = 1000;
  std::uint32_t backoff_cap_ms = 30000;
  std::string jitter = "proportional";
  std::uint32_t spool_max_results = 1000;
  std::uint32_t results_max = 1000;        // results kept by cmd_id for duplicate replays
  std::uint32_t dedup_max = 10000;
  std::uint32_t dedup_max_age_h = 168;
  std::uint32_t max_frame_bytes = 131072;
  std::uint32_t keepalive_idle_s = 60;     // PING the broker after this long without traffic
  std::uint32_t keepalive_timeout_s = 90;  // and reconnect if nothing came back by then
  bool upload_artifacts = true;            // attached files go to the broker's artifact endpoint
  bool allow_plain = false;
  bool strict = false;
  std::string log_level = "info";
  // Repeated warnings (a reconnect loop's every failure): at most this many lines
  // about one thing per interval, then one line counting the rest (0: no limit).
  std::uint32_t log_repeat_limit = 10;
  std::uint32_t log_repeat_interval_s = 60;
  bool check_config = false;

  // Flags that were given on the command line (without "--"), for error messages.
  std::vector<std::string> from_command_line;
};

enum class ParseStatus { run, exit };
struct ParseOutcome {
  ParseStatus status = ParseStatus::run;
  int exit_code = 0;                 // with ParseStatus::exit
  std::string output;                // help/version text (stdout) or error (stderr)
  AgentConfig config;
};

ParseOutcome parse_command_line(int argc, const char* const* argv);

struct ConfigReport {
  std::vector<std::string> errors;    // each names the file/flag and key
  std::vector<std::string> warnings;
  bool ok() const noexcept { return errors.empty(); }
};

struct ValidateOptions {
  bool check_suite_users = true;
};

ConfigReport validate_config(const AgentConfig& cfg, const ValidateOptions& opts = {});

// The HELLO this configuration makes the agent send, checked against the
// protocol's rules (fleetlink/limits.hpp, the same function the broker applies):
// one sentence naming the config key and the HELLO field, or "" when the broker
// would take it. `kinds` are the kinds the agent will offer (empty: not checked,
// before the executors are known).
std::string hello_config_problem(const AgentConfig& cfg, const std::vector<std::string>& kinds);

// The labels of `label = k=v` lines (malformed ones are validate_config's errors).
std::map<std::string, std::string> parse_labels(const std::vector<std::string>& labels);

// "where key came from": "--cert" or "/etc/fleetlink/agent.conf: key 'cert'".
std::string config_origin(const AgentConfig& cfg, const std::string& key);

// Checks of the TLS files (also used by the unit tests): empty string when fine.
std::string check_certificate_files(const std::string& cert, const std::string& key,
                                    const std::string& ca, const std::string& rig_id,
                                    std::string& which_key);

}  // namespace fleetlink::agent
