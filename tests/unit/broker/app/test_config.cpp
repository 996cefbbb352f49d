#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include <string>
#include <vector>

#include "app/config.hpp"

using namespace fleetlink::broker;

TEST_CASE("host:port parsing") {
  auto a = parse_host_port("127.0.0.1:8443");
  REQUIRE(a);
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 8443);
  auto b = parse_host_port("[::1]:0");
  REQUIRE(b);
  CHECK(b->host == "::1");
  CHECK(b->port == 0);
  CHECK_FALSE(parse_host_port("nohost"));
  CHECK_FALSE(parse_host_port(":80"));
  CHECK_FALSE(parse_host_port("h:99999"));
}

TEST_CASE("plain listener only on loopback") {
  CHECK(is_loopback_host("127.0.0.1"));
  CHECK(is_loopback_host("127.3.4.5"));
  CHECK(is_loopback_host("::1"));
  CHECK(is_loopback_host("localhost"));
  CHECK_FALSE(is_loopback_host("0.0.0.0"));
  CHECK_FALSE(is_loopback_host("10.0.0.1"));
  CHECK_FALSE(is_loopback_host("::"));
  BrokerConfig cfg;
  cfg.cert = cfg.key = cfg.ca = "x";
  cfg.plain_listen = {"0.0.0.0", 9000};
  CHECK_FALSE(validate(cfg).ok());
  cfg.plain_listen = {"127.0.0.1", 9000};
  CHECK(validate(cfg).ok());
}

