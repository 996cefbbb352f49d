#include "process_jobs.hpp"

#include <exception>
#include <thread>

namespace fleetlink::agent {

ProcessJobs::~ProcessJobs() {
  std::unique_lock lock(mu_);
  for (auto& [id, runner] : jobs_) runner->cancel();
  done_.wait(lock, [this] { return threads_ == 0; });
}

void ProcessJobs::launch(const std::string& cmd_id, std::shared_ptr<Reporter> reporter,
                         Body body) {
  auto runner = std::make_shared<ProcessRunner>();
  {
    std::lock_guard lock(mu_);
    if (jobs_.count(cmd_id) != 0) {
      Outcome o;
      o.status = msg::Status::failed;
      o.exit_code = -1;
      o.detail = "command " + cmd_id + " is already running";
      reporter->finish(std::move(o));
      return;
    }
    if (jobs_.size() >= max_running_) {
      Outcome o;
      o.status = msg::Status::failed;
      o.exit_code = -1;
      o.detail = "busy: " + std::to_string(jobs_.size()) + " runs already going (at most " +
                 std::to_string(max_running_) + " at once)";
      reporter->finish(std::move(o));
      return;
    }
    jobs_.emplace(cmd_id, runner);
    ++threads_;
  }
  auto work = [this, cmd_id, runner, reporter, body = std::move(body)]() mutable {
    Outcome outcome;
    try {
      outcome = body(*runner);
    } catch (const std::exception& e) {
      outcome = Outcome{};
      outcome.status = msg::Status::failed;
      outcome.exit_code = -1;
      outcome.detail = std::string("executor error: ") + e.what();
    } catch (...) {
      outcome = Outcome{};
      outcome.status = msg::Status::failed;
      outcome.exit_code = -1;
      outcome.detail = "executor error";
    }
    {
      std::lock_guard lock(mu_);
      jobs_.erase(cmd_id);
    }
    reporter->finish(std::move(outcome));
    reporter.reset();
    runner.reset();
    body = nullptr;
    std::lock_guard lock(mu_);
    --threads_;
    done_.notify_all();
  };
  try {
    std::thread(std::move(work)).detach();
  } catch (const std::exception& e) {
    {
      std::lock_guard lock(mu_);
      jobs_.erase(cmd_id);
      --threads_;
      done_.notify_all();
    }
    Outcome o;
    o.status = msg::Status::failed;
    o.exit_code = -1;
    o.detail = std::string("cannot start a thread: ") + e.what();
    reporter->finish(std::move(o));
  }
}

bool ProcessJobs::cancel(std::string_view cmd_id) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(cmd_id);
  if (it == jobs_.end()) return false;
  it->second->cancel();
  return true;
}

std::size_t ProcessJobs::running() const {
  std::lock_guard lock(mu_);
  return jobs_.size();
}

}  // namespace fleetlink::agent
