// The child-process plumbing under suites and executable plugins: exit codes,
// signals, timeout and cancel kill sequences on whole process groups, bounded
// memory for huge output, descriptor hygiene, spawn errors.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "process_output.hpp"
#include "process_runner.hpp"
#include "test_process_support.hpp"

using namespace fleetlink;
using namespace fleetlink::agent;
using namespace std::chrono_literals;
using fleetlink::agent::testing::RecordingReporter;
using fleetlink::agent::testing::ScratchDir;

namespace {

struct Captured {
  RunResult run;
  std::string output;
};

Captured run_sh(const std::string& script, RunLimits limits = {}, std::string_view input = {}) {
  ProcessRunner runner;
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  Captured c;
  auto r = runner.run(spec, limits, input, [&c](std::string_view b) { c.output.append(b); });
  REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().detail));
  c.run = *r;
  return c;
}

}  // namespace

TEST_CASE("process runner: exit code and output") {
  auto c = run_sh("echo hello; echo oops >&2; exit 3");
  CHECK(c.run.exit_code == 3);
  CHECK(c.run.signal == 0);
  CHECK_FALSE(c.run.timed_out);
  CHECK_FALSE(c.run.cancelled);
  CHECK(c.output == "hello\noops\n");  // stdout and stderr on one pipe, in order
  CHECK(c.run.output_bytes == c.output.size());

  CHECK(run_sh("true").run.exit_code == 0);
}

TEST_CASE("process runner: terminating signal") {
  auto c = run_sh("kill -SEGV $$");
  CHECK(c.run.signal == SIGSEGV);
  CHECK(c.run.exit_code == -1);
}

TEST_CASE("process runner: stdin data, env and cwd") {
  ProcessRunner runner;
  ScratchDir dir;
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", "pwd; echo \"K=$K\"; cat"};
  spec.cwd = dir.path();
  spec.env = {{"K", "value with spaces"}};
  std::string out;
  std::string input(200000, 'x');  // larger than a pipe buffer: written as the child reads
  auto r = runner.run(spec, {}, input, [&out](std::string_view b) { out.append(b); });
  REQUIRE(r.has_value());
  CHECK(r->exit_code == 0);
  CHECK(out == dir.path() + "\nK=value with spaces\n" + input);
}

TEST_CASE("process runner: a child that never reads its stdin does not block the runner") {
  auto c = run_sh("exit 0", {}, std::string(1 << 20, 'y'));
  CHECK(c.run.exit_code == 0);
}

TEST_CASE("process runner: the child inherits no descriptors beyond 0, 1, 2") {
  int leaked = ::open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
  REQUIRE(leaked >= 0);
  // The shell's own descriptors while ls runs (no pipeline: it would add its pipe).
  auto c = run_sh("ls /proc/$$/fd");
  ::close(leaked);
  CHECK(c.output == "0\n1\n2\n");
}

TEST_CASE("process runner: the child runs in its own process group") {
  auto c = run_sh("cut -d' ' -f5 /proc/$$/stat; echo $$");
  auto nl = c.output.find('\n');
  REQUIRE(nl != std::string::npos);
  CHECK(c.output.substr(0, nl) == c.output.substr(nl + 1, c.output.size() - nl - 2));
  CHECK(std::to_string(c.run.pid) == c.output.substr(nl + 1, c.output.size() - nl - 2));
}

TEST_CASE("process runner: timeout kills the whole group, grandchildren that ignore TERM too") {
  ScratchDir dir;
  const std::string pidfile = dir.file("grandchild.pid");
  // The grandchild ignores SIGTERM and so needs the SIGKILL after the grace period.
  const std::string script = "sh -c 'trap \"\" TERM; echo $$ > " + pidfile +
                             "; while :; do sleep 1; done' & sleep 100";
  RunLimits limits;
  limits.timeout = 400ms;
  limits.kill_grace = 300ms;
  auto c = run_sh(script, limits);
  CHECK(c.run.timed_out);
  CHECK(c.run.signal == SIGTERM);  // the main process died of the TERM
  CHECK(c.run.elapsed < 10s);
  std::string text = fleetlink::agent::testing::read_file(pidfile);
  REQUIRE_FALSE(text.empty());
  long grandchild = std::stol(text);
  CHECK(fleetlink::agent::testing::process_dead(grandchild));
}

