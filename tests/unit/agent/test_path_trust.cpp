// sshd-like StrictModes for what the agent runs and keeps: a path and every
// directory above it must be owned by root or the agent's user and writable by
// no one else; a root-owned sticky directory above (/tmp) is fine. Real files in
// a scratch directory under /tmp, so every case also shows /tmp accepted.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "config.hpp"
#include "path_trust.hpp"
#include "test_process_support.hpp"

using namespace fleetlink::agent;
using fleetlink::agent::testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

bool any_contains(const std::vector<std::string>& v, const std::string& needle) {
  for (const auto& s : v)
    if (contains(s, needle)) return true;
  return false;
}

void mode(const std::string& path, mode_t m) { REQUIRE(::chmod(path.c_str(), m) == 0); }

// A file owned by someone other than the agent: as root, chowned to nobody; as
// anyone else, the agent is said to be another user.
struct ForeignOwner {
  uid_t agent_uid;
  explicit ForeignOwner(const std::string& path) {
    if (::geteuid() == 0) {
      REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);
      agent_uid = 0;
    } else {
      agent_uid = ::geteuid() + 1;
    }
  }
};

}  // namespace

TEST_CASE("a private directory and file under /tmp are trusted") {
  ScratchDir d;
  REQUIRE_FALSE(d.path().empty());
  const std::string dir = d.file("plugins");
  fs::create_directory(dir);
  mode(dir, 0755);
  const std::string prog = d.write("plugins/fleetlink-echo", "#!/bin/sh\n", true);
  CHECK(untrusted_path_reason(dir, ::geteuid()) == "");
  CHECK(untrusted_path_reason(prog, ::geteuid()) == "");
  CHECK(untrusted_path_reason("/bin/sh", ::geteuid()) == "");
  CHECK(untrusted_path_reason(d.file("missing"), ::geteuid()) == "");  // existence is not judged here
}

TEST_CASE("group or world write on the path itself is refused, with the mode") {
  ScratchDir d;
  const std::string dir = d.file("plugins");
  fs::create_directory(dir);
  mode(dir, 0777);
  CHECK(untrusted_path_reason(dir, ::geteuid()) ==
        "'" + dir + "' is writable by its group and others (mode 0777)");
  mode(dir, 0775);
  CHECK(untrusted_path_reason(dir, ::geteuid()) == "'" + dir + "' is writable by its group (mode 0775)");
  mode(dir, 0757);
  CHECK(untrusted_path_reason(dir, ::geteuid()) == "'" + dir + "' is writable by others (mode 0757)");
  // Sticky does not excuse the path itself: anyone could still add a plugin.
  mode(dir, 01777);
  CHECK(contains(untrusted_path_reason(dir, ::geteuid()), "(mode 1777)"));
  const std::string prog = d.write("fleetlink-x", "#!/bin/sh\n", true);
  mode(prog, 0777);
  CHECK(untrusted_path_reason(prog, ::geteuid()) == "'" + prog + "' is writable by its group and others (mode 0777)");
}

TEST_CASE("a loose directory above the path is refused and named") {
  ScratchDir d;
  const std::string open_dir = d.file("open");
  fs::create_directories(open_dir + "/deep");
  mode(open_dir, 0777);
  const std::string prog = d.write("open/deep/run-suite", "#!/bin/sh\n", true);
  CHECK(untrusted_path_reason(prog, ::geteuid()) ==
        "'" + open_dir + "' is writable by its group and others (mode 0777), a directory above '" + prog + "'");
  // A symbolic link in a good place to a file in a bad one: judged where it leads.
  const std::string link = d.file("link");
  fs::create_symlink(prog, link);
  CHECK(contains(untrusted_path_reason(link, ::geteuid()), "'" + open_dir + "' is writable"));
}

TEST_CASE("a root-owned sticky directory above is accepted, another sticky one is not") {
  CHECK(untrusted_path_reason("/tmp", ::geteuid(), /*only_above=*/true) == "");
  ScratchDir d;
  const std::string sticky = d.file("sticky");
  fs::create_directory(sticky);
  mode(sticky, 01777);
  const std::string prog = d.write("sticky/prog", "#!/bin/sh\n", true);
  const std::string why = untrusted_path_reason(prog, ::geteuid());
  if (::geteuid() == 0) {
    CHECK(why == "");  // root's own sticky directory: like /tmp
    REQUIRE(::chown(sticky.c_str(), 65534, 65534) == 0);
    CHECK(contains(untrusted_path_reason(prog, 0), "'" + sticky + "' is owned by uid 65534"));
  } else {
    CHECK(contains(why, "'" + sticky + "' is writable by its group and others (mode 1777)"));
  }
}

TEST_CASE("a path owned by another user is refused") {
  ScratchDir d;
  const std::string prog = d.write("fleetlink-x", "#!/bin/sh\n", true);
  ForeignOwner other(prog);
  const std::string why = untrusted_path_reason(prog, other.agent_uid);
  CHECK(contains(why, "'" + prog + "' is owned by uid "));
  CHECK(contains(why, "not by root or the agent's user"));
}

TEST_CASE("the configuration: state directory, plugin directory and plugins, suites file and programs") {
  ScratchDir d;
  AgentConfig c;
  c.state_dir = d.file("state");
  fs::create_directory(c.state_dir);
  c.plugin_dir = d.file("plugins");
  fs::create_directory(c.plugin_dir);
  d.write("plugins/fleetlink-good", "#!/bin/sh\n", true);
  const std::string bad = d.write("plugins/fleetlink-bad", "#!/bin/sh\n", true);
  d.write("plugins/README", "not a plugin", false);
  mode(d.file("plugins/README"), 0666);  // not loaded, so not judged
  const std::string suite_prog = d.write("suite-prog", "#!/bin/sh\n", true);
  c.suites = d.write("suites.json", "{\"suites\": {\"7\": {\"argv\": [\"" + suite_prog +
                                        "\"]}, \"sh\": {\"argv\": [\"sh\", \"-c\", \"true\"]}}}");
  CHECK(untrusted_paths(c, ::geteuid()).empty());

  mode(bad, 0777);
  mode(suite_prog, 0775);
  mode(c.state_dir, 0770);
  auto errors = untrusted_paths(c, ::geteuid());
  REQUIRE(errors.size() == 3);
  CHECK(any_contains(errors, "--state-dir: state directory refused: '" + c.state_dir + "' is writable by its group"));
  CHECK(any_contains(errors, "--plugin-dir: plugin refused: '" + bad + "' is writable by its group and others"));
  CHECK(any_contains(errors, "--suites: suite '7' program refused: '" + suite_prog + "' is writable by its group"));

  // An untrusted plugin directory is one error, not one more per plugin in it.
  mode(c.plugin_dir, 0777);
  errors = untrusted_paths(c, ::geteuid());
  CHECK(any_contains(errors, "--plugin-dir: plugin directory refused: '" + c.plugin_dir + "'"));
  CHECK_FALSE(any_contains(errors, "fleetlink-bad"));
  // And validate_config says the same.
  const ConfigReport report = validate_config(c);
  CHECK(any_contains(report.errors, "plugin directory refused: '" + c.plugin_dir + "'"));

  // A state directory not made yet is judged by the directory it will be made in.
  mode(c.state_dir, 0777);
  c.state_dir = d.file("state/sub/deeper");
  errors = untrusted_paths(c, ::geteuid());
  CHECK(any_contains(errors, "--state-dir: state directory refused: '" + d.file("state") +
                                 "' is writable by its group and others (mode 0777) (where '" + c.state_dir +
                                 "' would be made)"));
}
