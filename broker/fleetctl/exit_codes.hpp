#pragma once
// fleetctl's exit codes: scripts branch on them, so they are part of its
// interface (listed in `fleetctl --help`).
namespace fleetctl {

enum ExitCode : int {
  kOk = 0,
  kFailed = 1,           // the command did not succeed, a job's rig was not ok; or the API refused the request
  kUnreachable = 2,      // the control API could not be reached
  kUnknownRig = 3,       // the broker has never seen that rig
  kRigUnresponsive = 4,  // the rig's outbox is full (see the suggested action)
  kTimeout = 5,          // --wait gave up before the command (or job) finished
  kUsage = 64,           // bad command line
};

inline constexpr const char* kExitCodeHelp =
    "Exit codes:\n"
    "  0   success (send --wait: the command succeeded; a job: every rig ok)\n"
    "  1   the command did not succeed (failed, timed_out, rejected, ...), a finished job has a rig\n"
    "      failed, refused, silent or skipped, or the control API refused the request\n"
    "  2   control API unreachable\n"
    "  3   unknown rig (the broker has never seen it)\n"
    "  4   rig unresponsive (outbox full); the message says what to do\n"
    "  5   timed out waiting (send/job --wait --timeout); the command or job goes on\n"
    "  64  bad command line\n"
    "Environment: FLEETCTL_CONTROL (control URL), FLEETCTL_TOKEN (bearer token).\n";

}  // namespace fleetctl