TEST_CASE("process runner: timeout escalates to SIGKILL when the main process ignores TERM") {
  RunLimits limits;
  limits.timeout = 200ms;
  limits.kill_grace = 300ms;
  auto c = run_sh("trap '' TERM; while :; do sleep 1; done", limits);
  CHECK(c.run.timed_out);
  CHECK(c.run.sigkill_sent);
  CHECK(c.run.signal == SIGKILL);
  CHECK(c.run.elapsed >= 450ms);
  CHECK(c.run.elapsed < 10s);
}

TEST_CASE("process runner: cancel from another thread stops the group") {
  ProcessRunner runner;
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", "sleep 100 & sleep 100"};
  RunLimits limits;
  limits.kill_grace = 2s;
  std::thread canceller([&runner] {
    std::this_thread::sleep_for(300ms);
    runner.cancel();
  });
  auto r = runner.run(spec, limits, {}, {});
  canceller.join();
  REQUIRE(r.has_value());
  CHECK(r->cancelled);
  CHECK_FALSE(r->timed_out);
  CHECK(r->signal == SIGTERM);
  CHECK(r->elapsed < 8s);
}

TEST_CASE("process runner: cancel before run starts nothing") {
  ProcessRunner runner;
  runner.cancel();
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", "exit 0"};
  auto r = runner.run(spec, {}, {}, {});
  REQUIRE(r.has_value());
  CHECK(r->cancelled);
  CHECK(r->pid == -1);
}

TEST_CASE("process runner: the main process exiting ends the run even if a straggler holds the pipe") {
  RunLimits limits;
  limits.drain_after_exit = 500ms;
  auto c = run_sh("sleep 100 & echo done", limits);
  CHECK(c.run.exit_code == 0);
  CHECK(c.output == "done\n");
  CHECK(c.run.elapsed < 8s);
}

TEST_CASE("process runner: spawn errors are values") {
  ProcessRunner runner;
  SpawnSpec spec;
  SUBCASE("empty argv") {
    auto r = runner.run(spec, {}, {}, {});
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().detail.find("empty argv") != std::string::npos);
  }
  SUBCASE("missing program") {
    spec.argv = {"/nonexistent/program"};
    auto r = runner.run(spec, {}, {}, {});
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().detail.find("/nonexistent/program") != std::string::npos);
  }
  SUBCASE("program not in PATH") {
    spec.argv = {"fleetlink-no-such-program-xyz"};
    auto r = runner.run(spec, {}, {}, {});
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().detail.find("not found in PATH") != std::string::npos);
  }
  SUBCASE("unknown user") {
    spec.argv = {"/bin/true"};
    spec.user = "fleetlink-no-such-user";
    auto r = runner.run(spec, {}, {}, {});
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().detail.find("unknown user 'fleetlink-no-such-user'") != std::string::npos);
  }
  SUBCASE("bad working directory") {
    spec.argv = {"/bin/true"};
    spec.cwd = "/nonexistent/dir";
    auto r = runner.run(spec, {}, {}, {});
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().detail.find("/nonexistent/dir") != std::string::npos);
  }
}

TEST_CASE("process runner: user switch when running as root") {
  if (::geteuid() != 0) {
    MESSAGE("not root: user switch not exercised");
    return;
  }
  ProcessRunner runner;
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", "id -un; echo $HOME"};
  spec.user = "nobody";
  std::string out;
  auto r = runner.run(spec, {}, {}, [&out](std::string_view b) { out.append(b); });
  REQUIRE(r.has_value());
  CHECK(r->exit_code == 0);
  CHECK(out.rfind("nobody\n", 0) == 0);
}

TEST_CASE("tail buffer keeps the last bytes") {
  TailBuffer t(8);
  t.append("abc");
  CHECK(t.str() == "abc");
  CHECK_FALSE(t.truncated());
  t.append("defgh");
  CHECK(t.str() == "abcdefgh");
  CHECK_FALSE(t.truncated());
  t.append("ij");
  CHECK(t.str() == "cdefghij");
  CHECK(t.truncated());
  t.append("0123456789XYZ");
  CHECK(t.str() == "56789XYZ");
  CHECK(t.total() == 23);
  TailBuffer zero(0);
  zero.append("abc");
  CHECK(zero.str().empty());
  CHECK(zero.truncated());
}

