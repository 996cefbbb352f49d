#include "orphan_groups.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <thread>

namespace fleetlink::agent {

namespace {

using Clock = std::chrono::steady_clock;

// Signals the process `who` describes, and only that one: through a pidfd, on
// a process that still has the identity seen in the snapshot.
void signal_exactly(const ProcessIdentity& who, int sig) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, who.pid, 0));
  if (fd < 0) return;  // gone (ESRCH), or a kernel without pidfds: not signalled blind
  const auto now = read_process_identity(who.pid);
  if (now && now->start_ticks == who.start_ticks && now->pgrp == who.pgrp) {
    ::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0);
    // A stopped process would hold its SIGTERM until someone continues it.
    if (sig == SIGTERM && now->state == 'T') ::syscall(SYS_pidfd_send_signal, fd, SIGCONT, nullptr, 0);
  }
  ::close(fd);
}

struct Live {
  ProcessGroupRecord::Entry entry;
  StoppedGroup report;
  Clock::time_point kill_at;
  std::set<pid_t> termed;  // each member is sent SIGTERM once
};

}  // namespace

OrphanSweep stop_orphaned_groups(ProcessGroupRecord& record, std::chrono::milliseconds max_grace) {
  OrphanSweep out;
  const std::string boot = kernel_boot_id();
  std::vector<Live> live;
  auto snapshot = process_snapshot();
  auto by_pid = [&](pid_t pid) -> const ProcessIdentity* {
    for (const auto& p : snapshot)
      if (p.pid == pid) return &p;
    return nullptr;
  };
  const auto started = Clock::now();
  for (auto& entry : record.load()) {
    if (!entry.record) {
      out.problems.push_back(entry.file.string() + ": record of a child process group " + entry.problem +
                             ": removed, nothing stopped");
      record.remove_file(entry.file);
      continue;
    }
    const auto members = recorded_group_members(*entry.record, snapshot, boot);
    if (members.empty()) {
      ++out.gone;
      record.remove_file(entry.file);
      continue;
    }
    Live l;
    l.report.record = *entry.record;
    l.report.processes = members.size();
    const auto grace = std::min(std::chrono::milliseconds(entry.record->kill_grace_ms), max_grace);
    l.kill_at = started + grace;
    l.entry = std::move(entry);
    for (pid_t pid : members) {
      if (const auto* p = by_pid(pid)) signal_exactly(*p, SIGTERM);
      l.termed.insert(pid);
    }
    live.push_back(std::move(l));
  }
  // After the last KILL, a few seconds for the kernel to take them away.
  const auto give_up = started + max_grace + std::chrono::seconds(5);
  while (!live.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    snapshot = process_snapshot();
    const auto now = Clock::now();
    for (auto it = live.begin(); it != live.end();) {
      const auto members = recorded_group_members(it->report.record, snapshot, boot);
      if (members.empty()) {
        record.remove_file(it->entry.file);
        out.stopped.push_back(std::move(it->report));
        it = live.erase(it);
        continue;
      }
      if (now >= give_up) {
        it->report.left = members.size();  // its record stays: the next start tries again
        out.stopped.push_back(std::move(it->report));
        it = live.erase(it);
        continue;
      }
      const bool kill_now = now >= it->kill_at;
      for (pid_t pid : members) {
        const auto* p = by_pid(pid);
        if (p == nullptr) continue;
        if (kill_now) {
          signal_exactly(*p, SIGKILL);
          it->report.killed = true;
        } else if (it->termed.insert(pid).second) {
          signal_exactly(*p, SIGTERM);  // started since the last look
        }
      }
      ++it;
    }
  }
  return out;
}

}  // namespace fleetlink::agent
