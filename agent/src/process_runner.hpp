#pragma once
// Runs one child process to its end on the calling thread: reads its output
// through a fixed-size buffer (so memory does not grow with the output), feeds
// its stdin, enforces a timeout and a cancel with the kill sequence
// SIGTERM -> grace period -> SIGKILL sent to the whole process group.
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "fleetlink/expected.hpp"
#include "fleetlink/messages.hpp"
#include "process_fd.hpp"
#include "process_spawn.hpp"

namespace fleetlink::agent {

struct RunLimits {
  std::chrono::milliseconds timeout{0};         // 0: no timeout
  std::chrono::milliseconds kill_grace{10000};  // SIGTERM -> SIGKILL
  std::size_t read_bytes = kMaxChunkBytes;      // size of the one read buffer
  // After the main process exits, how long the rest of its output may take to
  // arrive (stragglers in its group are killed at once; an escaped process that
  // still holds the pipe is not waited for beyond this).
  std::chrono::milliseconds drain_after_exit{1000};
};

struct RunResult {
  pid_t pid = -1;
  int exit_code = -1;          // when the process exited normally
  int signal = 0;              // when a signal ended it
  bool timed_out = false;      // the kill sequence ran because of the timeout
  bool cancelled = false;      // ... because cancel() was called
  bool sigkill_sent = false;   // the grace period ran out
  std::uint64_t output_bytes = 0;   // everything read from the child
  std::uint64_t reads = 0;          // number of pieces handed to the sink
  std::size_t max_piece = 0;        // largest piece handed to the sink
  std::size_t buffer_bytes = 0;     // memory the runner held for output (fixed)
  std::chrono::milliseconds elapsed{0};
};

class ProcessRunner {
 public:
  // Receives each piece of output as it is read (at most RunLimits::read_bytes).
  using Sink = std::function<void(std::string_view)>;

  ProcessRunner();
  ProcessRunner(const ProcessRunner&) = delete;
  ProcessRunner& operator=(const ProcessRunner&) = delete;

  // Spawns and runs to the end. Errors are spawn failures; everything that
  // happens after the child exists is a RunResult.
  Expected<RunResult> run(const SpawnSpec& spec, const RunLimits& limits,
                          std::string_view stdin_data, const Sink& sink);

  // Thread-safe, idempotent; before run() it makes run() return cancelled
  // without starting anything.
  void cancel() noexcept;
  bool cancel_requested() const noexcept { return cancelled_.load(); }

 private:
  std::atomic<bool> cancelled_{false};
  UniqueFd wake_;  // eventfd that interrupts poll() on cancel
};

}  // namespace fleetlink::agent
