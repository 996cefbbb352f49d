#pragma once
// The process groups of the agent's running children, on disk, so that the next
// agent process finds and stops what a killed one left running:
//   <state-dir>/process-groups/<pgid>   one small file per running suite or plugin
// written (and fsync'd) after fork() and before the child may execve(), removed
// once the child is reaped. A child therefore never runs unrecorded.
//
// A recorded group is recognised, never guessed from a pid alone: a process
// belongs to it when, on the same kernel boot, its process group and session are
// the recorded ones and it started no earlier than the group's leader. If the
// leader's pid is alive with another start time, the number was reused and the
// group is gone. (While any member of a group lives, the kernel never hands its
// number out as a new pid, so members found this way are the recorded group's.)
// The rules are pure functions of a snapshot of /proc, unit-tested without processes.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fleetlink/expected.hpp"

namespace fleetlink::agent {

// What /proc/<pid>/stat says about a process, as far as recognising it goes.
struct ProcessIdentity {
  pid_t pid = -1;
  char state = '?';               // R S D Z T ...
  pid_t pgrp = -1;
  pid_t session = -1;
  std::uint64_t start_ticks = 0;  // field 22: clock ticks after boot
};

// Parses the text of /proc/<pid>/stat (the command name may hold spaces and ')').
std::optional<ProcessIdentity> parse_proc_stat(std::string_view text);
std::optional<ProcessIdentity> read_process_identity(pid_t pid);
// Every process in /proc now (those that vanish while it is read are skipped).
std::vector<ProcessIdentity> process_snapshot();
// /proc/sys/kernel/random/boot_id: which boot of the machine this is.
std::string kernel_boot_id();

struct GroupRecord {
  pid_t pgid = -1;                // = the leader's pid
  std::uint64_t start_ticks = 0;  // the leader's start time
  pid_t session = -1;             // the session it was started in (the agent's)
  std::string kernel_boot;        // kernel_boot_id() then
  std::string agent_boot_id;      // the agent process that started it
  std::string cmd_id;
  std::uint32_t kill_grace_ms = 0;  // its configured TERM -> KILL grace
  std::string program;            // argv[0], for the log
};

// "key=value" lines; decode refuses a record without a pgid, start time or boot.
std::string encode_group_record(const GroupRecord& r);
std::optional<GroupRecord> decode_group_record(std::string_view text);

// The live members of a recorded group in a snapshot (zombies left out: they
// are dead already). Empty when the group is gone or its number was reused.
std::vector<pid_t> recorded_group_members(const GroupRecord& r, const std::vector<ProcessIdentity>& snapshot,
                                          std::string_view kernel_boot);

class ProcessGroupRecord {
 public:
  // dir: <state-dir>/process-groups; created by open().
  ProcessGroupRecord(std::filesystem::path dir, std::string agent_boot_id);
  Expected<void> open();

  // Records a child just forked (its leader's identity read from /proc): fsync'd
  // before it returns. Thread-safe (executors spawn from their own threads).
  Expected<void> add(pid_t pgid, std::string_view cmd_id, std::string_view program,
                     std::chrono::milliseconds kill_grace);
  void remove(pid_t pgid);

  struct Entry {
    std::filesystem::path file;
    std::optional<GroupRecord> record;  // nullopt: see problem
    std::string problem;                // unreadable, or not the agent's own file (never acted on)
  };
  std::vector<Entry> load() const;
  void remove_file(const std::filesystem::path& file);

  const std::filesystem::path& dir() const noexcept { return dir_; }

 private:
  std::filesystem::path dir_;
  std::string agent_boot_id_;
  std::string kernel_boot_;
  std::mutex mu_;
};

}  // namespace fleetlink::agent
