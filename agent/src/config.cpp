#include "config.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "common/log.hpp"
#include "fleetlink/client_session.hpp"
#include "fleetlink/limits.hpp"
#include "fleetlink/uuid.hpp"
#include "fleetlink/version.hpp"
#include "path_trust.hpp"
#include "suite_config.hpp"

namespace fleetlink::agent {

namespace fs = std::filesystem;

namespace {

std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

struct BioDeleter { void operator()(BIO* b) const { BIO_free(b); } };
struct X509Deleter { void operator()(X509* x) const { X509_free(x); } };
struct KeyDeleter { void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); } };
struct StoreDeleter { void operator()(X509_STORE* s) const { X509_STORE_free(s); } };
struct StoreCtxDeleter { void operator()(X509_STORE_CTX* s) const { X509_STORE_CTX_free(s); } };

std::string readable(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return "'" + path + "' does not exist";
  if (!fs::is_regular_file(path, ec)) return "'" + path + "' is not a regular file";
  if (::access(path.c_str(), R_OK) != 0)
    return "'" + path + "' is not readable: " + std::strerror(errno);
  return {};
}

std::string common_name(X509* cert) {
  char cn[256] = {0};
  const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  return n > 0 ? std::string(cn, static_cast<std::size_t>(n)) : std::string();
}

// A state directory must exist (or be creatable) and take a new file.
std::string check_state_dir(const std::string& dir) {
  if (dir.empty()) return "is empty";
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) return "'" + dir + "' is not a directory";
    const std::string probe = (fs::path(dir) / (".fleetlink-write-check-" + std::to_string(::getpid()))).string();
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return "'" + dir + "' is not writable: " + std::strerror(errno);
    ::close(fd);
    ::unlink(probe.c_str());
    return {};
  }
  // Does not exist yet: the agent creates it, so its nearest existing parent must be writable.
  fs::path p = fs::absolute(dir, ec).parent_path();
  while (!p.empty() && !fs::exists(p, ec) && p != p.root_path()) p = p.parent_path();
  if (p.empty()) p = "/";
  if (!fs::is_directory(p, ec)) return "'" + dir + "' cannot be created: '" + p.string() + "' is not a directory";
  if (::access(p.c_str(), W_OK | X_OK) != 0)
    return "'" + dir + "' does not exist and cannot be created in '" + p.string() +
           "': " + std::strerror(errno);
  return {};
}

bool valid_rig_id(const std::string& id) {
  if (id.empty() || id.size() > kMaxIdBytes) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

}  // namespace

std::string config_origin(const AgentConfig& cfg, const std::string& key) {
  const bool on_command_line =
      std::find(cfg.from_command_line.begin(), cfg.from_command_line.end(), key) !=
      cfg.from_command_line.end();
  if (on_command_line || cfg.config_file.empty()) return "--" + key;
  return cfg.config_file + ": key '" + key + "'";
}