namespace {

namespace fs = std::filesystem;

ParseOutcome parse(std::vector<std::string> args) {
  std::string program = "fleetlink-broker";
  std::vector<const char*> argv{program.c_str()};
  for (auto& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

// parse + validate, as the broker does before check_files().
ConfigReport report_of(const ParseOutcome& p) {
  ConfigReport r = p.report;
  const ConfigReport v = validate(p.config);
  r.errors.insert(r.errors.end(), v.errors.begin(), v.errors.end());
  return r;
}

bool has_error(const ConfigReport& r, const std::string& text) {
  for (const auto& e : r.errors)
    if (e == text) return true;
  return false;
}

std::string all_errors(const ConfigReport& r) {
  std::string out;
  for (const auto& e : r.errors) out += e + "\n";
  return out;
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "fleetlink-config-test-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& text, fs::perms mode = fs::perms::owner_read |
                                                                                       fs::perms::owner_write) const {
    const fs::path p = path / name;
    std::ofstream(p) << text;
    fs::permissions(p, mode);
    return p.string();
  }
};

const std::vector<std::string> kTls = {"--cert", "c", "--key", "k", "--ca", "a"};

std::vector<std::string> with(std::vector<std::string> args, std::initializer_list<std::string> more) {
  args.insert(args.end(), more);
  return args;
}

}  // namespace

TEST_CASE("ws-rx-buffer-bytes: default 128, bounded 128..65536") {
  auto def = parse(kTls);
  REQUIRE(def.status == ParseStatus::run);
  CHECK(def.config.ws_rx_buffer_bytes == 128);
  CHECK(report_of(def).ok());

  auto big = parse(with(kTls, {"--ws-rx-buffer-bytes", "512"}));
  CHECK(report_of(big).ok());
  CHECK(big.config.ws_rx_buffer_bytes == 512);
  CHECK(has_error(report_of(parse(with(kTls, {"--ws-rx-buffer-bytes", "64"}))),
                  "--ws-rx-buffer-bytes: must be 128 to 65536 (got 64)"));  // below lws's useful minimum
  CHECK(has_error(report_of(parse(with(kTls, {"--ws-rx-buffer-bytes", "100000"}))),
                  "--ws-rx-buffer-bytes: must be 128 to 65536 (got 100000)"));
  CHECK(has_error(report_of(parse(with(kTls, {"--ws-rx-buffer-bytes", "many"}))),
                  "--ws-rx-buffer-bytes: must be a whole number from 128 to 65536 (got 'many')"));
}

TEST_CASE("config: values out of range are said in plain words, every one of them") {
  const auto p = parse(with(kTls, {"--accept-rate", "-1", "--rig-burst", "0", "--ping-interval-ms", "-5",
                                   "--retry-after-min-s", "x", "--listen", "nowhere", "--store", "mysql",
                                   "--store-max-commands", "99999999999999999999999"}));
  REQUIRE(p.status == ParseStatus::run);
  const ConfigReport r = report_of(p);
  INFO(all_errors(r));
  CHECK(has_error(r, "--accept-rate: must be a positive number (got -1)"));
  CHECK(has_error(r, "--rig-burst: must be a positive number (got 0)"));
  CHECK(has_error(r, "--ping-interval-ms: must be a whole number from 1 to 3600000 (got '-5')"));
  CHECK(has_error(r, "--retry-after-min-s: must be a whole number, 0 or more (got 'x')"));
  CHECK(has_error(r, "--store: must be one of sqlite, redis, none (got 'mysql')"));
  CHECK(has_error(r, "--store-max-commands: must be a whole number from 1000 to 1000000000 (got "
                     "'99999999999999999999999')"));
  CHECK(r.errors.size() == 7);  // and --listen
  for (const auto& e : r.errors) {
    CHECK(e.find("1.79769e+308") == std::string::npos);
    CHECK(e.find("INT in") == std::string::npos);
  }
  CHECK(has_error(report_of(parse(with(kTls, {"--accept-burst", "inf"}))),
                  "--accept-burst: must be at most 1e+09 (got inf)"));
}

TEST_CASE("config: the constraints between options name their key") {
  const auto p = parse({"--retry-after-min-s", "20", "--store", "redis", "--registry-refresh-ms", "40000"});
  const ConfigReport r = report_of(p);
  INFO(all_errors(r));
  CHECK(has_error(r, "--cert: missing: cert, key and ca are required (rigs connect with mutual TLS)"));
  CHECK(has_error(r, "--ca: missing: cert, key and ca are required (rigs connect with mutual TLS)"));
  CHECK(has_error(r, "--retry-after-min-s: 20 is larger than retry-after-max-s (15)"));
  CHECK(has_error(r, "--store: redis needs registry = redis (the same Redis)"));
  CHECK(has_error(r, "--registry-refresh-ms: 40000 must be at most half of registry-ttl-ms (60000): an entry "
                     "would expire between two refreshes of a live rig"));
}

TEST_CASE("config file: errors name the file, the line and the key; unknown keys are errors") {
  TempDir d;
  const std::string conf = d.write("broker.conf",
                                   "# broker\n"
                                   "cert = c\nkey = k\nca = a\n"
                                   "ping_interval_ms = 5000\n"       // line 5: misspelt
                                   "max-missed-pongs = 0\n"          // line 6
                                   "\n"
                                   "frobnicate = yes\n"              // line 8: no such option
                                   "[rigs]\n"
                                   "listen = 127.0.0.1:1\n");        // line 10: no sections
  const auto p = parse({"--config", conf, "--hello-timeout-ms", "0"});
  REQUIRE(p.status == ParseStatus::run);
  CHECK(p.config.config_file == conf);
  const ConfigReport r = report_of(p);
  INFO(all_errors(r));
  CHECK(has_error(r, conf + ":5: unknown key 'ping_interval_ms': not an option (did you mean 'ping-interval-ms'?)"));
  CHECK(has_error(r, conf + ":8: unknown key 'frobnicate': not an option"));
  CHECK(has_error(r, conf + ":10: unknown key 'rigs.listen': not an option (the broker's config file has no [sections])"));
  CHECK(has_error(r, conf + ":6: key 'max-missed-pongs': must be 1 to 1000 (got 0)"));
  CHECK(has_error(r, "--hello-timeout-ms: must be 1 to 3600000 (got 0)"));  // a flag is named as a flag
  CHECK(r.errors.size() == 5);
  CHECK(p.config.ping_interval_ms == 20000);  // the misspelt key did nothing

  // A flag wins over the file, and is named as the flag.
  const auto q = parse({"--config", conf, "--max-missed-pongs", "2000"});
  CHECK(has_error(report_of(q), "--max-missed-pongs: must be 1 to 1000 (got 2000)"));

  const auto missing = parse({"--config", (d.path / "nope.conf").string()});
  CHECK(missing.status == ParseStatus::exit);
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find("nope.conf") != std::string::npos);
}

