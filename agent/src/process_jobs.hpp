#pragma once
// The running child processes of one executor, by cmd_id: each on its own
// thread, each cancellable, all stopped and waited for when the executor goes.
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "fleetlink/executor.hpp"
#include "process_runner.hpp"

namespace fleetlink::agent {

class ProcessJobs {
 public:
  // The body runs on a new thread and returns the Outcome that is then passed
  // to reporter->finish(). It must use the runner it is given so cancel() works.
  using Body = std::function<Outcome(ProcessRunner&)>;

  // At most max_running jobs at once: a flood of commands cannot fork-bomb the rig.
  explicit ProcessJobs(std::size_t max_running = 16) : max_running_(max_running) {}
  ProcessJobs(const ProcessJobs&) = delete;
  ProcessJobs& operator=(const ProcessJobs&) = delete;
  ~ProcessJobs();  // cancels every job and waits for their threads

  // Refuses (finishes `failed` at once) a cmd_id that is already running, and
  // any job over max_running.
  void launch(const std::string& cmd_id, std::shared_ptr<Reporter> reporter, Body body);
  // True when cmd_id was running; its finish() then reports what the body made of it.
  bool cancel(std::string_view cmd_id);
  std::size_t running() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable done_;
  std::map<std::string, std::shared_ptr<ProcessRunner>, std::less<>> jobs_;
  std::size_t threads_ = 0;
  std::size_t max_running_;
};

}  // namespace fleetlink::agent
