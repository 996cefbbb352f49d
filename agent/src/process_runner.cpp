#include "process_runner.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace fleetlink::agent {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Writing to a pipe whose reader is gone raises SIGPIPE; the agent must not die
// of it whatever its signal setup is. Block it on this thread while writing and
// swallow a pending one.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~ScopedSigpipeBlock() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    timespec zero{0, 0};
    while (sigtimedwait(&set, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t old_{};
};

int poll_timeout_ms(Clock::time_point now, Clock::time_point next) {
  if (next <= now) return 0;
  auto ms = std::chrono::duration_cast<milliseconds>(next - now).count() + 1;
  return static_cast<int>(std::min<long long>(ms, 1000));
}

}  // namespace

ProcessRunner::ProcessRunner() : wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void ProcessRunner::cancel() noexcept {
  cancelled_.store(true);
  if (wake_) {
    std::uint64_t one = 1;
    ssize_t ignored = ::write(wake_.get(), &one, sizeof one);
    (void)ignored;
  }
}

Expected<RunResult> ProcessRunner::run(const SpawnSpec& spec, const RunLimits& limits,
                                       std::string_view stdin_data, const Sink& sink) {
  const auto started = Clock::now();
  RunResult result;
  if (cancelled_.load()) {
    result.cancelled = true;
    return result;
  }
  SpawnSpec actual = spec;
  actual.with_stdin = spec.with_stdin || !stdin_data.empty();
  actual.kill_grace = limits.kill_grace;  // recorded: a later agent's stop waits as long
  auto spawned = spawn_process(actual);
  if (!spawned) return spawned.error();
  const pid_t pid = spawned->pid;
  result.pid = pid;
  UniqueFd output = std::move(spawned->output);
  UniqueFd input = std::move(spawned->input);
  // A descriptor that becomes readable when the child exits (Linux >= 5.3; on
  // older kernels we poll waitpid instead). Called through syscall() because
  // glibc 2.36's <sys/pidfd.h> lacks extern "C".
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));

  std::vector<char> buffer(std::max<std::size_t>(limits.read_bytes, 1));
  result.buffer_bytes = buffer.size();
  std::size_t stdin_written = 0;
  if (input && stdin_data.empty()) input.reset();

  bool exited = false;
  bool killing = false;
  Clock::time_point kill_at{};
  Clock::time_point drain_deadline{};
  const bool has_timeout = limits.timeout.count() > 0;
  const Clock::time_point timeout_at = started + limits.timeout;

  auto start_kill_sequence = [&](Clock::time_point now) {
    killing = true;
    ::kill(-pid, SIGTERM);
    kill_at = now + limits.kill_grace;
  };
  // The group is killed while the main process is still an unreaped zombie:
  // its pid (= the group id) cannot be reused before the reap, so kill(-pid)
  // can never hit an unrelated process group.
  auto reap = [&](bool block) {
    siginfo_t info{};
    int r;
    do {
      r = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT | (block ? 0 : WNOHANG));
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
      exited = true;  // ECHILD: someone else reaped it (SIGCHLD ignored); status unknown
      return;
    }
    if (info.si_pid != pid) return;  // WNOHANG and still running
    ::kill(-pid, SIGKILL);           // stragglers in its group go with it
    int status = 0;
    pid_t w;
    do {
      w = ::waitpid(pid, &status, 0);
    } while (w < 0 && errno == EINTR);
    exited = true;
    if (w == pid && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
    if (w == pid && WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  };

  ScopedSigpipeBlock no_sigpipe;
  for (;;) {
    auto now = Clock::now();
    if (!exited) {
      if (!killing && cancelled_.load()) {
        result.cancelled = true;
        start_kill_sequence(now);
      }
      if (!killing && has_timeout && now >= timeout_at) {
        result.timed_out = true;
        start_kill_sequence(now);
      }
      if (killing && !result.sigkill_sent && now >= kill_at) {
        result.sigkill_sent = true;
        ::kill(-pid, SIGKILL);
      }
    }
    if (exited && !output) break;
    if (exited && now >= drain_deadline) break;

    Clock::time_point next = now + milliseconds(1000);
    if (!exited) {
      if (!killing && has_timeout) next = std::min(next, timeout_at);
      if (killing && !result.sigkill_sent) next = std::min(next, kill_at);
      if (!pidfd) next = std::min(next, now + milliseconds(20));
    } else {
      next = std::min(next, drain_deadline);
    }

    pollfd fds[4];
    nfds_t nfds = 0;
    int out_i = -1, in_i = -1, pid_i = -1, wake_i = -1;
    if (output) {
      out_i = static_cast<int>(nfds);
      fds[nfds++] = pollfd{output.get(), POLLIN, 0};
    }
    if (input) {
      in_i = static_cast<int>(nfds);
      fds[nfds++] = pollfd{input.get(), POLLOUT, 0};
    }
    if (pidfd && !exited) {
      pid_i = static_cast<int>(nfds);
      fds[nfds++] = pollfd{pidfd.get(), POLLIN, 0};
    }
    if (wake_ && !exited && !killing) {
      wake_i = static_cast<int>(nfds);
      fds[nfds++] = pollfd{wake_.get(), POLLIN, 0};
    }
    int pr = ::poll(fds, nfds, poll_timeout_ms(now, next));
    if (pr < 0 && errno != EINTR) break;  // cannot happen with valid fds; do not spin
    if (pr > 0) {
      if (wake_i >= 0 && (fds[wake_i].revents & POLLIN)) {
        std::uint64_t v;
        ssize_t ignored = ::read(wake_.get(), &v, sizeof v);
        (void)ignored;
      }
      if (in_i >= 0 && fds[in_i].revents != 0) {
        ssize_t w = ::write(input.get(), stdin_data.data() + stdin_written,
                            stdin_data.size() - stdin_written);
        if (w > 0) stdin_written += static_cast<std::size_t>(w);
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || stdin_written >= stdin_data.size()) {
          input.reset();  // all written, or the child closed its stdin: EOF for it
        }
      }
      if (out_i >= 0 && fds[out_i].revents != 0) {
        // Read what is there now, a bounded number of times, then look at the
        // clock and the child again.
        for (int i = 0; i < 64; ++i) {
          ssize_t n = ::read(output.get(), buffer.data(), buffer.size());
          if (n > 0) {
            result.output_bytes += static_cast<std::uint64_t>(n);
            result.reads += 1;
            result.max_piece = std::max(result.max_piece, static_cast<std::size_t>(n));
            if (sink) sink(std::string_view(buffer.data(), static_cast<std::size_t>(n)));
            continue;
          }
          if (n == 0) output.reset();
          else if (errno == EINTR) continue;
          else if (errno != EAGAIN) output.reset();
          break;
        }
      }
    }
    if (!exited && (!pidfd || (pid_i >= 0 && (fds[pid_i].revents & POLLIN)))) {
      reap(false);
      if (exited) {
        // The main process is gone (and its group killed): the pipe reaches EOF
        // quickly unless a process escaped the group; wait for that only briefly.
        drain_deadline = Clock::now() + limits.drain_after_exit;
      }
    }
  }
  if (!exited) {
    ::kill(-pid, SIGKILL);  // the leader is alive or an unreaped zombie: pid not reusable
    reap(true);
  }
  // Reaped, and its group killed with it: nothing left for a later start to stop.
  if (actual.group_record != nullptr) actual.group_record->remove(pid);
  result.elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - started);
  return result;
}

}  // namespace fleetlink::agent