TEST_CASE("config: --version, --help with every default, an unknown flag") {
  const auto v = parse({"--version"});
  CHECK(v.status == ParseStatus::exit);
  CHECK(v.exit_code == 0);
  CHECK(v.output.rfind("fleetlink-broker 0.", 0) == 0);
  CHECK(v.output.find("protocol 1") != std::string::npos);

  const auto h = parse({"--help"});
  CHECK(h.exit_code == 0);
  for (const char* shown : {"--ping-interval-ms UINT=20000", "--listen HOST:PORT=0.0.0.0:8443",
                            "--control HOST:PORT=127.0.0.1:8080", "--redis HOST:PORT=127.0.0.1:6379",
                            "--accept-rate NUMBER=50", "--store TEXT:{sqlite,redis,none}=sqlite",
                            "--log-level TEXT:{debug,info,warn,error}=info", "--drain-deadline-ms UINT=0",
                            "--state-dir TEXT=/var/lib/fleetlink-broker"}) {
    INFO(shown);
    CHECK(h.output.find(shown) != std::string::npos);
  }
  CHECK(h.output.find("1.79769e+308") == std::string::npos);

  const auto bad = parse(with(kTls, {"--no-such-flag"}));
  REQUIRE(bad.status == ParseStatus::run);
  CHECK(has_error(bad.report, "unexpected argument '--no-such-flag' (fleetlink-broker --help lists the options)"));
}

TEST_CASE("config: the closest option to a misspelt key") {
  const std::vector<std::string> options{"ping-interval-ms", "pong-timeout-ms", "store", "state-dir"};
  CHECK(closest_option("ping_interval_ms", options) == "ping-interval-ms");
  CHECK(closest_option("Pong-Timout-ms", options) == "pong-timeout-ms");
  CHECK(closest_option("stat-dir", options) == "state-dir");
  CHECK(closest_option("frobnicate", options).empty());
}

