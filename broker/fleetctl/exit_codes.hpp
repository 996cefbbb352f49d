#pragma once
// fleetctl's exit codes: scripts branch on them, so they are part of its
// interface (listed in `fleetctl --help`).
namespace fleetctl {

enum ExitCode : int {
  kOk = 0,
  kFailed = 1,           // the command failed, was NACKed or lost; or the API refused the request
  kUnreachable = 2,      // the control API could not be reached
  kUnknownRig = 3,       // no live connection for that rig
  kRigUnresponsive = 4,  // the rig's outbox is full (see the suggested action)
  kTimeout = 5,          // --wait gave up before the command finished
  kUsage = 64,           // bad command line
};

inline constexpr const char* kExitCodeHelp =
    "Exit codes:\n"
    "  0   success (send --wait: result status ok or scheduled)\n"
    "  1   command failed, NACKed or lost, or the control API refused the request\n"
    "  2   control API unreachable\n"
    "  3   unknown rig (no live connection)\n"
    "  4   rig unresponsive (outbox full); the message says what to do\n"
    "  5   timed out waiting for the command (send --wait --timeout)\n"
    "  64  bad command line\n"
    "Environment: FLEETCTL_CONTROL (control URL), FLEETCTL_TOKEN (bearer token).\n";

}  // namespace fleetctl