std::string check_certificate_files(const std::string& cert_path, const std::string& key_path,
                                    const std::string& ca_path, const std::string& rig_id,
                                    std::string& which) {
  which = "cert";
  if (cert_path.empty()) return "no client certificate given (needed for wss://)";
  if (auto e = readable(cert_path); !e.empty()) return e;
  which = "key";
  if (key_path.empty()) return "no private key given for the client certificate";
  if (auto e = readable(key_path); !e.empty()) return e;
  which = "ca";
  if (ca_path.empty()) return "no CA file given to check the broker's certificate";
  if (auto e = readable(ca_path); !e.empty()) return e;

  ERR_clear_error();
  which = "cert";
  std::unique_ptr<BIO, BioDeleter> cb(BIO_new_file(cert_path.c_str(), "r"));
  std::unique_ptr<X509, X509Deleter> cert(cb ? PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert) return "'" + cert_path + "' is not a PEM certificate: " + openssl_error();
  which = "key";
  std::unique_ptr<BIO, BioDeleter> kb(BIO_new_file(key_path.c_str(), "r"));
  std::unique_ptr<EVP_PKEY, KeyDeleter> key(kb ? PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key) return "'" + key_path + "' is not a PEM private key: " + openssl_error();
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return "'" + key_path + "' is not the private key of '" + cert_path + "'";
  }
  which = "rig-id";
  const std::string cn = common_name(cert.get());
  const bool san_match = X509_check_host(cert.get(), rig_id.data(), rig_id.size(),
                                         X509_CHECK_FLAG_NO_WILDCARDS, nullptr) == 1;
  if (!san_match && cn != rig_id)
    return "rig id '" + rig_id + "' is not the identity of '" + cert_path + "' (CN '" + cn +
           "'); the broker would close the connection 4401";
  which = "ca";
  std::unique_ptr<X509_STORE, StoreDeleter> store(X509_STORE_new());
  if (!store || X509_STORE_load_file(store.get(), ca_path.c_str()) != 1)
    return "'" + ca_path + "' is not a PEM CA certificate: " + openssl_error();
  std::unique_ptr<X509_STORE_CTX, StoreCtxDeleter> sctx(X509_STORE_CTX_new());
  if (!sctx || X509_STORE_CTX_init(sctx.get(), store.get(), cert.get(), nullptr) != 1)
    return "cannot check '" + cert_path + "' against '" + ca_path + "': " + openssl_error();
  if (X509_verify_cert(sctx.get()) != 1) {
    which = "cert";
    const int err = X509_STORE_CTX_get_error(sctx.get());
    ERR_clear_error();
    return "'" + cert_path + "' does not verify against CA '" + ca_path +
           "': " + X509_verify_cert_error_string(err);
  }
  which.clear();
  return {};
}

