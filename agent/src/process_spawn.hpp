#pragma once
// Starting a child process for an executor: its own process group, stdout and
// stderr on one non-blocking pipe, an optional user switch (with that user's
// groups only), a clean set of descriptors, PR_SET_PDEATHSIG (SIGTERM when the
// agent dies), and its process group recorded before it runs. Everything that may allocate or read files (user and group
// lookup, PATH search, the environment block) happens before fork(), because
// the agent is multi-threaded and the child may only make async-signal-safe
// calls until execve().
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "fleetlink/expected.hpp"
#include "fleetlink/messages.hpp"
#include "process_fd.hpp"
#include "process_groups.hpp"

namespace fleetlink::agent {

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0] is a path, or a name looked up in PATH
  std::string cwd;                // empty: the agent's working directory
  StringMap env;                  // set on top of the agent's environment
  std::string user;               // empty: run as the agent's own user
  bool with_stdin = false;        // a pipe to the child's stdin; otherwise /dev/null
  // Where the child's process group is recorded (process_groups.hpp), after
  // fork() and before the child may execve(): a child that cannot be recorded
  // never runs. Removed again when spawning fails; after a run, by whoever reaps.
  ProcessGroupRecord* group_record = nullptr;
  std::string cmd_id;                          // recorded with it
  std::chrono::milliseconds kill_grace{0};     // recorded with it: what a later stop waits
};

struct SpawnedProcess {
  pid_t pid = -1;     // also the id of the child's process group
  UniqueFd output;    // read end of the child's stdout+stderr (O_NONBLOCK, O_CLOEXEC)
  UniqueFd input;     // write end of the child's stdin (O_NONBLOCK, O_CLOEXEC), if asked for
};

// argv[0] as spawn_process() finds it: a path with a '/' as it is, a name looked
// up in the agent's PATH. Fails when that is not an executable regular file.
Expected<std::string> resolve_program(const std::string& name);

// Fails (as a value) when argv is empty, the program is not found or not
// executable, the user is unknown or cannot be switched to, the working
// directory cannot be entered, or execve() itself fails in the child.
Expected<SpawnedProcess> spawn_process(const SpawnSpec& spec);

}  // namespace fleetlink::agent
