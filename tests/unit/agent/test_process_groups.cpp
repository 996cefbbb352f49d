// The record of the agent's running process groups and what a start does with
// what an earlier process left: recognising a group from /proc (pure, on
// snapshots), the record on disk around a real run, stopping a real orphaned
// group that ignores SIGTERM, and PR_SET_PDEATHSIG.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "orphan_groups.hpp"
#include "process_groups.hpp"
#include "process_runner.hpp"
#include "process_spawn.hpp"
#include "test_process_support.hpp"

using namespace fleetlink;
using namespace fleetlink::agent;
using namespace std::chrono_literals;
using fleetlink::agent::testing::process_dead;
using fleetlink::agent::testing::read_file;
using fleetlink::agent::testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

// A /proc/<pid>/stat line with the fields that matter; the rest are zeros.
std::string stat_line(pid_t pid, std::string_view comm, char state, pid_t pgrp, pid_t session,
                      std::uint64_t start) {
  std::string s = std::to_string(pid) + " (" + std::string(comm) + ") " + state + " 1 " + std::to_string(pgrp) +
                  " " + std::to_string(session);
  for (int field = 7; field <= 21; ++field) s += " 0";
  s += " " + std::to_string(start);
  for (int field = 23; field <= 52; ++field) s += " 0";
  return s + "\n";
}

ProcessIdentity proc(pid_t pid, pid_t pgrp, pid_t session, std::uint64_t start, char state = 'S') {
  return ProcessIdentity{pid, state, pgrp, session, start};
}

GroupRecord recorded(pid_t pgid = 500, std::uint64_t start = 9000, pid_t session = 40) {
  GroupRecord r;
  r.pgid = pgid;
  r.start_ticks = start;
  r.session = session;
  r.kernel_boot = "boot-1";
  r.agent_boot_id = "0190aaaa-0000-7000-8000-000000000001";
  r.cmd_id = "c1";
  r.kill_grace_ms = 2000;
  r.program = "/bin/sh";
  return r;
}

bool alive(pid_t pid) { return !process_dead(pid, 0ms); }

}  // namespace

TEST_CASE("/proc/<pid>/stat: a command name with spaces and parentheses does not shift the fields") {
  auto id = parse_proc_stat(stat_line(4321, "evil) S 1 2 3 (x", 'T', 4300, 77, 123456789));
  REQUIRE(id);
  CHECK(id->pid == 4321);
  CHECK(id->state == 'T');
  CHECK(id->pgrp == 4300);
  CHECK(id->session == 77);
  CHECK(id->start_ticks == 123456789);
  CHECK_FALSE(parse_proc_stat("4321 (short) S 1 2"));
  CHECK_FALSE(parse_proc_stat("garbage"));
  // This process, read for real.
  auto self = read_process_identity(::getpid());
  REQUIRE(self);
  CHECK(self->pgrp == ::getpgrp());
  CHECK(self->session == ::getsid(0));
  CHECK(self->start_ticks > 0);
  CHECK_FALSE(kernel_boot_id().empty());
}

TEST_CASE("a group record survives encoding; one without its identity is refused") {
  const GroupRecord r = recorded();
  auto back = decode_group_record(encode_group_record(r));
  REQUIRE(back);
  CHECK(back->pgid == r.pgid);
  CHECK(back->start_ticks == r.start_ticks);
  CHECK(back->session == r.session);
  CHECK(back->kernel_boot == r.kernel_boot);
  CHECK(back->agent_boot_id == r.agent_boot_id);
  CHECK(back->cmd_id == r.cmd_id);
  CHECK(back->kill_grace_ms == r.kill_grace_ms);
  CHECK(back->program == r.program);
  CHECK_FALSE(decode_group_record("pgid=500\nsession=40\nkernel_boot=b\n"));  // no start time
  CHECK_FALSE(decode_group_record("pgid=1\nstart_ticks=5\nsession=40\nkernel_boot=b\n"));  // never init
  CHECK_FALSE(decode_group_record("pgid=500\nstart_ticks=5\nsession=40\n"));  // no boot
  GroupRecord odd = r;
  odd.program = "two\nlines";
  CHECK(decode_group_record(encode_group_record(odd))->program == "two lines");
}