ParseOutcome parse_command_line(int argc, const char* const* argv) {
  ParseOutcome out;
  AgentConfig& c = out.config;
  CLI::App app{"fleetlink-agent: the fleetlink rig agent (connects to a broker, runs commands)",
               "fleetlink-agent"};
  app.option_defaults()->always_capture_default();
  app.allow_config_extras(CLI::config_extras_mode::error);  // a typo in the file is an error
  app.set_config("--config", kDefaultConfigFile,
                 "Config file (INI; every flag is also a key, e.g. state-dir = /var/lib/fleetlink); "
                 "--config '' reads none (flags only)");
  app.set_version_flag("--version",
                       std::string("fleetlink-agent ") + kVersion + " (protocol " +
                           std::to_string(kProtocolVersion) + ")");
  app.add_option("--broker", c.brokers, "Broker URL, wss://host:port/agent (repeatable; tried in turn)");
  app.add_option("--rig-id", c.rig_id, "This rig's id (must be its certificate's CN/SAN)");
  app.add_option("--cert", c.cert, "Client certificate (PEM)");
  app.add_option("--key", c.key, "Client private key (PEM)");
  app.add_option("--ca", c.ca, "CA certificate that signs the broker (PEM)");
  app.add_option("--state-dir", c.state_dir, "State directory (dedup window, results, spool)");
  app.add_option("--allow-kinds,--allow", c.allow,
                 "Command kinds allowed to run here, repeatable or comma-separated; others are refused with "
                 "NACK not_allowed (--allow is the older name) (default: every kind the agent has)")
      ->delimiter(',');
  app.add_option("--token-file", c.token_file,
                 "File holding this rig's token (a JWT), sent as Authorization: Bearer on each connection and "
                 "read again for each, so a renewed token is picked up (default: none)");
  app.add_option("--label", c.labels, "Label k=v sent in HELLO (repeatable)");
  app.add_option("--plugin-dir", c.plugin_dir, "Directory of plugins (*.so and fleetlink-<kind> programs)");
  app.add_option("--plugin-config", c.plugin_config, "Config string handed to shared-object plugins");
  app.add_option("--plugin-timeout-s", c.plugin_timeout_s,
                 "Longest run of an executable plugin: then TERM (whole process group), status timeout");
  app.add_option("--plugin-kill-grace-s", c.plugin_kill_grace_s,
                 "Seconds between that TERM and a KILL");
  app.add_option("--plugin-max-running", c.plugin_max_running,
                 "Runs of one executable plugin at once; more are refused (failed, busy)");
  app.add_option("--suites", c.suites, "Suites file (JSON)");
  app.add_option("--reboot-command", c.reboot_command, "Command run by /bin/sh -c for reboot");
  app.add_option("--reboot-delay-ms", c.reboot_delay_ms, "Delay between reporting 'scheduled' and rebooting");
  app.add_option("--dmesg-default-lines", c.dmesg_default_lines, "dmesg lines when the command gives none");
  app.add_option("--dmesg-max-lines", c.dmesg_max_lines, "Most dmesg lines a command may ask for");
  app.add_option("--backoff-base-ms", c.backoff_base_ms, "Reconnect backoff base");
  app.add_option("--backoff-cap-ms", c.backoff_cap_ms, "Reconnect backoff cap");
  app.add_option("--jitter", c.jitter, "Backoff jitter: proportional (x0.5-1.5) or full")
      ->check(CLI::IsMember({"proportional", "full"}));
  app.add_option("--spool-max-results", c.spool_max_results, "Results kept on disk while disconnected");
  app.add_option("--results-max", c.results_max, "Results kept by cmd_id to answer redeliveries");
  app.add_option("--dedup-max", c.dedup_max, "cmd_ids remembered");
  app.add_option("--dedup-max-age-h", c.dedup_max_age_h, "How long a cmd_id is remembered (hours)");
  app.add_option("--max-frame-bytes", c.max_frame_bytes, "Largest inbound frame");
  app.add_option("--keepalive-idle-s", c.keepalive_idle_s, "PING the broker after this long without traffic (0: off)");
  app.add_option("--keepalive-timeout-s", c.keepalive_timeout_s, "Reconnect when nothing came back this long (must exceed the idle time)");
  app.add_option("--upload-artifacts", c.upload_artifacts,
                 "Upload files commands attach (a suite's output.log, its artifacts globs) to the broker "
                 "(true or false)")
      ->default_str("true");
  app.add_flag("--allow-plain", c.allow_plain, "Permit ws:// broker URLs (loopback only)");
  app.add_flag("--strict", c.strict, "Unknown message types close the connection (4422)");
  app.add_option("--log-level", c.log_level, "debug|info|warn|error")
      ->check(CLI::IsMember({"debug", "info", "warn", "warning", "error"}));
  app.add_option("--log-repeat-limit", c.log_repeat_limit,
                 "A warning about one thing is logged at most this often per log-repeat-interval-s, then "
                 "counted (0: no limit)");
  app.add_option("--log-repeat-interval-s", c.log_repeat_interval_s, "The interval of log-repeat-limit");
  app.add_flag("--check-config", c.check_config, "Validate the configuration, explain every problem, exit 0/2");

  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.size() > 2 && a.substr(0, 2) == "--") {
      a.remove_prefix(2);
      c.from_command_line.emplace_back(a.substr(0, a.find('=')));
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::ostringstream o;
    std::ostringstream err;
    const int code = app.exit(e, o, err);
    out.status = ParseStatus::exit;
    // CLI11 reads the config file before it looks at --help and --version. They
    // still answer when that file does not parse (a broken /etc/fleetlink/agent.conf
    // the operator is about to fix, or one that is not this agent's).
    const auto asked = [&](std::string_view flag) {
      return std::find(c.from_command_line.begin(), c.from_command_line.end(), flag) !=
             c.from_command_line.end();
    };
    const bool help = asked("help") || std::find_if(argv + 1, argv + argc, [](const char* a) {
                                         return std::string_view(a) == "-h";
                                       }) != argv + argc;
    if (code != 0 && (help || asked("version"))) {
      out.exit_code = 0;
      out.output = help ? app.help() : app.version() + "\n";
      return out;
    }
    if (code == 0) {
      out.exit_code = 0;
      out.output = o.str();
    } else {
      out.exit_code = 2;
      std::string where;
      if (dynamic_cast<const CLI::FileError*>(&e) || dynamic_cast<const CLI::ConfigError*>(&e)) {
        const auto files = app.get_config_ptr()->as<std::vector<std::string>>();
        if (!files.empty()) where = " in config file '" + files.front() + "'";
      }
      out.output = "fleetlink-agent: configuration error" + where + ": " + e.what() + "\n";
    }
    return out;
  }
  if (auto* cfg = app.get_config_ptr(); cfg != nullptr) {
    const auto files = cfg->as<std::vector<std::string>>();
    if (!files.empty() && !files.front().empty()) {
      std::error_code ec;
      if (fs::is_regular_file(files.front(), ec)) c.config_file = files.front();
    }
  }
  return out;
}

