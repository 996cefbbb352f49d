#include "reboot_executor.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/log.hpp"

extern char** environ;

namespace fleetlink::agent {

RebootExecutor::RebootExecutor(RebootOptions opts) : opts_(std::move(opts)) {}

void RebootExecutor::start(const CommandContext& ctx, std::shared_ptr<Reporter> reporter) {
  char delay[32];
  std::snprintf(delay, sizeof delay, "%lld.%03lld",
                static_cast<long long>(opts_.delay.count() / 1000),
                static_cast<long long>(opts_.delay.count() % 1000));
  // The command is passed as a positional parameter, never spliced into the script.
  std::string script = "sleep \"$1\"; exec /bin/sh -c \"$2\"";
  std::string arg0 = "fleetlink-reboot";
  std::string cmd = opts_.command;
  char* argv[] = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"), script.data(),
                  arg0.data(), delay, cmd.data(), nullptr};

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGINT);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  // Its own session: the reboot goes on even if the agent is stopped meanwhile.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/bin/sh", nullptr, &attr, argv, environ);
  posix_spawnattr_destroy(&attr);

  Outcome out;
  if (rc != 0) {
    out.status = msg::Status::failed;
    out.exit_code = 1;
    out.detail = std::string("cannot start the reboot command: ") + std::strerror(rc);
    reporter->finish(std::move(out));
    return;
  }
  out.status = msg::Status::scheduled;
  out.detail = "reboot in " + std::to_string(opts_.delay.count()) + "ms: " + opts_.command;
  FL_INFO("reboot scheduled cmd=%s pid=%d in %lldms: %s", ctx.cmd_id.c_str(), static_cast<int>(pid),
          static_cast<long long>(opts_.delay.count()), opts_.command.c_str());
  reporter->finish(std::move(out));
  // Reap it so no zombie is left when the command returns (tests, or a failed reboot).
  std::thread([pid, id = ctx.cmd_id] {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
      FL_INFO("reboot command finished cmd=%s", id.c_str());
    else
      FL_WARN("reboot command failed cmd=%s status=%d", id.c_str(), status);
  }).detach();
}

}  // namespace fleetlink::agent
