#pragma once
// Trust in the files the agent runs or keeps its state in, like sshd's
// StrictModes. The agent (often root) runs whatever is in the plugin directory
// and whatever a suite names, and acts on its state directory (the next start
// stops the process groups recorded there): if anyone but root or the agent's
// own user could change one of them, any local user could run a program as the
// agent or make it kill a process. So each such path, resolved (realpath), and
// every directory above it up to / must be
//   - owned by root or by the agent's user, and
//   - writable by neither its group nor others,
// with one exception for the directories above: a root-owned directory with the
// sticky bit (/tmp, mode 1777) is accepted. There nobody but an entry's owner
// (or root) may rename or remove that entry, so the entry below it, itself owned
// by root or the agent's user, cannot be swapped by someone else. The path itself
// is never excused: a world-writable sticky plugin directory still lets anyone
// add a plugin.
//
// As in sshd, what is checked is the path at the time of the check (start and
// --check-config); nothing below a trusted directory can change behind it.
#include <sys/types.h>

#include <string>
#include <vector>

#include "config.hpp"

namespace fleetlink::agent {

// Empty when `path` and every directory above it may be trusted by an agent
// running as `agent_uid`; otherwise why not, naming the path at fault (the one
// given or a directory above it). A path that does not exist is not judged here
// (empty): whether it must exist is another check's to say.
// only_above: `path` is a directory something will be made in, judged as a
// directory above it (a root-owned sticky one is fine).
std::string untrusted_path_reason(const std::string& path, uid_t agent_uid, bool only_above = false);

// The files of a plugin directory the loader would load (regular files named
// *.so or fleetlink-<anything>), sorted.
std::vector<std::string> plugin_candidates(const std::string& dir);

// Every path of the configuration that must be trusted: the state directory (or,
// before it exists, the directory it will be made in), the plugin directory and
// each plugin in it, the suites file and each suite's program (argv[0], looked up
// in PATH as when it runs). One error per untrusted path, naming the option it
// comes from, the path, and the reason.
std::vector<std::string> untrusted_paths(const AgentConfig& cfg, uid_t agent_uid);

}  // namespace fleetlink::agent