std::map<std::string, std::string> parse_labels(const std::vector<std::string>& labels) {
  std::map<std::string, std::string> out;
  for (const auto& l : labels) {
    const auto eq = l.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    out[l.substr(0, eq)] = l.substr(eq + 1);
  }
  return out;
}

std::string hello_config_problem(const AgentConfig& cfg, const std::vector<std::string>& kinds) {
  msg::Hello hello;
  hello.rig_id = cfg.rig_id;
  hello.agent_version = kVersion;
  hello.boot_id = uuid_v7().to_string();
  hello.labels = parse_labels(cfg.labels);
  hello.kinds = kinds;
  const std::optional<HelloFieldProblem> problem = hello_field_problem(hello);
  if (!problem) return {};
  // The config key behind each HELLO field.
  std::string key = "rig-id";
  if (problem->field == "labels") key = "label";
  else if (problem->field == "kinds") key = cfg.allow.empty() ? "plugin-dir" : "allow";
  else if (problem->field != "rig_id") key = problem->field;  // the agent's own (version, boot_id): a bug
  std::string where = config_origin(cfg, key);
  if (problem->field == "kinds" && cfg.allow.empty()) where += " (with the suites and built-in kinds)";
  return where + ": the broker would refuse this rig's HELLO (4400): " + problem->text;
}