TEST_CASE("recognising a recorded group: its leader, or its members, never a reused number") {
  const GroupRecord r = recorded(500, 9000, 40);
  SUBCASE("the leader and a child, alive") {
    auto m = recorded_group_members(r, {proc(500, 500, 40, 9000), proc(501, 500, 40, 9100), proc(7, 7, 7, 1)},
                                    "boot-1");
    CHECK(m == std::vector<pid_t>{500, 501});
  }
  SUBCASE("the leader died (PDEATHSIG), its child lives on in the group") {
    auto m = recorded_group_members(r, {proc(501, 500, 40, 9100)}, "boot-1");
    CHECK(m == std::vector<pid_t>{501});
  }
  SUBCASE("the leader's number now belongs to another process: the group is gone") {
    auto m = recorded_group_members(r, {proc(500, 500, 40, 12000), proc(501, 500, 40, 12001)}, "boot-1");
    CHECK(m.empty());
  }
  SUBCASE("another boot of the machine: nothing is the group") {
    CHECK(recorded_group_members(r, {proc(500, 500, 40, 9000)}, "boot-2").empty());
    CHECK(recorded_group_members(r, {proc(500, 500, 40, 9000)}, "").empty());
  }
  SUBCASE("another session, an earlier start, a zombie: not members") {
    auto m = recorded_group_members(
        r, {proc(501, 500, 41, 9100), proc(502, 500, 40, 8999), proc(503, 500, 40, 9200, 'Z'), proc(504, 500, 40, 9300)},
        "boot-1");
    CHECK(m == std::vector<pid_t>{504});
  }
}

TEST_CASE("a run's process group is recorded before it runs and removed once it is reaped") {
  ScratchDir dir;
  ProcessGroupRecord record(fs::path(dir.path()) / "process-groups", "boot-a");
  REQUIRE(record.open());
  ProcessRunner runner;
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", "cat " + dir.path() + "/process-groups/$$; echo leader=$$"};
  spec.group_record = &record;
  spec.cmd_id = "cmd-42";
  RunLimits limits;
  limits.kill_grace = 3500ms;
  std::string out;
  auto r = runner.run(spec, limits, {}, [&out](std::string_view b) { out.append(b); });
  REQUIRE(r);
  CHECK(r->exit_code == 0);
  const std::string pid = std::to_string(r->pid);
  CHECK(out.find("pgid=" + pid + "\n") != std::string::npos);
  CHECK(out.find("cmd_id=cmd-42\n") != std::string::npos);
  CHECK(out.find("agent_boot_id=boot-a\n") != std::string::npos);
  CHECK(out.find("kill_grace_ms=3500\n") != std::string::npos);
  CHECK(out.find("program=/bin/sh\n") != std::string::npos);
  CHECK(out.find("leader=" + pid + "\n") != std::string::npos);
  CHECK(record.load().empty());
}

TEST_CASE("a child whose group cannot be recorded never runs") {
  ScratchDir dir;
  ProcessGroupRecord record(fs::path(dir.path()) / "process-groups", "boot-a");
  REQUIRE(record.open());
  fs::remove_all(fs::path(dir.path()) / "process-groups");  // the record cannot be written now
  const std::string marker = dir.file("ran");
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", "touch " + marker};
  spec.group_record = &record;
  auto spawned = spawn_process(spec);
  REQUIRE_FALSE(spawned);
  CHECK(spawned.error().detail.find("cannot record the child's process group") != std::string::npos);
  ::usleep(100000);
  CHECK_FALSE(fs::exists(marker));
}