TEST_CASE("check_files: unreadable and wrong files are named, nothing is created") {
  TempDir d;
  BrokerConfig cfg;
  cfg.cert = (d.path / "missing.crt").string();
  cfg.key = d.write("broker.key", "not a key\n");
  cfg.ca = d.write("ca.crt", "not a certificate\n");
  cfg.control_token_file = d.write("token", "\n");
  cfg.tls_ticket_key_file = d.write("ticket.key", std::string(80, 'k'),
                                    fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  cfg.state_dir = (d.path / "state" / "deeper").string();
  ConfigReport r;
  check_files(cfg, r);
  INFO(all_errors(r));
  CHECK(has_error(r, "--cert: '" + cfg.cert + "' does not exist"));
  CHECK(has_error(r, "--control-token-file: '" + cfg.control_token_file +
                         "' is empty: the control API would take requests without a token"));
  CHECK(has_error(r, "--tls-ticket-key-file: '" + cfg.tls_ticket_key_file +
                         "' is accessible to other users (anyone who reads it can forge rig sessions): chmod 600 it"));
  bool key_named = false, ca_named = false;
  for (const auto& e : r.errors) {
    key_named = key_named || e.rfind("--key: '" + cfg.key + "' is not a PEM private key", 0) == 0;
    ca_named = ca_named || e.rfind("--ca: '" + cfg.ca + "' is not a PEM CA certificate", 0) == 0;
  }
  CHECK(key_named);
  CHECK(ca_named);
  CHECK(r.errors.size() == 5);      // the state directory can be made
  CHECK_FALSE(fs::exists(cfg.state_dir));  // but it is not

  ConfigReport s;
  BrokerConfig ok_dir;
  ok_dir.cert = ok_dir.key = ok_dir.ca = "";
  ok_dir.state_dir = cfg.key;  // a file, not a directory
  check_files(ok_dir, s);
  CHECK(has_error(s, "--state-dir: '" + cfg.key + "' is not a directory (the sqlite command store lives there)"));
}

TEST_CASE("config: an open control API beyond loopback is refused unless control-open") {
  const std::vector<std::string> tls{"--cert", "c", "--key", "k", "--ca", "a"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = tls;
    args.insert(args.end(), extra.begin(), extra.end());
    return validate(parse(args).config);
  };
  ConfigReport r = with({"--control", "0.0.0.0:8080"});
  INFO(all_errors(r));
  CHECK(has_error(r, "--control: 0.0.0.0:8080 refused: it is not loopback and the control API has no token, so "
                     "whoever reaches it could command every rig; set operators-file (or control-token-file), or "
                     "control-open to run it open on purpose"));
  r = with({"--control", "0.0.0.0:8080", "--control-open"});
  CHECK(r.ok());
  CHECK(r.warnings.size() == 1);
  CHECK(with({"--control", "0.0.0.0:8080", "--operators-file", "ops"}).ok());
  CHECK(with({"--control", "0.0.0.0:8080", "--control-token", "t"}).ok());
  CHECK(with({"--control", "127.0.0.1:8080"}).ok());
  // HTTPS needs both files.
  r = with({"--control-cert", "c.pem"});
  CHECK(has_error(r, "--control-key: control-cert and control-key go together (the control listener's HTTPS "
                     "certificate and its key)"));
  CHECK(with({"--control-cert", "c.pem", "--control-key", "k.pem"}).ok());
  const ParseOutcome p = parse({"--metrics-open", "--audit-log", "/x/audit.log", "--hash-token"});
  CHECK(p.config.metrics_open);
  CHECK(p.config.audit_log == "/x/audit.log");
  CHECK(p.config.hash_token);
}

TEST_CASE("config: rig tokens: the mode, the keys it needs, bounded lifetimes, keys loaded by check_files") {
  const ParseOutcome off = parse(kTls);
  CHECK(off.config.rig_token == "off");
  CHECK(off.config.rig_token_max_lifetime_s == 86400);
  CHECK(off.config.rig_token_leeway_s == 60);
  CHECK(report_of(off).ok());
  CHECK(has_error(report_of(parse(with(kTls, {"--rig-token", "required"}))),
                  "--rig-token-keys: missing: rig-token = required needs the public keys tokens are signed with"));
  CHECK_FALSE(report_of(parse(with(kTls, {"--rig-token", "sometimes", "--rig-token-keys", "k"}))).ok());
  CHECK_FALSE(report_of(parse(with(kTls, {"--rig-token-max-lifetime-s", "10"}))).ok());
  CHECK_FALSE(report_of(parse(with(kTls, {"--rig-token-leeway-s", "601"}))).ok());
  CHECK(report_of(parse(with(kTls, {"--rig-token", "optional", "--rig-token-keys", "k"}))).ok());

  TempDir d;
  BrokerConfig cfg;
  cfg.cert = cfg.key = cfg.ca = "";
  cfg.state_dir = d.path.string();
  cfg.rig_token = "required";
  cfg.rig_token_keys = d.write("lab.pem", "not a key\n");
  ConfigReport r;
  check_files(cfg, r);
  CHECK(has_error(r, "--rig-token-keys: rig token key " + cfg.rig_token_keys + ": not a PEM public key"));
}

TEST_CASE("config: the S3 artifact store: off by default, an endpoint needs its bucket and key files") {
  const auto plain = parse(kTls);
  CHECK(plain.config.artifact_s3_endpoint.empty());
  CHECK(plain.config.artifact_s3_region == "us-east-1");
  CHECK(plain.config.artifact_s3_prefix == "fleetlink");
  CHECK(plain.config.artifact_s3_addressing == "path");
  CHECK(plain.config.artifact_s3_url_ttl_s == 900);
  CHECK(report_of(plain).errors.empty());

  const auto p = parse(with(kTls, {"--artifact-s3-endpoint", "s3.lab:9000", "--artifact-s3-addressing", "dns",
                                   "--artifact-s3-url-ttl-s", "604801"}));
  const ConfigReport r = report_of(p);
  INFO(all_errors(r));
  CHECK(has_error(r, "--artifact-s3-endpoint: must be http://host[:port] or https://host[:port] (got 's3.lab:9000')"));
  CHECK(has_error(r, "--artifact-s3-bucket: missing: artifact-s3-endpoint needs a bucket and the files of its access "
                     "key and secret"));
  CHECK(has_error(r, "--artifact-s3-secret-key-file: missing: artifact-s3-endpoint needs a bucket and the files of "
                     "its access key and secret"));
  CHECK(has_error(r, "--artifact-s3-addressing: must be one of path, virtual (got 'dns')"));
  CHECK(all_errors(r).find("--artifact-s3-url-ttl-s: must be") != std::string::npos);

  // check_files: the key files must be readable.
  TempDir d;
  const std::string ak = d.write("ak", "S3RVER\n");
  const auto q = parse(with(kTls, {"--artifact-s3-endpoint", "http://127.0.0.1:9000", "--artifact-s3-bucket", "labs",
                                   "--artifact-s3-access-key-file", ak, "--artifact-s3-secret-key-file",
                                   (d.path / "absent").string()}));
  CHECK(report_of(q).errors.empty());
  ConfigReport files;
  check_files(q.config, files);
  INFO(all_errors(files));
  CHECK(all_errors(files).find("--artifact-s3-secret-key-file: '" + (d.path / "absent").string() +
                               "' does not exist") != std::string::npos);
  CHECK(all_errors(files).find("--artifact-s3-access-key-file") == std::string::npos);
}
