#include "app/config.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <limits>
#include <list>
#include <sstream>

#include "common/build_info.hpp"
#include "fleetlink/messages.hpp"

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

// The bounds of the whole-number options: the help text says them and validate() holds
// the values to them, from this one table.
struct Limit {
  std::string_view key;
  std::uint64_t min, max;
};
constexpr Limit kLimits[] = {
    {"ping-interval-ms", 1, 3'600'000},
    {"pong-timeout-ms", 1, 3'600'000},
    {"max-missed-pongs", 1, 1000},
    {"unresponsive-after-ms", 100, 3'600'000},
    {"hello-timeout-ms", 1, 3'600'000},
    {"outbox-capacity", 1, 1'000'000},
    {"max-frame-bytes", 256, 64u << 20},
    {"ws-rx-buffer-bytes", 128, 65536},
    {"max-pending-handshakes", 1, 1'000'000},
    {"tls-accept-timeout-s", 1, 3600},
    {"handshake-timeout-ms", 100, 3'600'000},
    {"max-handshakes-per-address", 0, 1'000'000},
    {"control-max-connections", 1, 100'000},
    {"control-idle-timeout-ms", 100, 86'400'000},
    {"tls-ticket-lifetime-s", 60, 604800},
    {"rig-token-max-lifetime-s", 60, 2'592'000},
    {"rig-token-leeway-s", 0, 600},
    {"command-history", 1, 10'000'000},
    {"store-commit-interval-ms", 1, 10000},
    {"store-retention-days", 1, 3650},
    {"store-max-commands", 1000, 1'000'000'000},
    {"artifact-max-mib", 1, 1'048'576},
    {"artifact-command-max-mib", 1, 4'194'304},
    {"artifact-store-max-mib", 1, 1'073'741'824},
    {"artifact-retention-days", 1, 3650},
    {"artifact-max-uploads", 1, 4096},
    {"artifact-s3-url-ttl-s", 1, 604800},
    {"registry-ttl-ms", 3000, 3'600'000},
    {"registry-refresh-ms", 1000, 3'600'000},
    {"mesh-answer-ms", 100, 60000},
    {"reconcile-grace-ms", 1, 3'600'000},
    {"cancel-grace-ms", 1, 3'600'000},
    {"log-repeat-limit", 0, 1'000'000},
    {"log-repeat-interval-s", 1, 86400},
};

// Rates and bursts (per second, in tokens): anything above is a typo, and infinity is no rate.
constexpr double kMaxRate = 1e9;

const Limit* limit_of(std::string_view key) {
  for (const Limit& l : kLimits)
    if (l.key == key) return &l;
  return nullptr;
}

std::string bounds_text(const Limit& l) { return std::to_string(l.min) + " to " + std::to_string(l.max); }

std::string number_text(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

const std::vector<std::string> kStores{"sqlite", "redis", "none"};
const std::vector<std::string> kRigTokenModes{"off", "optional", "required"};
const std::vector<std::string> kRegistries{"embedded", "redis"};
const std::vector<std::string> kLogLevels{"debug", "info", "warn", "error"};

std::string joined(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

// A value of the command line or the file that is not a setting yet: numbers and
// addresses are read as text by CLI11 and converted here, so that each bad one is
// reported in plain words with its origin, all of them at once.
struct TextOption {
  std::string key;
  std::string text;
  enum class Kind { whole, number, address, optional_address } kind;
  void* target;
};

class Reader {
 public:
  explicit Reader(CLI::App& app) : app_(app) {}

  template <typename Int>
  CLI::Option* whole(const char* key, Int& field, std::string help) {
    static_assert(std::is_unsigned_v<Int>);
    TextOption& t = add(key, std::to_string(field), TextOption::Kind::whole, &field);
    if (const Limit* l = limit_of(key)) help += (help.empty() ? "" : " ") + ("(" + bounds_text(*l) + ")");
    return app_.add_option(std::string("--") + key, t.text, help)->type_name("UINT");
  }
  CLI::Option* number(const char* key, double& field, std::string help) {
    TextOption& t = add(key, number_text(field), TextOption::Kind::number, &field);
    return app_.add_option(std::string("--") + key, t.text, help + " (a positive number)")->type_name("NUMBER");
  }
  CLI::Option* address(const char* key, HostPort& field, std::string help) {
    const bool optional = field.host.empty();
    TextOption& t = add(key, optional ? std::string{} : field.to_string(),
                        optional ? TextOption::Kind::optional_address : TextOption::Kind::address, &field);
    return app_.add_option(std::string("--") + key, t.text, std::move(help))->type_name("HOST:PORT");
  }

  // Converts every text; each one that does not convert is an error of `report`.
  void convert(const BrokerConfig& cfg, ConfigReport& report) {
    for (TextOption& t : texts_) {
      std::string problem;
      switch (t.kind) {
        case TextOption::Kind::whole: problem = convert_whole(t); break;
        case TextOption::Kind::number: {
          double v = 0;
          const char* b = t.text.data();
          const char* e = b + t.text.size();
          auto [p, ec] = std::from_chars(b, e, v);
          if (t.text.empty() || ec != std::errc{} || p != e)
            problem = "must be a positive number (got '" + t.text + "')";
          else
            *static_cast<double*>(t.target) = v;
          break;
        }
        case TextOption::Kind::optional_address:
          if (t.text.empty()) break;
          [[fallthrough]];
        case TextOption::Kind::address: {
          auto hp = parse_host_port(t.text);
          if (!hp)
            problem = "must be HOST:PORT, e.g. 127.0.0.1:8080 or [::1]:8080 (" + hp.error().detail + ")";
          else
            *static_cast<HostPort*>(t.target) = *hp;
          break;
        }
      }
      if (!problem.empty()) report.errors.push_back(config_origin(cfg, t.key) + ": " + problem);
    }
  }

 private:
  TextOption& add(const char* key, std::string initial, TextOption::Kind kind, void* target) {
    texts_.push_back(TextOption{key, std::move(initial), kind, target});
    return texts_.back();
  }

  // The field's type is found again from the key's size: uint64 only for store-max-commands.
  static std::string convert_whole(TextOption& t) {
    const Limit* l = limit_of(t.key);
    const bool wide = t.key == "store-max-commands";
    const std::uint64_t type_max = wide ? std::numeric_limits<std::uint64_t>::max()
                                        : std::numeric_limits<std::uint32_t>::max();
    std::uint64_t v = 0;
    const char* b = t.text.data();
    const char* e = b + t.text.size();
    auto [p, ec] = std::from_chars(b, e, v);
    if (t.text.empty() || ec != std::errc{} || p != e || v > type_max) {
      if (l != nullptr) return "must be a whole number from " + bounds_text(*l) + " (got '" + t.text + "')";
      return "must be a whole number, 0 or more (got '" + t.text + "')";
    }
    if (wide)
      *static_cast<std::uint64_t*>(t.target) = v;
    else
      *static_cast<std::uint32_t*>(t.target) = static_cast<std::uint32_t>(v);
    return {};
  }

  CLI::App& app_;
  std::list<TextOption> texts_;  // CLI11 keeps pointers to the texts: a list never moves them
};

// The keys of a config file with their lines, read as CLI11 reads it (ConfigBase::from_config:
// trimmed lines, '#' and ';' comments, [section] headers, key = value), so that a key CLI11
// did not take can be reported with its line.
std::map<std::string, int> keys_of_file(const std::string& path) {
  std::map<std::string, int> keys;
  std::ifstream in(path);
  std::string line, section;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line);
    if (line.size() < 3) continue;  // CLI11 skips these too
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      if (section == "default") section.clear();
      continue;
    }
    if (line.front() == '#' || line.front() == ';') continue;
    std::string key = trim(line.substr(0, line.find('=')));
    if (key.size() >= 2 && (key.front() == '"' || key.front() == '\'') && key.back() == key.front())
      key = key.substr(1, key.size() - 2);
    if (!section.empty()) key = section + "." + key;
    keys.emplace(key, n);
  }
  return keys;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string closest_option(std::string_view key, const std::vector<std::string>& options) {
  std::string normal(key);
  std::transform(normal.begin(), normal.end(), normal.begin(), [](char c) {
    if (c == '_') return '-';
    return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  });
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, normal.size() / 4) + 1;
  for (const auto& o : options) {
    const std::size_t d = edit_distance(normal, o);
    if (d < best_distance) {
      best_distance = d;
      best = o;
    }
  }
  return best;
}

std::string config_origin(const BrokerConfig& cfg, std::string_view key) {
  const bool on_command_line = std::find(cfg.from_command_line.begin(), cfg.from_command_line.end(), key) !=
                               cfg.from_command_line.end();
  if (!on_command_line) {
    auto it = cfg.config_file_keys.find(std::string(key));
    if (it != cfg.config_file_keys.end())
      return cfg.config_file + ":" + std::to_string(it->second) + ": key '" + std::string(key) + "'";
  }
  return "--" + std::string(key);
}

ParseOutcome parse_command_line(int argc, const char* const* argv) {
  ParseOutcome out;
  BrokerConfig& cfg = out.config;
  CLI::App app{"fleetlink-broker: holds the rigs' WebSocket connections and routes commands", "fleetlink-broker"};
  app.option_defaults()->always_capture_default();
  app.set_config("--config", "", "config file (INI; every flag is also a key, e.g. ping-interval-ms = 20000) "
                                 "(default: none)");
  // Keys that are no option are collected, then reported with their file and line
  // (below): the broker refuses to start on a misspelt key rather than run without it.
  app.allow_config_extras(CLI::config_extras_mode::capture);
  app.set_version_flag("--version", build_info::version_line("fleetlink-broker",
                                                  "protocol " + std::to_string(kProtocolVersion)));
  Reader r(app);
  r.address("listen", cfg.listen, "wss listener for rigs (path /agent); port 0 picks a free one");
  app.add_option("--cert", cfg.cert, "server certificate (PEM) (required)");
  app.add_option("--key", cfg.key, "server private key (PEM) (required)");
  app.add_option("--ca", cfg.ca, "CA that signs rig certificates (PEM; mTLS required) (required)");
  app.add_option("--crl", cfg.crl,
                 "certificate revocation lists (PEM) of the --ca CAs: a file, or a directory of *.pem / *.crl "
                 "files; set, a rig certificate is accepted only if its CA's CRL does not list it; re-read "
                 "with --ca, --cert, --key and --operators-file on SIGHUP (default: none)");
  r.address("plain-listen", cfg.plain_listen, "plain ws listener, loopback only (bench/dev) (default: none)");
  r.address("control", cfg.control, "HTTP control API listener");
  app.add_option("--control-token", cfg.control_token,
                 "bearer token for the control API (default: none, no authentication)");
  app.add_option("--control-token-file", cfg.control_token_file,
                 "file holding the control API token (wins over --control-token) (default: none)");
  app.add_option("--operators-file", cfg.operators_file,
                 "operators of the control API, one 'NAME ROLE sha256:HEX' a line (roles: viewer, operator); "
                 "the control token, if also given, is operator 'token' (default: none)");
  app.add_option("--audit-log", cfg.audit_log,
                 "append one line per mutating control call to this file (default: none, the broker's log)");
  app.add_flag("--control-open", cfg.control_open,
               "allow a control API without any token on a non-loopback --control address (default: off)");
  app.add_option("--control-cert", cfg.control_cert,
                 "certificate (PEM) that makes the control listener HTTPS, with --control-key (default: none)");
  app.add_option("--control-key", cfg.control_key, "private key (PEM) of --control-cert (default: none)");
  app.add_flag("--metrics-open", cfg.metrics_open,
               "GET /metrics without a token even when tokens are configured (default: off)");
  app.add_flag("--hash-token", cfg.hash_token,
               "read a token on stdin, print its hash for the operators file (sha256:HEX), exit");
  app.add_option("--broker-id", cfg.broker_id, "this broker's id (default: the host name)");
  r.whole("ping-interval-ms", cfg.ping_interval_ms, "keepalive ping to each rig this often");
  r.whole("pong-timeout-ms", cfg.pong_timeout_ms, "a ping's pong is awaited this long");
  r.whole("max-missed-pongs", cfg.max_missed_pongs, "misses in a row that close a rig (4002)");
  r.whole("unresponsive-after-ms", cfg.unresponsive_after_ms,
          "a rig whose oldest unacknowledged command waits this long is shown unresponsive");
  r.whole("hello-timeout-ms", cfg.hello_timeout_ms, "a connection without HELLO by then is closed (4008)");
  r.whole("outbox-capacity", cfg.outbox_capacity, "commands queued per rig");
  r.whole("max-frame-bytes", cfg.max_frame_bytes, "largest frame from a rig");
  r.whole("ws-rx-buffer-bytes", cfg.ws_rx_buffer_bytes,
          "receive buffer per rig connection: the most read from a rig per wakeup");
  r.number("accept-rate", cfg.accept_rate, "new connections per second");
  r.number("accept-burst", cfg.accept_burst, "new connections above the rate at once");
  r.whole("retry-after-min-s", cfg.retry_after_min_s, "Retry-After of a refused plain ws rig, at least");
  r.whole("retry-after-max-s", cfg.retry_after_max_s, "and at most");
  r.whole("max-pending-handshakes", cfg.max_pending_handshakes,
          "accepted sockets whose TLS handshake/upgrade may run at once; the rest wait in the backlog");
  r.whole("handshake-timeout-ms", cfg.handshake_timeout_ms,
          "a rig connection without its TLS handshake and WebSocket upgrade done this long after accept is closed");
  r.whole("max-handshakes-per-address", cfg.max_handshakes_per_address,
          "TLS rig connections from one source address whose handshake is not done; over it a new one is closed "
          "at once (0: no bound; behind a TCP load balancer or NAT raise it or use 0)");
  r.whole("control-max-connections", cfg.control_max_connections,
          "connections to the control port at once; at the bound a new one replaces the longest idle one "
          "(the descriptor reserve is this + 32)");
  r.whole("control-idle-timeout-ms", cfg.control_idle_timeout_ms,
          "a control-port connection with no request in progress for this long is closed (event streams and "
          "/v1/stream are never idle)");
  r.whole("tls-accept-timeout-s", cfg.tls_accept_timeout_s,
          "a TLS handshake (and other lws-level waits) not finished by then is dropped");
  app.add_option("--tls-ticket-key-file", cfg.tls_ticket_key_file,
                 "TLS 1.3 session tickets with this key (made 0600 if missing): rigs resume after a restart "
                 "(default: none, no tickets)");
  r.whole("tls-ticket-lifetime-s", cfg.tls_ticket_lifetime_s, "how long a session ticket may be resumed");
  app.add_option("--rig-token", cfg.rig_token,
                 "rig tokens (a JWT in the upgrade's Authorization: Bearer) limiting the command kinds sent to a "
                 "rig: off (not read), optional (a rig without one is not limited), required (4401 without one)")
      ->type_name("TEXT:{" + joined(kRigTokenModes, ",") + "}");
  app.add_option("--rig-token-keys", cfg.rig_token_keys,
                 "public keys rig tokens are signed with: a PEM file, or a directory of <kid>.pem (Ed25519 or "
                 "EC P-256) (default: none; required unless rig-token = off)");
  r.whole("rig-token-max-lifetime-s", cfg.rig_token_max_lifetime_s,
          "a rig token whose exp - iat is longer is refused");
  r.whole("rig-token-leeway-s", cfg.rig_token_leeway_s,
          "clock skew allowed when checking a rig token's exp, nbf and iat (a connection lasts until exp plus this)");
  app.add_option("--rig-token-audience", cfg.rig_token_audience,
                 "when set, a rig token's aud must name it (default: none, aud not checked)");
  r.number("rig-rate", cfg.rig_rate, "inbound frames/s per connection");
  r.number("rig-burst", cfg.rig_burst, "inbound frames per connection above the rate at once");
  r.whole("drain-window-ms", cfg.drain_window_ms, "a drain spreads the rigs' reconnects over this long");
  r.whole("drain-deadline-ms", cfg.drain_deadline_ms, "a drain closes what is left 1001 and ends by then (0: that drain's window + 5000; never before its window + 1000)");
  r.whole("command-history", cfg.command_history, "finished commands kept in memory");
  app.add_option("--store", cfg.store,
                 "where commands are recorded: sqlite (in --state-dir), redis (with --registry redis: shared by "
                 "every broker) or none (memory only)")
      ->type_name("TEXT:{" + joined(kStores, ",") + "}");
  app.add_option("--state-dir", cfg.state_dir, "the broker's state: commands.db (and the ticket key if so set)");
  r.whole("store-commit-interval-ms", cfg.store_commit_interval_ms,
          "steps of commands are committed at least this often (new commands at once)");
  r.whole("store-retention-days", cfg.store_retention_days, "finished commands and jobs kept this long");
  r.whole("store-max-commands", cfg.store_max_commands, "at most this many commands kept");
  app.add_option("--artifact-dir", cfg.artifact_dir,
                 "where uploaded artifacts are kept (default: <state-dir>/artifacts; shared by brokers that share "
                 "a store)");
  r.whole("artifact-max-mib", cfg.artifact_max_mib, "largest artifact accepted, in MiB");
  r.whole("artifact-command-max-mib", cfg.artifact_command_max_mib, "all artifacts of one command, in MiB");
  r.whole("artifact-store-max-mib", cfg.artifact_store_max_mib,
          "all artifacts kept, in MiB (the oldest commands' go first)");
  r.whole("artifact-retention-days", cfg.artifact_retention_days, "artifacts are kept this long");
  r.whole("artifact-max-uploads", cfg.artifact_max_uploads, "artifact uploads in progress at once");
  app.add_option("--artifact-s3-endpoint", cfg.artifact_s3_endpoint,
                 "an S3-compatible store rigs upload artifacts to by presigned URL, http(s)://host[:port] "
                 "(default: none, the built-in store)");
  app.add_option("--artifact-s3-bucket", cfg.artifact_s3_bucket, "the S3 store's bucket, which must exist (required with --artifact-s3-endpoint)");
  app.add_option("--artifact-s3-region", cfg.artifact_s3_region, "the S3 store's region, signed into every URL")
      ->capture_default_str();
  app.add_option("--artifact-s3-prefix", cfg.artifact_s3_prefix,
                 "object keys are <prefix>/<cmd_id>/<name> (\"\": <cmd_id>/<name>)")
      ->capture_default_str();
  app.add_option("--artifact-s3-addressing", cfg.artifact_s3_addressing,
                 "path: <endpoint>/<bucket>/<key>; virtual: <bucket>.<endpoint host>/<key>")
      ->type_name("TEXT:{path,virtual}")
      ->capture_default_str();
  app.add_option("--artifact-s3-access-key-file", cfg.artifact_s3_access_key_file,
                 "a file holding the S3 access key id, never given on the command line (required with --artifact-s3-endpoint)");
  app.add_option("--artifact-s3-secret-key-file", cfg.artifact_s3_secret_key_file,
                 "a file holding the S3 secret access key, never given on the command line (required with --artifact-s3-endpoint)");
  r.whole("artifact-s3-url-ttl-s", cfg.artifact_s3_url_ttl_s, "a presigned S3 URL is valid this long, in seconds");
  app.add_option("--registry", cfg.registry,
                 "who owns which rig: embedded (this broker alone) or redis (several brokers, one fleet)")
      ->type_name("TEXT:{" + joined(kRegistries, ",") + "}");
  r.address("redis", cfg.redis, "Redis for --registry redis");
  app.add_option("--redis-prefix", cfg.redis_prefix,
                 "before every Redis key and channel (several fleets on one Redis) (default: none)");
  r.whole("registry-ttl-ms", cfg.registry_ttl_ms, "a rig's registry entry lives this long unless refreshed");
  r.whole("registry-refresh-ms", cfg.registry_refresh_ms,
          "registry entries of connected rigs are refreshed this often (at most half the TTL)");
  r.whole("mesh-answer-ms", cfg.mesh_answer_ms,
          "another broker's answer to a routed command, cancel or reconnect is awaited this long");
  r.whole("reconcile-grace-ms", cfg.reconcile_grace_ms,
          "a rig back with a new boot_id has this long to report its old boot's commands");
  r.whole("cancel-grace-ms", cfg.cancel_grace_ms, "a CANCEL unanswered this long ends the command cancelled");
  app.add_flag("--strict", cfg.strict, "unknown message types close 4422 (default: off, counted and ignored)");
  app.add_option("--log-level", cfg.log_level_name)->type_name("TEXT:{" + joined(kLogLevels, ",") + "}");
  r.whole("log-repeat-limit", cfg.log_repeat_limit,
          "a warning about one thing (one rig's refused commands...) is logged at most this often per "
          "log-repeat-interval-s, then counted (0: no limit)");
  r.whole("log-repeat-interval-s", cfg.log_repeat_interval_s, "the interval of log-repeat-limit");
  app.add_flag("--check-config", cfg.check_config,
               "check the configuration (every value, the files it names), explain every problem, exit 0 or 2; "
               "opens no socket and no store");

  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.size() > 2 && a.substr(0, 2) == "--") {
      a.remove_prefix(2);
      cfg.from_command_line.emplace_back(a.substr(0, a.find('=')));
    }
  }
  bool extras = false;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError&) {
    extras = true;  // every value was read all the same: reported with the rest below
  } catch (const CLI::ParseError& e) {
    std::ostringstream o, err;
    const int code = app.exit(e, o, err);
    out.status = ParseStatus::exit;
    out.exit_code = code == 0 ? 0 : 2;
    if (code == 0) {
      out.output = o.str();
    } else if (dynamic_cast<const CLI::FileError*>(&e) != nullptr) {
      out.output = "fleetlink-broker: cannot read the config file: " + std::string(e.what()) + "\n";
    } else {
      out.output = "fleetlink-broker: " + std::string(e.what()) + " (fleetlink-broker --help lists the options)\n";
    }
    return out;
  }
  const std::string file = app.get_config_ptr()->as<std::string>();
  if (!file.empty()) {
    cfg.config_file = file;
    cfg.config_file_keys = keys_of_file(file);
  }
  // The broker's options have no sections: a key in a [section] (or a dotted one) is
  // no option either, and CLI11 drops those without a word.
  std::vector<std::string> unknown;
  if (extras) unknown = app.remaining();
  for (const auto& [key, line] : cfg.config_file_keys)
    if (key.find('.') != std::string::npos && std::find(unknown.begin(), unknown.end(), key) == unknown.end())
      unknown.push_back(key);
  if (!unknown.empty()) {
    std::vector<std::string> options;
    for (const CLI::Option* o : app.get_options())
      for (const auto& n : o->get_lnames()) options.push_back(n);
    for (const std::string& item : unknown) {
      auto it = cfg.config_file_keys.find(item);
      if (it == cfg.config_file_keys.end()) {
        out.report.errors.push_back("unexpected argument '" + item + "' (fleetlink-broker --help lists the options)");
        continue;
      }
      std::string text = cfg.config_file + ":" + std::to_string(it->second) + ": unknown key '" + item +
                         "': not an option";
      if (item.find('.') != std::string::npos)
        text += " (the broker's config file has no [sections])";
      else if (auto near = closest_option(item, options); !near.empty())
        text += " (did you mean '" + near + "'?)";
      out.report.errors.push_back(std::move(text));
    }
  }
  r.convert(cfg, out.report);
  if (!cfg.control_token_file.empty()) {
    std::ifstream in(cfg.control_token_file);
    std::stringstream ss;
    if (in) {
      ss << in.rdbuf();
      cfg.control_token = trim(ss.str());
    }
    // An unreadable or empty file is check_files()' to report.
  }
  if (cfg.broker_id.empty()) cfg.broker_id = default_hostname();
  log::parse_level(cfg.log_level_name, cfg.log_level);  // validate() reports a name that is not a level
  return out;
}

