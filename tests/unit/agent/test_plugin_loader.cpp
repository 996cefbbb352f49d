// PluginLoader: shared objects (good, wrong ABI, missing symbols, not a
// library) and executable plugins found in a plugin directory. The fixture
// .so files are compiled here with the system compiler against the SDK headers.
#include <doctest/doctest.h>
#include <signal.h>

#include <cstdlib>

#include "plugin_loader.hpp"
#include "test_process_support.hpp"

using namespace fleetlink;
using namespace fleetlink::agent;
using fleetlink::agent::testing::RecordingReporter;
using fleetlink::agent::testing::ScratchDir;

namespace {

const std::string kSource = FLEETLINK_SOURCE_DIR;

// Compiles tests/unit/agent/test_plugin_fixtures/<name>.cpp into dir/<out>.
bool compile_fixture(const std::string& name, const std::string& out_path) {
  const char* cxx = std::getenv("CXX");
  std::string cmd = std::string(cxx && *cxx ? cxx : "c++") +
                    " -std=c++20 -shared -fPIC -O0 -I" + kSource + "/sdk/include " + kSource +
                    "/tests/unit/agent/test_plugin_fixtures/" + name + ".cpp -o " + out_path +
                    " 2>&1";
  int rc = std::system(cmd.c_str());
  return rc == 0;
}

struct Logged {
  std::vector<std::string> lines;
  PluginLog fn() {
    return [this](fleetlink::log::Level level, const std::string& line) {
      lines.push_back((level == fleetlink::log::Level::warn ? "WARN " : "INFO ") + line);
    };
  }
};

struct Fixtures {
  ScratchDir dir;
  std::string good, wrong_abi, missing_symbol;
  Fixtures() {
    good = dir.file("fleetlink-unit-echo.so");
    wrong_abi = dir.file("wrong-abi.so");
    missing_symbol = dir.file("missing-symbol.so");
    REQUIRE(compile_fixture("good_plugin", good));
    REQUIRE(compile_fixture("wrong_abi_plugin", wrong_abi));
    REQUIRE(compile_fixture("missing_symbol_plugin", missing_symbol));
  }
};

Fixtures& fixtures() {
  static Fixtures f;
  return f;
}

}  // namespace

TEST_CASE("plugin loader: a good shared object runs its kind") {
  PluginLoader loader({"0.1.0", "rig-1", "greeting=hi"});
  auto p = loader.load_shared_object(fixtures().good);
  REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().detail));
  CHECK(p->kind == "unit-echo");
  CHECK(p->shared_object);
  auto rep = std::make_shared<RecordingReporter>();
  p->executor->start(CommandContext{"c1", "unit-echo", {{"a", "1"}}}, rep);
  auto o = rep->wait();
  REQUIRE(o.has_value());
  CHECK(o->status == msg::Status::ok);
  CHECK(o->output == "config=greeting=hi a=1");
}

TEST_CASE("plugin loader: a different ABI version is refused, naming the file and both versions") {
  PluginLoader loader({"0.1.0", "rig-1", ""});
  auto p = loader.load_shared_object(fixtures().wrong_abi);
  REQUIRE_FALSE(p.has_value());
  CHECK(p.error().code == Errc::unsupported_version);
  CHECK(p.error().detail.find(fixtures().wrong_abi) != std::string::npos);
  CHECK(p.error().detail.find("plugin ABI version 999") != std::string::npos);
  CHECK(p.error().detail.find("agent ABI version " + std::to_string(kPluginAbiVersion)) !=
        std::string::npos);

  // The same good plugin, seen by an agent of another ABI version.
  PluginHostInfo other{"9.0.0", "rig-1", "", kPluginAbiVersion + 1};
  auto q = PluginLoader(other).load_shared_object(fixtures().good);
  REQUIRE_FALSE(q.has_value());
  CHECK(q.error().code == Errc::unsupported_version);
}

TEST_CASE("plugin loader: missing symbols and non-libraries are refused") {
  PluginLoader loader({"0.1.0", "rig-1", ""});
  auto p = loader.load_shared_object(fixtures().missing_symbol);
  REQUIRE_FALSE(p.has_value());
  CHECK(p.error().detail.find("missing symbol(s): fleetlink_plugin_create fleetlink_plugin_destroy") !=
        std::string::npos);
  ScratchDir dir;
  auto junk = dir.write("junk.so", "not an ELF file");
  auto j = loader.load_shared_object(junk);
  REQUIRE_FALSE(j.has_value());
  CHECK(j.error().detail.find("dlopen failed") != std::string::npos);
}

TEST_CASE("plugin loader: a directory of mixed plugins") {
  ScratchDir dir;
  std::filesystem::copy_file(fixtures().good, dir.file("fleetlink-unit-echo.so"));
  std::filesystem::copy_file(fixtures().wrong_abi, dir.file("wrong-abi.so"));
  dir.write("fleetlink-shout", "#!/bin/sh\ncat\n", true);
  dir.write("fleetlink-notexec", "#!/bin/sh\n", false);
  dir.write("fleetlink-Bad Kind", "#!/bin/sh\n", true);
  dir.write("fleetlink-dmesg", "#!/bin/sh\n", true);  // a built-in kind: refused
  dir.write("README", "not a plugin");
  dir.write("other-tool", "#!/bin/sh\n", true);       // no fleetlink- prefix: ignored
  Logged log;
  PluginLoader loader({"0.1.0", "rig-1", ""}, log.fn());
  auto report = loader.load_dir(dir.path(), {"dmesg", "reboot", "suite"});
  std::vector<std::string> kinds;
  for (const auto& p : report.loaded) kinds.push_back(p.kind);
  CHECK(kinds == std::vector<std::string>{"shout", "unit-echo"});
  CHECK(report.refused.size() == 4);
  std::string all;
  for (const auto& l : log.lines) all += l + "\n";
  CHECK(all.find("WARN plugin " + dir.file("wrong-abi.so") + " refused: plugin ABI version 999") !=
        std::string::npos);
  CHECK(all.find("fleetlink-notexec refused: not executable") != std::string::npos);
  CHECK(all.find("invalid kind 'Bad Kind'") != std::string::npos);
  CHECK(all.find("kind 'dmesg' is already provided") != std::string::npos);
  CHECK(all.find("INFO plugin " + dir.file("fleetlink-shout") + " loaded: kind=shout (executable)") !=
        std::string::npos);

  // The loaded plugins work after the refusals.
  auto rep = std::make_shared<RecordingReporter>();
  report.loaded[0].executor->start(CommandContext{"c1", "shout", {{"x", "y"}}}, rep);
  auto o = rep->wait();
  REQUIRE(o.has_value());
  CHECK(o->status == msg::Status::ok);
  CHECK(o->output == R"({"args":{"x":"y"},"cmd_id":"c1","kind":"shout","protocol":1})" "\n");
}

TEST_CASE("plugin loader: a missing directory is one refusal, not a crash") {
  Logged log;
  PluginLoader loader({"0.1.0", "rig-1", ""}, log.fn());
  auto report = loader.load_dir("/nonexistent/plugins");
  CHECK(report.loaded.empty());
  REQUIRE(report.refused.size() == 1);
  CHECK(report.refused[0].find("/nonexistent/plugins") != std::string::npos);
}