TEST_CASE("an orphaned group that ignores SIGTERM is stopped at the next start: TERM, grace, KILL") {
  ScratchDir dir;
  const fs::path records = fs::path(dir.path()) / "process-groups";
  ProcessGroupRecord old_agent(records, "boot-old");
  REQUIRE(old_agent.open());
  const std::string child_pid_file = dir.file("child.pid");
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c",
               "trap '' TERM; sleep 300 & echo $! > " + child_pid_file + "; while :; do sleep 0.05; done"};
  spec.group_record = &old_agent;
  spec.cmd_id = "cmd-orphan";
  spec.kill_grace = 400ms;
  auto spawned = spawn_process(spec);
  REQUIRE(spawned);
  const pid_t leader = spawned->pid;
  for (int i = 0; i < 200 && read_file(child_pid_file).empty(); ++i) ::usleep(10000);
  const pid_t child = static_cast<pid_t>(std::stol(read_file(child_pid_file)));
  REQUIRE(alive(leader));
  REQUIRE(alive(child));

  // The "new agent process": a record opened again on the same directory.
  ProcessGroupRecord next(records, "boot-new");
  REQUIRE(next.open());
  const auto t0 = std::chrono::steady_clock::now();
  const OrphanSweep sweep = stop_orphaned_groups(next, 5s);
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE(sweep.stopped.size() == 1);
  const StoppedGroup& g = sweep.stopped[0];
  CHECK(g.record.pgid == leader);
  CHECK(g.record.cmd_id == "cmd-orphan");
  CHECK(g.record.agent_boot_id == "boot-old");
  CHECK(g.processes >= 2);  // the shell and its sleep (and perhaps a short sleep of the loop)
  CHECK(g.killed);          // TERM was ignored: KILL after the recorded grace
  CHECK(g.left == 0);
  CHECK(took >= 400ms);     // the grace was given
  CHECK(took < 5s);         // not the cap
  CHECK(process_dead(child));
  CHECK(process_dead(leader));
  CHECK(next.load().empty());
  int status = 0;
  CHECK(::waitpid(leader, &status, 0) == leader);  // our own child here: reap it
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}

TEST_CASE("a group that ends by itself, or an unreadable record, is only cleared away") {
  ScratchDir dir;
  const fs::path records = fs::path(dir.path()) / "process-groups";
  ProcessGroupRecord record(records, "boot-a");
  REQUIRE(record.open());
  GroupRecord gone = recorded(::getpid(), 1, ::getsid(0));  // our pid, with a start time that is not ours
  gone.kernel_boot = kernel_boot_id();
  { std::ofstream(records / "12345") << encode_group_record(gone); }
  { std::ofstream(records / "garbage") << "not a record"; }
  const OrphanSweep sweep = stop_orphaned_groups(record, 1s);
  CHECK(sweep.stopped.empty());
  CHECK(sweep.gone == 1);
  REQUIRE(sweep.problems.size() == 1);
  CHECK(sweep.problems[0].find("garbage") != std::string::npos);
  CHECK(record.load().empty());
  CHECK(alive(::getpid()));
}

TEST_CASE("a record file someone else could write is never acted on") {
  ScratchDir dir;
  const fs::path records = fs::path(dir.path()) / "process-groups";
  ProcessGroupRecord record(records, "boot-a");
  REQUIRE(record.open());
  { std::ofstream(records / "777") << encode_group_record(recorded()); }
  fs::permissions(records / "777", fs::perms::all);
  auto entries = record.load();
  REQUIRE(entries.size() == 1);
  CHECK_FALSE(entries[0].record);
  CHECK(entries[0].problem.find("mode 0777") != std::string::npos);
  // And a records directory others may write is refused outright.
  fs::permissions(records, fs::perms::all);
  auto opened = record.open();
  REQUIRE_FALSE(opened);
  CHECK(opened.error().detail.find("writable by its group and others (mode 0777)") != std::string::npos);
}

TEST_CASE("PR_SET_PDEATHSIG: a child dies (SIGTERM) when the thread that started it ends") {
  pid_t pid = -1;
  std::thread starter([&pid] {
    SpawnSpec spec;
    spec.argv = {"/bin/sleep", "30"};
    auto spawned = spawn_process(spec);
    if (spawned) pid = spawned->pid;
  });
  starter.join();
  REQUIRE(pid > 0);
  int status = 0;
  pid_t w = -1;
  for (int i = 0; i < 300; ++i) {
    w = ::waitpid(pid, &status, WNOHANG);
    if (w != 0) break;
    ::usleep(10000);
  }
  if (w == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL("the child outlived the thread that started it");
  }
  REQUIRE(w == pid);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
}
