// fleetlink-agent configuration: flags, config file, validation messages.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "config.hpp"
#include "fleetlink/limits.hpp"

using namespace fleetlink::agent;
namespace fs = std::filesystem;

namespace {
struct Lab {
  Lab() {
    std::random_device rd;
    dir = fs::temp_directory_path() / ("fleetlink-agent-config-" + std::to_string(rd()));
    fs::create_directories(dir);
    const std::string ca = std::string(FLEETLINK_SOURCE_DIR) + "/packaging/fleetlink-lab-ca";
    const std::string d = (dir / "ca").string();
    ok = std::system((ca + " init " + d + " >/dev/null 2>&1 && " + ca + " rig " + d +
                      " rig-a rig-b >/dev/null 2>&1").c_str()) == 0;
  }
  ~Lab() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string p(const std::string& name) const { return (dir / "ca" / name).string(); }
  fs::path dir;
  bool ok = false;
};

// Without --config the agent reads the host's /etc/fleetlink/agent.conf when there
// is one: every parse here names a file, or '' for none.
ParseOutcome parse(std::vector<std::string> args) {
  std::vector<const char*> argv{"fleetlink-agent"};
  if (std::find(args.begin(), args.end(), "--config") == args.end()) {
    argv.push_back("--config");
    argv.push_back("");
  }
  for (auto& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

bool any_contains(const std::vector<std::string>& v, const std::string& needle) {
  for (auto& s : v)
    if (s.find(needle) != std::string::npos) return true;
  return false;
}
}  // namespace

TEST_CASE("flags fill the config; repeatable flags accumulate") {
  auto o = parse({"--broker", "wss://a:1/agent", "--broker", "wss://b:2/agent", "--rig-id", "r1",
                  "--allow", "dmesg", "--label", "site=lab1", "--dmesg-max-lines", "77",
                  "--jitter", "full", "--strict"});
  REQUIRE(o.status == ParseStatus::run);
  CHECK(o.config.brokers.size() == 2);
  CHECK(o.config.rig_id == "r1");
  CHECK(o.config.allow == std::vector<std::string>{"dmesg"});
  CHECK(o.config.dmesg_max_lines == 77);
  CHECK(o.config.jitter == "full");
  CHECK(o.config.strict);
  CHECK(o.config.state_dir == "/var/lib/fleetlink");
}

TEST_CASE("--version exits 0 with the version; bad values exit 2") {
  auto v = parse({"--version"});
  CHECK(v.status == ParseStatus::exit);
  CHECK(v.exit_code == 0);
  CHECK(v.output.find("fleetlink-agent") != std::string::npos);
  auto bad = parse({"--jitter", "sideways"});
  CHECK(bad.status == ParseStatus::exit);
  CHECK(bad.exit_code == 2);
  auto nan = parse({"--dmesg-max-lines", "lots"});
  CHECK(nan.exit_code == 2);
}

TEST_CASE("--config '' reads no file; --help and --version answer when the file does not parse") {
  auto none = parse({"--config", "", "--rig-id", "r1"});
  REQUIRE(none.status == ParseStatus::run);
  CHECK(none.config.config_file.empty());
  CHECK(none.config.rig_id == "r1");

  const fs::path broken =
      fs::temp_directory_path() / ("fleetlink-broken-" + std::to_string(std::random_device{}()) + ".conf");
  std::ofstream(broken) << "no-such-key = 1\n";
  for (const char* flag : {"--help", "-h", "--version"}) {
    auto o = parse({"--config", broken.string(), flag});
    CHECK(o.status == ParseStatus::exit);
    CHECK(o.exit_code == 0);
    CHECK(o.output.find("fleetlink-agent") != std::string::npos);
  }
  auto run = parse({"--config", broken.string()});
  CHECK(run.exit_code == 2);
  CHECK(run.output.find(broken.string()) != std::string::npos);
  fs::remove(broken);
}

TEST_CASE("an explicitly named config file must exist; keys in it are read") {
  auto missing = parse({"--config", "/nonexistent/agent.conf"});
  CHECK(missing.status == ParseStatus::exit);
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find("/nonexistent/agent.conf") != std::string::npos);

  Lab lab;
  const auto file = lab.dir / "agent.conf";
  {
    std::ofstream out(file);
    out << "rig-id = rig-a\nbroker = wss://127.0.0.1:9/agent\nstate-dir = " << (lab.dir / "state").string()
        << "\ndmesg-max-lines = 42\nallow = [\"dmesg\", \"reboot\"]\n";
  }
  auto o = parse({"--config", file.string()});
  REQUIRE(o.status == ParseStatus::run);
  CHECK(o.config.rig_id == "rig-a");
  CHECK(o.config.dmesg_max_lines == 42);
  CHECK(o.config.allow == std::vector<std::string>{"dmesg", "reboot"});
  CHECK(o.config.config_file == file.string());
  // Errors name the file and the key.
  CHECK(config_origin(o.config, "rig-id") == file.string() + ": key 'rig-id'");

  {
    std::ofstream out(file, std::ios::trunc);
    out << "rig-idd = typo\n";
  }
  auto typo = parse({"--config", file.string()});
  CHECK(typo.exit_code == 2);
}

TEST_CASE("validation explains every problem with its key") {
  AgentConfig c;
  c.brokers = {"http://x/agent", "ws://10.0.0.1:80/agent"};
  c.state_dir = "/etc/hostname/state";  // under a file: cannot be created (even as root)
  c.labels = {"nokey"};
  c.plugin_dir = "/nonexistent-plugins";
  c.backoff_base_ms = 100;
  c.backoff_cap_ms = 10;
  c.plugin_timeout_s = 0;
  c.plugin_kill_grace_s = 3601;
  c.plugin_max_running = 0;
  c.from_command_line = {"broker", "rig-id"};
  auto r = validate_config(c);
  CHECK_FALSE(r.ok());
  CHECK(any_contains(r.errors, "--rig-id: missing"));
  CHECK(any_contains(r.errors, "--broker: 'http://x/agent'"));
  CHECK(any_contains(r.errors, "ws://10.0.0.1:80/agent"));
  CHECK(any_contains(r.errors, "state-dir"));
  CHECK(any_contains(r.errors, "label"));
  CHECK(any_contains(r.errors, "plugin-dir"));
  CHECK(any_contains(r.errors, "backoff-cap-ms"));
  CHECK(any_contains(r.errors, "plugin-timeout-s"));
  CHECK(any_contains(r.errors, "plugin-kill-grace-s"));
  CHECK(any_contains(r.errors, "plugin-max-running"));

  c.allow_plain = true;
  c.brokers = {"ws://127.0.0.1:80/agent"};
  c.rig_id = "r1";
  c.state_dir = (fs::temp_directory_path() / "fleetlink-agent-config-state").string();
  c.labels = {"k=v"};
  c.plugin_dir.clear();
  c.backoff_cap_ms = 1000;
  c.plugin_timeout_s = 30;
  c.plugin_kill_grace_s = 0;
  c.plugin_max_running = 2;
  auto ok = validate_config(c);
  CHECK(ok.ok());
  fs::remove_all(c.state_dir);
}

TEST_CASE("certificate checks: readable, key matches, identity is the rig id, signed by the CA") {
  Lab lab;
  REQUIRE(lab.ok);
  std::string which;
  CHECK(check_certificate_files(lab.p("rig-a.crt"), lab.p("rig-a.key"), lab.p("ca.crt"), "rig-a", which) == "");
  auto wrong_id = check_certificate_files(lab.p("rig-a.crt"), lab.p("rig-a.key"), lab.p("ca.crt"), "rig-b", which);
  CHECK(which == "rig-id");
  CHECK(wrong_id.find("4401") != std::string::npos);
  auto wrong_key = check_certificate_files(lab.p("rig-a.crt"), lab.p("rig-b.key"), lab.p("ca.crt"), "rig-a", which);
  CHECK(which == "key");
  CHECK(wrong_key.find("not the private key") != std::string::npos);
  auto missing = check_certificate_files(lab.p("nope.crt"), lab.p("rig-a.key"), lab.p("ca.crt"), "rig-a", which);
  CHECK(which == "cert");
  CHECK(missing.find("does not exist") != std::string::npos);
  // A certificate from another CA does not verify.
  Lab other;
  REQUIRE(other.ok);
  auto foreign = check_certificate_files(other.p("rig-a.crt"), other.p("rig-a.key"), lab.p("ca.crt"), "rig-a", which);
  CHECK(which == "cert");
  CHECK(foreign.find("does not verify") != std::string::npos);
}

TEST_CASE("repeated keys in the config file accumulate like repeated flags") {
  Lab lab;
  const auto file = lab.dir / "multi.conf";
  {
    std::ofstream out(file);
    out << "broker = wss://a:1/agent\nbroker = wss://b:2/agent\nlabel = site=lab1\nlabel = rack=r4\n"
           "allow-plain = false\nstrict = true\n";
  }
  auto o = parse({"--config", file.string()});
  REQUIRE(o.status == ParseStatus::run);
  CHECK(o.config.brokers == std::vector<std::string>{"wss://a:1/agent", "wss://b:2/agent"});
  CHECK(o.config.labels == std::vector<std::string>{"site=lab1", "rack=r4"});
  CHECK(o.config.strict);
  // A flag on the command line wins over the file.
  auto f = parse({"--config", file.string(), "--broker", "wss://c:3/agent"});
  CHECK(f.config.brokers == std::vector<std::string>{"wss://c:3/agent"});
  CHECK(config_origin(f.config, "broker") == "--broker");
  CHECK(config_origin(f.config, "label") == file.string() + ": key 'label'");
}

TEST_CASE("allow-kinds: the documented key, comma-separated or repeated; allow is its older name") {
  Lab lab;
  const auto file = lab.dir / "kinds.conf";
  {
    std::ofstream out(file);
    out << "allow-kinds = dmesg,suite\n";
  }
  auto o = parse({"--config", file.string()});
  REQUIRE(o.status == ParseStatus::run);
  CHECK(o.config.allow == std::vector<std::string>{"dmesg", "suite"});
  CHECK(parse({"--allow-kinds", "dmesg", "--allow-kinds", "reboot"}).config.allow ==
        std::vector<std::string>{"dmesg", "reboot"});
  CHECK(parse({"--allow", "dmesg"}).config.allow == std::vector<std::string>{"dmesg"});
}

TEST_CASE("token-file: readable, a JWT, not readable by others") {
  Lab lab;
  REQUIRE(lab.ok);
  auto base = [&](const std::string& token_file) {
    return parse({"--rig-id", "rig-a", "--broker", "wss://127.0.0.1:9/agent", "--cert", lab.p("rig-a.crt"), "--key",
                  lab.p("rig-a.key"), "--ca", lab.p("ca.crt"), "--state-dir", (lab.dir / "state").string(),
                  "--token-file", token_file});
  };
  const auto good = lab.dir / "rig.token";
  {
    std::ofstream out(good);
    out << "aaa.bbb.ccc\n";
  }
  fs::permissions(good, fs::perms::owner_read | fs::perms::owner_write);
  auto ok = validate_config(base(good.string()).config, {false});
  CHECK_FALSE(any_contains(ok.errors, "token-file"));
  CHECK_FALSE(any_contains(ok.warnings, "token-file"));
  CHECK(any_contains(validate_config(base((lab.dir / "absent").string()).config, {false}).errors, "--token-file"));
  const auto junk = lab.dir / "junk.token";
  {
    std::ofstream out(junk);
    out << "not a token\n";
  }
  CHECK(any_contains(validate_config(base(junk.string()).config, {false}).errors, "does not hold a JWT"));
  fs::permissions(good, fs::perms::others_read, fs::perm_options::add);
  CHECK(any_contains(validate_config(base(good.string()).config, {false}).warnings, "readable by other users"));
}

// Every HELLO field the configuration sets is checked with the broker's own rules
// (fleetlink/limits.hpp): one error naming the key and the field per limit.
TEST_CASE("the HELLO a configuration makes: every limit the broker applies") {
  Lab lab;  // validate_config() looks at the state directory: never the host's /var/lib/fleetlink
  AgentConfig c;
  c.state_dir = (lab.dir / "state").string();
  c.rig_id = "rig-a";
  c.from_command_line = {"label", "allow", "rig-id"};
  auto problem = [&](const std::vector<std::string>& kinds = {}) { return hello_config_problem(c, kinds); };
  CHECK(problem({"dmesg", "reboot"}).empty());

  SUBCASE("a label value over 256 bytes") {
    c.labels = {"site=" + std::string(fleetlink::kMaxLabelValueBytes, 'x')};
    CHECK(problem().empty());
    c.labels = {"site=" + std::string(fleetlink::kMaxLabelValueBytes + 1, 'x')};
    CHECK(problem() == "--label: the broker would refuse this rig's HELLO (4400): labels 'site': value longer than 256 bytes");
    CHECK(any_contains(validate_config(c).errors, "labels 'site': value longer than 256 bytes"));
  }
  SUBCASE("more than 64 labels") {
    for (std::size_t i = 0; i <= fleetlink::kMaxMapEntries; ++i) c.labels.push_back("k" + std::to_string(i) + "=v");
    CHECK(problem().find("--label: ") == 0);
    CHECK(problem().find("labels: more than 64 entries") != std::string::npos);
  }
  SUBCASE("a label key over 64 bytes") {
    c.labels = {std::string(fleetlink::kMaxMapKeyBytes + 1, 'k') + "=v"};
    CHECK(problem().find("--label: ") == 0);
    CHECK(problem().find("must be 1..64 bytes") != std::string::npos);
  }
  SUBCASE("a label value that is not UTF-8") {
    c.labels = {"k=\xff"};
    CHECK(problem().find("value not valid UTF-8") != std::string::npos);
  }
  SUBCASE("more than 32 kinds: named after allow, or the plugin directory") {
    std::vector<std::string> kinds;
    for (std::size_t i = 0; i < fleetlink::kMaxKinds; ++i) kinds.push_back("k" + std::to_string(i));
    CHECK(problem(kinds).empty());
    kinds.push_back("one-more");
    c.allow = kinds;
    CHECK(problem(kinds) == "--allow: the broker would refuse this rig's HELLO (4400): kinds: more than 32 entries");
    c.allow.clear();
    CHECK(problem(kinds).find("--plugin-dir (with the suites and built-in kinds): ") == 0);
  }
  SUBCASE("a kind the protocol cannot carry") {
    CHECK(problem({"my plugin"}).find("kinds: only [A-Za-z0-9._-] allowed") != std::string::npos);
  }
  SUBCASE("rig id") {
    c.rig_id = std::string(fleetlink::kMaxIdBytes + 1, 'r');
    CHECK(problem().find("--rig-id: ") == 0);
    CHECK(problem().find("rig_id: must be 1..64 characters") != std::string::npos);
  }
}
