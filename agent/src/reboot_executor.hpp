#pragma once
// Command kind "reboot". The agent has already recorded the cmd_id durably (the
// dedup file is fsync'd before the ACK) when start() is called; this reports
// `scheduled` and then runs the reboot command (--reboot-command, default
// "systemctl reboot") through /bin/sh -c in its own session after a short delay,
// so the RESULT is on the wire before the rig goes down.
#include <chrono>
#include <string>

#include "fleetlink/executor.hpp"

namespace fleetlink::agent {

struct RebootOptions {
  std::string command = "systemctl reboot";
  std::chrono::milliseconds delay{1000};
};

class RebootExecutor final : public Executor {
 public:
  explicit RebootExecutor(RebootOptions opts);
  std::string_view kind() const override { return "reboot"; }
  void start(const CommandContext& ctx, std::shared_ptr<Reporter> reporter) override;
  void cancel(std::string_view) override {}  // once scheduled it is the system's business

 private:
  RebootOptions opts_;
};

}  // namespace fleetlink::agent
