#pragma once
// Starting a child process for an executor: its own process group, stdout and
// stderr on one non-blocking pipe, an optional user switch, a clean set of
// descriptors. Everything that may allocate or read files (user and group
// lookup, PATH search, the environment block) happens before fork(), because
// the agent is multi-threaded and the child may only make async-signal-safe
// calls until execve().
#include <sys/types.h>

#include <string>
#include <vector>

#include "fleetlink/expected.hpp"
#include "fleetlink/messages.hpp"
#include "process_fd.hpp"

namespace fleetlink::agent {

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0] is a path, or a name looked up in PATH
  std::string cwd;                // empty: the agent's working directory
  StringMap env;                  // set on top of the agent's environment
  std::string user;               // empty: run as the agent's own user
  bool with_stdin = false;        // a pipe to the child's stdin; otherwise /dev/null
};

struct SpawnedProcess {
  pid_t pid = -1;     // also the id of the child's process group
  UniqueFd output;    // read end of the child's stdout+stderr (O_NONBLOCK, O_CLOEXEC)
  UniqueFd input;     // write end of the child's stdin (O_NONBLOCK, O_CLOEXEC), if asked for
};

// Fails (as a value) when argv is empty, the program is not found or not
// executable, the user is unknown or cannot be switched to, the working
// directory cannot be entered, or execve() itself fails in the child.
Expected<SpawnedProcess> spawn_process(const SpawnSpec& spec);

}  // namespace fleetlink::agent