ConfigReport validate(const BrokerConfig& cfg) {
  ConfigReport r;
  auto err = [&](std::string_view key, const std::string& text) {
    r.errors.push_back(config_origin(cfg, key) + ": " + text);
  };
  const std::pair<std::string_view, std::uint64_t> wholes[] = {
      {"ping-interval-ms", cfg.ping_interval_ms},
      {"pong-timeout-ms", cfg.pong_timeout_ms},
      {"max-missed-pongs", cfg.max_missed_pongs},
      {"unresponsive-after-ms", cfg.unresponsive_after_ms},
      {"hello-timeout-ms", cfg.hello_timeout_ms},
      {"outbox-capacity", cfg.outbox_capacity},
      {"max-frame-bytes", cfg.max_frame_bytes},
      {"ws-rx-buffer-bytes", cfg.ws_rx_buffer_bytes},
      {"retry-after-min-s", cfg.retry_after_min_s},
      {"retry-after-max-s", cfg.retry_after_max_s},
      {"max-pending-handshakes", cfg.max_pending_handshakes},
      {"tls-accept-timeout-s", cfg.tls_accept_timeout_s},
      {"handshake-timeout-ms", cfg.handshake_timeout_ms},
      {"max-handshakes-per-address", cfg.max_handshakes_per_address},
      {"control-max-connections", cfg.control_max_connections},
      {"control-idle-timeout-ms", cfg.control_idle_timeout_ms},
      {"tls-ticket-lifetime-s", cfg.tls_ticket_lifetime_s},
      {"rig-token-max-lifetime-s", cfg.rig_token_max_lifetime_s},
      {"rig-token-leeway-s", cfg.rig_token_leeway_s},
      {"drain-window-ms", cfg.drain_window_ms},
      {"drain-deadline-ms", cfg.drain_deadline_ms},
      {"command-history", cfg.command_history},
      {"store-commit-interval-ms", cfg.store_commit_interval_ms},
      {"store-retention-days", cfg.store_retention_days},
      {"store-max-commands", cfg.store_max_commands},
      {"artifact-max-mib", cfg.artifact_max_mib},
      {"artifact-command-max-mib", cfg.artifact_command_max_mib},
      {"artifact-store-max-mib", cfg.artifact_store_max_mib},
      {"artifact-retention-days", cfg.artifact_retention_days},
      {"artifact-max-uploads", cfg.artifact_max_uploads},
      {"artifact-s3-url-ttl-s", cfg.artifact_s3_url_ttl_s},
      {"registry-ttl-ms", cfg.registry_ttl_ms},
      {"registry-refresh-ms", cfg.registry_refresh_ms},
      {"mesh-answer-ms", cfg.mesh_answer_ms},
      {"reconcile-grace-ms", cfg.reconcile_grace_ms},
      {"cancel-grace-ms", cfg.cancel_grace_ms},
      {"log-repeat-limit", cfg.log_repeat_limit},
      {"log-repeat-interval-s", cfg.log_repeat_interval_s},
  };
  for (const auto& [key, value] : wholes) {
    const Limit* l = limit_of(key);
    if (l != nullptr && (value < l->min || value > l->max))
      err(key, "must be " + bounds_text(*l) + " (got " + std::to_string(value) + ")");
  }
  const std::pair<std::string_view, double> positives[] = {
      {"accept-rate", cfg.accept_rate},
      {"accept-burst", cfg.accept_burst},
      {"rig-rate", cfg.rig_rate},
      {"rig-burst", cfg.rig_burst},
  };
  for (const auto& [key, value] : positives) {
    if (!(value > 0))
      err(key, "must be a positive number (got " + number_text(value) + ")");
    else if (value > kMaxRate)
      err(key, "must be at most " + number_text(kMaxRate) + " (got " + number_text(value) + ")");
  }
  auto one_of = [&](std::string_view key, const std::string& value, const std::vector<std::string>& choices) {
    if (std::find(choices.begin(), choices.end(), value) == choices.end())
      err(key, "must be one of " + joined(choices, ", ") + " (got '" + value + "')");
  };
  one_of("store", cfg.store, kStores);
  one_of("registry", cfg.registry, kRegistries);
  one_of("log-level", cfg.log_level_name, kLogLevels);
  one_of("rig-token", cfg.rig_token, kRigTokenModes);
  if (cfg.rig_token != "off" && cfg.rig_token_keys.empty())
    err("rig-token-keys", "missing: rig-token = " + cfg.rig_token + " needs the public keys tokens are signed with");

  if (!cfg.plain_listen.host.empty() && !is_loopback_host(cfg.plain_listen.host))
    err("plain-listen", cfg.plain_listen.to_string() +
                            " refused: the plain ws listener is only allowed on a loopback address "
                            "(127.0.0.0/8 or ::1)");
  const std::pair<std::string_view, const std::string*> tls_files[] = {
      {"cert", &cfg.cert}, {"key", &cfg.key}, {"ca", &cfg.ca}};
  for (const auto& [key, value] : tls_files) {
    if (value->empty()) err(key, "missing: cert, key and ca are required (rigs connect with mutual TLS)");
  }
  if (cfg.retry_after_min_s > cfg.retry_after_max_s)
    err("retry-after-min-s", std::to_string(cfg.retry_after_min_s) + " is larger than retry-after-max-s (" +
                                 std::to_string(cfg.retry_after_max_s) + ")");
  if (cfg.store == "redis" && cfg.registry != "redis")
    err("store", "redis needs registry = redis (the same Redis)");
  if (std::uint64_t{cfg.registry_refresh_ms} * 2 > cfg.registry_ttl_ms)
    err("registry-refresh-ms", std::to_string(cfg.registry_refresh_ms) +
                                   " must be at most half of registry-ttl-ms (" +
                                   std::to_string(cfg.registry_ttl_ms) +
                                   "): an entry would expire between two refreshes of a live rig");
  if (!cfg.control_has_tokens() && !is_loopback_host(cfg.control.host)) {
    if (cfg.control_open)
      r.warnings.push_back(config_origin(cfg, "control") + ": " + cfg.control.to_string() +
                           " is not loopback and the control API has no token (control-open is set): whoever "
                           "reaches it can command every rig");
    else
      err("control", cfg.control.to_string() +
                         " refused: it is not loopback and the control API has no token, so whoever reaches it "
                         "could command every rig; set operators-file (or control-token-file), or control-open "
                         "to run it open on purpose");
  }
  one_of("artifact-s3-addressing", cfg.artifact_s3_addressing, {"path", "virtual"});
  if (!cfg.artifact_s3_endpoint.empty()) {
    if (cfg.artifact_s3_endpoint.rfind("http://", 0) != 0 && cfg.artifact_s3_endpoint.rfind("https://", 0) != 0)
      err("artifact-s3-endpoint", "must be http://host[:port] or https://host[:port] (got '" +
                                      cfg.artifact_s3_endpoint + "')");
    const std::pair<std::string_view, const std::string*> s3_needs[] = {
        {"artifact-s3-bucket", &cfg.artifact_s3_bucket},
        {"artifact-s3-access-key-file", &cfg.artifact_s3_access_key_file},
        {"artifact-s3-secret-key-file", &cfg.artifact_s3_secret_key_file}};
    for (const auto& [key, value] : s3_needs) {
      if (value->empty()) err(key, "missing: artifact-s3-endpoint needs a bucket and the files of its access key and secret");
    }
  }
  if (cfg.control_cert.empty() != cfg.control_key.empty())
    err(cfg.control_key.empty() ? "control-key" : "control-cert",  // the one missing
        "control-cert and control-key go together (the control listener's HTTPS certificate and its key)");
  return r;
}

}  // namespace fleetlink::broker