TEST_CASE("output collector: bounded chunks, refused bytes counted") {
  auto reporter = std::make_shared<RecordingReporter>(40000);
  OutputCollector out(reporter, 1000, 16384);
  std::string big(100000, 'a');
  big.back() = 'z';
  out.feed(big);
  CHECK(reporter->max_chunk() <= 16384);
  CHECK(out.streamed_bytes() == 32768 + 1696);  // two whole chunks and the short last one
  CHECK(out.dropped_bytes() == 100000 - 32768 - 1696);
  CHECK(out.tail().str().size() == 1000);
  CHECK(out.tail().str().back() == 'z');
  CHECK(out.tail().truncated());
}

TEST_CASE("process runner: 100 MB of output with bounded memory") {
  // Reset the high-water mark so VmHWM below measures only this run.
  { std::ofstream("/proc/self/clear_refs") << "5"; }
  const std::uint64_t hwm_before_kb = fleetlink::agent::testing::proc_status_kb("VmHWM");
  auto reporter = std::make_shared<RecordingReporter>(1 << 20);  // takes 1 MiB, then refuses
  OutputCollector out(reporter);
  ProcessRunner runner;
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", "head -c 104857600 /dev/zero; echo END"};
  auto r = runner.run(spec, {}, {}, [&out](std::string_view b) { out.feed(b); });
  REQUIRE(r.has_value());
  const std::uint64_t total = 104857600 + 4;
  CHECK(r->exit_code == 0);
  CHECK(r->output_bytes == total);
  CHECK(r->buffer_bytes == kMaxChunkBytes);
  CHECK(r->max_piece <= kMaxChunkBytes);
  CHECK(reporter->max_chunk() <= kMaxChunkBytes);
  CHECK(out.streamed_bytes() <= (1u << 20));
  CHECK(out.streamed_bytes() + out.dropped_bytes() == total);
  CHECK(out.tail().total() == total);
  CHECK(out.tail().truncated());
  Outcome o = outcome_from_run(*r, out, "test");
  CHECK(o.status == msg::Status::ok);
  CHECK(o.output.size() == kMaxResultOutput);
  CHECK(o.output.substr(o.output.size() - 4) == "END\n");
  CHECK(o.truncated);
  CHECK(o.dropped_bytes == 0);  // the Reporter counts what it refused
  const std::uint64_t hwm_after_kb = fleetlink::agent::testing::proc_status_kb("VmHWM");
  if (hwm_before_kb != 0 && hwm_after_kb != 0) {
    MESSAGE("VmHWM before " << hwm_before_kb << " kB, after " << hwm_after_kb << " kB");
    CHECK(hwm_after_kb < hwm_before_kb + 16 * 1024);  // far below the 100 MB written
  }
}

TEST_CASE("outcome mapping") {
  auto reporter = std::make_shared<RecordingReporter>();
  OutputCollector out(reporter);
  out.feed("some output");
  RunResult run;
  run.exit_code = 0;
  CHECK(outcome_from_run(run, out, "x").status == msg::Status::ok);
  CHECK(outcome_from_run(run, out, "x").output == "some output");
  run.exit_code = 2;
  auto failed = outcome_from_run(run, out, "suite 7");
  CHECK(failed.status == msg::Status::failed);
  CHECK(failed.exit_code == 2);
  CHECK(failed.detail == "suite 7 failed with exit code 2");
  run.exit_code = -1;
  run.signal = SIGSEGV;
  auto crashed = outcome_from_run(run, out, "plugin x");
  CHECK(crashed.status == msg::Status::failed);
  CHECK(crashed.signal == SIGSEGV);
  CHECK(crashed.exit_code == 128 + SIGSEGV);
  CHECK(crashed.detail == "plugin x killed by SIGSEGV");
  run.signal = SIGTERM;
  run.timed_out = true;
  CHECK(outcome_from_run(run, out, "x").status == msg::Status::timeout);
  run.timed_out = false;
  run.cancelled = true;
  run.pid = 1234;
  CHECK(outcome_from_run(run, out, "x").status == msg::Status::cancelled);
  CHECK(outcome_from_run(run, out, "x").detail == "x cancelled (killed by SIGTERM)");
  run.pid = -1;
  CHECK(outcome_from_run(run, out, "x").detail == "x cancelled before it started");
}
