#pragma once
// At start, before anything runs: the process groups an earlier agent process
// recorded (process_groups.hpp) and that are still alive are stopped. An agent
// killed with -9 (or by the OOM killer) leaves its suites and plugins running:
// PR_SET_PDEATHSIG ends each one's first process with the agent, but what that
// process started, and a program that ignores SIGTERM, live on. They are stopped
// the way a cancel stops them: SIGTERM to every member, the run's own kill grace
// (at most kMaxOrphanGrace), then SIGKILL. Each signal goes through a pidfd
// opened on a process whose identity was checked again, so a pid reused in the
// meantime is never signalled. Their commands are then reported interrupted by
// the dedup record's usual path (Agent::report_interrupted).
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "process_groups.hpp"

namespace fleetlink::agent {

// The longest a start waits for one leftover group between TERM and KILL.
inline constexpr std::chrono::milliseconds kMaxOrphanGrace{10000};

struct StoppedGroup {
  GroupRecord record;
  std::size_t processes = 0;  // members alive when the agent started
  bool killed = false;        // SIGKILL was needed
  std::size_t left = 0;       // still alive after SIGKILL (uninterruptible sleep): its record is kept
};

struct OrphanSweep {
  std::vector<StoppedGroup> stopped;   // groups that were alive
  std::size_t gone = 0;                // records whose group had ended by itself
  std::vector<std::string> problems;   // unreadable records (removed)
};

OrphanSweep stop_orphaned_groups(ProcessGroupRecord& record, std::chrono::milliseconds max_grace = kMaxOrphanGrace);

}  // namespace fleetlink::agent
