#pragma once
// The suites file (agent flag --suites): which regression suites this rig can
// run, by id. JSON, e.g.
//   {"suites": {"7": {"argv": ["/usr/bin/run-regression", "--suite", "7"],
//                     "cwd": "/srv/rig", "env": {"K": "V"},
//                     "timeout_s": 3600, "kill_grace_s": 10, "user": "rigrunner",
//                     "artifacts": ["results/*.xml", "core*"], "output_artifact": true}}}
// Only "argv" is required. Unknown keys are errors (a typo must not silently
// drop a timeout). Every error names the file and the key.
#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fleetlink/expected.hpp"
#include "fleetlink/messages.hpp"

namespace fleetlink::agent {

struct SuiteSpec {
  std::string id;
  std::vector<std::string> argv;
  std::string cwd;                             // empty: the agent's working directory
  StringMap env;                               // added to the agent's environment
  std::chrono::seconds timeout{3600};          // 0: no timeout
  std::chrono::seconds kill_grace{10};         // SIGTERM -> SIGKILL
  std::string user;                            // empty: the agent's user
  // Uploaded with the result (docs/OPERATIONS.md, "Artifacts"): files matching these
  // globs (relative to cwd) once the suite ended, and its full combined output as
  // output.log unless output_artifact is false.
  std::vector<std::string> artifacts;
  bool output_artifact = true;
};

using SuiteTable = std::map<std::string, SuiteSpec, std::less<>>;

struct SuiteLoadOptions {
  bool check_users = true;  // an unknown "user" is a config error, not a runtime surprise
};

// `origin` names the source in error messages (the file path for a file).
// All problems are reported, one per line, in Error::detail.
Expected<SuiteTable> parse_suites(std::string_view json_text, std::string_view origin,
                                  const SuiteLoadOptions& options = {});
Expected<SuiteTable> load_suites_file(const std::string& path,
                                      const SuiteLoadOptions& options = {});

}  // namespace fleetlink::agent