ConfigReport validate_config(const AgentConfig& c, const ValidateOptions& opts) {
  ConfigReport r;
  auto err = [&](const std::string& key, const std::string& text) {
    r.errors.push_back(config_origin(c, key) + ": " + text);
  };
  auto warn = [&](const std::string& key, const std::string& text) {
    r.warnings.push_back(config_origin(c, key) + ": " + text);
  };

  if (!valid_rig_id(c.rig_id))
    err("rig-id", c.rig_id.empty() ? "missing: every rig needs an id"
                                   : "'" + c.rig_id + "' is not a valid id (1-64 of A-Z a-z 0-9 . _ -)");
  bool any_tls = false;
  if (c.brokers.empty()) err("broker", "missing: give at least one wss://host:port/agent");
  for (const auto& b : c.brokers) {
    auto u = parse_broker_url(b);
    if (!u) {
      err("broker", u.error().detail);
      continue;
    }
    if (u->tls) {
      any_tls = true;
    } else if (!c.allow_plain) {
      err("broker", "'" + b + "' is plain ws://; use wss:// (ws:// needs allow-plain, loopback only)");
    } else if (!is_loopback_host(u->host)) {
      err("broker", "'" + b + "': plain ws:// is only allowed to a loopback address");
    }
  }
  if (any_tls && valid_rig_id(c.rig_id)) {
    std::string which;
    const std::string problem = check_certificate_files(c.cert, c.key, c.ca, c.rig_id, which);
    if (!problem.empty()) err(which.empty() ? "cert" : which, problem);
  }
  if (auto p = check_state_dir(c.state_dir); !p.empty()) err("state-dir", p);
  for (const auto& l : c.labels) {
    const auto eq = l.find('=');
    if (eq == std::string::npos || eq == 0) err("label", "'" + l + "' is not k=v");
  }
  // What the HELLO carries from the configuration (the rig id is checked above;
  // the kinds once the executors are known: Agent::init, --check-config).
  if (valid_rig_id(c.rig_id))
    if (std::string problem = hello_config_problem(c, {}); !problem.empty()) r.errors.push_back(problem);
  if (!c.plugin_dir.empty()) {
    std::error_code ec;
    if (!fs::is_directory(c.plugin_dir, ec))
      err("plugin-dir", "'" + c.plugin_dir + "' is not a directory");
  }
  if (c.plugin_timeout_s < 1 || c.plugin_timeout_s > 7 * 24 * 3600)
    err("plugin-timeout-s", "must be 1 to 604800 seconds");
  if (c.plugin_kill_grace_s > 3600) err("plugin-kill-grace-s", "must be 0 to 3600 seconds");
  if (c.plugin_max_running < 1 || c.plugin_max_running > 4096)
    err("plugin-max-running", "must be 1 to 4096");
  if (!c.suites.empty()) {
    SuiteLoadOptions so;
    so.check_users = opts.check_suite_users;
    auto t = load_suites_file(c.suites, so);
    if (!t) {
      std::istringstream lines(t.error().detail);
      std::string line;
      while (std::getline(lines, line))
        if (!line.empty()) err("suites", line);
    }
  }
  if (!c.token_file.empty()) {
    if (auto e = readable(c.token_file); !e.empty()) {
      err("token-file", e);
    } else {
      std::ifstream in(c.token_file);
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string t = ss.str();
      if (std::count(t.begin(), t.end(), '.') != 2)
        err("token-file", "'" + c.token_file + "' does not hold a JWT (header.payload.signature)");
      else if (t.size() > 1024)
        // The broker keeps 2048 bytes for all of an upgrade request's headers.
        warn("token-file", "'" + c.token_file + "' holds a token of " + std::to_string(t.size()) +
                               " bytes: over 1024 the upgrade request may not fit the broker's header buffer");
      struct stat st {};
      if (::stat(c.token_file.c_str(), &st) == 0 && (st.st_mode & S_IRWXO) != 0)
        warn("token-file", "'" + c.token_file + "' is readable by other users: whoever reads it can present "
                           "this rig's token (chmod o-rwx it)");
    }
  }
  if (c.reboot_command.empty()) err("reboot-command", "is empty");
  if (c.dmesg_max_lines == 0) err("dmesg-max-lines", "must be at least 1");
  if (c.dmesg_default_lines == 0) err("dmesg-default-lines", "must be at least 1");
  if (c.dmesg_default_lines > c.dmesg_max_lines && c.dmesg_max_lines > 0)
    warn("dmesg-default-lines", std::to_string(c.dmesg_default_lines) + " is over dmesg-max-lines (" +
                                    std::to_string(c.dmesg_max_lines) + "); the cap applies");
  if (c.backoff_base_ms == 0) err("backoff-base-ms", "must be at least 1");
  if (c.backoff_cap_ms < c.backoff_base_ms)
    err("backoff-cap-ms", std::to_string(c.backoff_cap_ms) + " is below backoff-base-ms (" +
                              std::to_string(c.backoff_base_ms) + ")");
  if (c.spool_max_results == 0) err("spool-max-results", "must be at least 1");
  if (c.results_max == 0) err("results-max", "must be at least 1");
  if (c.dedup_max == 0) err("dedup-max", "must be at least 1");
  if (c.dedup_max_age_h == 0) err("dedup-max-age-h", "must be at least 1");
  if (c.max_frame_bytes < 1024) err("max-frame-bytes", "must be at least 1024");
  if (c.keepalive_idle_s > 0 && c.keepalive_timeout_s <= c.keepalive_idle_s)
    err("keepalive-timeout-s", std::to_string(c.keepalive_timeout_s) + " must be above keepalive-idle-s (" +
                                   std::to_string(c.keepalive_idle_s) + ")");
  // sshd's StrictModes for what the agent runs and keeps (path_trust.hpp).
  for (auto& e : untrusted_paths(c, ::geteuid())) r.errors.push_back(std::move(e));
  if (c.log_repeat_interval_s < 1 || c.log_repeat_interval_s > 86400)
    err("log-repeat-interval-s", "must be 1 to 86400 seconds");
  log::Level lv{};
  if (!log::parse_level(c.log_level, lv)) err("log-level", "'" + c.log_level + "' is not debug|info|warn|error");
  return r;
}

}  // namespace fleetlink::agent
