#include "process_spawn.hpp"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

extern char** environ;

namespace fleetlink::agent {
namespace {

// What the child reports through the error pipe when it cannot reach execve().
struct ChildFailure {
  int stage;
  int err;
};
enum Stage : int { kStageDup = 1, kStageChdir, kStageGroups, kStageGid, kStageUid, kStageExec, kStageDeathSignal };

const char* stage_name(int stage) {
  switch (stage) {
    case kStageDup: return "redirecting stdio";
    case kStageChdir: return "changing to the working directory";
    case kStageGroups: return "setting supplementary groups";
    case kStageGid: return "setting the group id";
    case kStageUid: return "setting the user id";
    case kStageExec: return "execve";
    case kStageDeathSignal: return "setting the parent-death signal";
    default: return "starting the child";
  }
}

std::string errno_text(int err) { return std::strerror(err); }

struct UserSwitch {
  bool needed = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  std::string home;
  std::string name;
};

Expected<UserSwitch> resolve_user(const std::string& user) {
  UserSwitch out;
  if (user.empty()) return out;
  long size_hint = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size_hint > 0 ? static_cast<std::size_t>(size_hint) : 16384);
  passwd pw{};
  passwd* found = nullptr;
  int rc = 0;
  while ((rc = ::getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found)) == ERANGE &&
         buf.size() < (1u << 20)) {
    buf.resize(buf.size() * 2);
  }
  if (rc != 0 || found == nullptr) {
    return make_error(Errc::invalid_argument, "unknown user '" + user + "'");
  }
  out.uid = pw.pw_uid;
  out.gid = pw.pw_gid;
  out.home = pw.pw_dir ? pw.pw_dir : "";
  out.name = pw.pw_name ? pw.pw_name : user;
  if (::geteuid() != 0) {
    if (pw.pw_uid == ::geteuid()) return out;  // already that user: nothing to switch
    return make_error(Errc::invalid_argument,
                      "cannot run as user '" + user + "': the agent is not running as root");
  }
  int ngroups = 64;
  for (int attempt = 0; attempt < 8; ++attempt) {
    out.groups.resize(static_cast<std::size_t>(ngroups));
    int n = ngroups;
    if (::getgrouplist(out.name.c_str(), out.gid, out.groups.data(), &n) >= 0) {
      out.groups.resize(static_cast<std::size_t>(n));
      break;
    }
    ngroups = n > ngroups ? n : ngroups * 2;
  }
  out.needed = true;
  return out;
}

std::vector<std::string> build_environment(const SpawnSpec& spec, const UserSwitch& user) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    vars[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  if (user.needed) {
    vars["HOME"] = user.home;
    vars["USER"] = user.name;
    vars["LOGNAME"] = user.name;
  }
  for (const auto& [k, v] : spec.env) vars[k] = v;
  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const auto& [k, v] : vars) out.push_back(k + "=" + v);
  return out;
}

// Runs in the child between fork() and execve(): async-signal-safe calls only.
[[noreturn]] void child_main(int out_fd, int in_fd, int err_fd, int go_fd, int go_write_fd, pid_t agent,
                             const char* cwd, const UserSwitch& user, const char* program,
                             char* const* argv, char* const* envp) {
  auto fail = [err_fd](int stage) {
    ChildFailure f{stage, errno};
    ssize_t ignored = ::write(err_fd, &f, sizeof f);
    (void)ignored;
    ::_exit(127);
  };
  ::setpgid(0, 0);
  // The agent may block or ignore signals; a suite starts with the defaults.
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction sa {};
    sa.sa_handler = SIG_DFL;
    ::sigaction(sig, &sa, nullptr);
  }
  if (::dup2(in_fd, STDIN_FILENO) < 0) fail(kStageDup);
  if (::dup2(out_fd, STDOUT_FILENO) < 0) fail(kStageDup);
  if (::dup2(out_fd, STDERR_FILENO) < 0) fail(kStageDup);
  // The read end is non-blocking in the agent; the child's end must block.
  int flags = ::fcntl(STDOUT_FILENO, F_GETFL);
  if (flags >= 0) ::fcntl(STDOUT_FILENO, F_SETFL, flags & ~O_NONBLOCK);
  flags = ::fcntl(STDIN_FILENO, F_GETFL);
  if (flags >= 0) ::fcntl(STDIN_FILENO, F_SETFL, flags & ~O_NONBLOCK);
  if (user.needed) {
    if (::setgroups(user.groups.size(), user.groups.data()) != 0) fail(kStageGroups);
    if (::setgid(user.gid) != 0) fail(kStageGid);
    if (::setuid(user.uid) != 0) fail(kStageUid);
  }
  // Dies with the agent (the thread that forked it, which waits for it to the
  // end): the first defence against orphans. Set after the user switch, which
  // clears it. What this process starts is found at the agent's next start.
  if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) fail(kStageDeathSignal);
  if (::getppid() != agent) ::_exit(127);  // the agent died before that: not run
  // Not before the agent has recorded the process group: EOF instead of the
  // byte means it could not (or died), and the program never runs.
  ::close(go_write_fd);
  char go = 0;
  ssize_t got;
  do {
    got = ::read(go_fd, &go, 1);
  } while (got < 0 && errno == EINTR);
  if (got != 1) ::_exit(127);
  if (cwd != nullptr && ::chdir(cwd) != 0) fail(kStageChdir);
  // Nothing but 0-2 and the error pipe (which is O_CLOEXEC) reaches the program.
  int keep = err_fd;
  if (keep > 3) ::close_range(3, static_cast<unsigned>(keep - 1), 0);
  ::close_range(static_cast<unsigned>(keep + 1), ~0U, 0);
  ::execve(program, argv, envp);
  fail(kStageExec);
  ::_exit(127);
}

Expected<std::pair<UniqueFd, UniqueFd>> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return make_error(Errc::io, "pipe2: " + errno_text(errno));
  }
  return std::make_pair(UniqueFd(fds[0]), UniqueFd(fds[1]));
}

}  // namespace

static bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

Expected<std::string> resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (!is_executable_file(name)) {
      return make_error(Errc::invalid_argument,
                        "program '" + name + "' is not an executable file");
    }
    return name;
  }
  const char* path_env = ::getenv("PATH");
  std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  std::size_t pos = 0;
  while (pos <= path.size()) {
    std::size_t end = path.find(':', pos);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(pos, end - pos);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    pos = end + 1;
  }
  return make_error(Errc::invalid_argument, "program '" + name + "' not found in PATH");
}

Expected<SpawnedProcess> spawn_process(const SpawnSpec& spec) {
  if (spec.argv.empty() || spec.argv.front().empty()) {
    return make_error(Errc::invalid_argument, "empty argv");
  }
  auto program = resolve_program(spec.argv.front());
  if (!program) return program.error();
  auto user = resolve_user(spec.user);
  if (!user) return user.error();

  std::vector<std::string> env_strings = build_environment(spec, *user);
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = spec.argv;
  std::vector<char*> argv;
  argv.reserve(argv_strings.size() + 1);
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  auto out_pipe = make_pipe();
  if (!out_pipe) return out_pipe.error();
  auto err_pipe = make_pipe();
  if (!err_pipe) return err_pipe.error();
  // The go-ahead: a socket pair, so writing it to a child that already failed
  // is EPIPE and never SIGPIPE (MSG_NOSIGNAL), whatever the caller's signal setup.
  int go_fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, go_fds) != 0)
    return make_error(Errc::io, "socketpair: " + errno_text(errno));
  UniqueFd go_read(go_fds[0]);
  UniqueFd go_write(go_fds[1]);
  UniqueFd in_read;
  UniqueFd in_write;
  if (spec.with_stdin) {
    auto in_pipe = make_pipe();
    if (!in_pipe) return in_pipe.error();
    in_read = std::move(in_pipe->first);
    in_write = std::move(in_pipe->second);
  } else {
    in_read.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!in_read) return make_error(Errc::io, "open /dev/null: " + errno_text(errno));
  }
  const char* cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();

  const pid_t agent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return make_error(Errc::io, "fork: " + errno_text(errno));
  if (pid == 0) {
    child_main(out_pipe->second.get(), in_read.get(), err_pipe->second.get(), go_read.get(),
               go_write.get(), agent, cwd, *user, program->c_str(), argv.data(), envp.data());
  }
  // Also in the parent, so a kill of the group right after fork() cannot miss it.
  ::setpgid(pid, pid);
  out_pipe->second.reset();
  err_pipe->second.reset();
  go_read.reset();
  in_read.reset();
  auto reap_now = [pid] {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  };
  if (spec.group_record != nullptr) {
    auto recorded = spec.group_record->add(pid, spec.cmd_id, *program, spec.kill_grace);
    if (!recorded) {
      ::kill(pid, SIGKILL);  // waiting for its go: it has run nothing
      go_write.reset();
      reap_now();
      return recorded.error();
    }
  }
  const char go = 1;
  ssize_t wrote;
  do {
    wrote = ::send(go_write.get(), &go, 1, MSG_NOSIGNAL);
  } while (wrote < 0 && errno == EINTR);
  go_write.reset();

  ChildFailure failure{};
  ssize_t n;
  do {
    n = ::read(err_pipe->first.get(), &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof failure)) {
    reap_now();
    if (spec.group_record != nullptr) spec.group_record->remove(pid);
    std::string what = std::string(stage_name(failure.stage)) + " failed";
    if (failure.stage == kStageChdir) what += " '" + spec.cwd + "'";
    if (failure.stage == kStageExec) what += " for '" + *program + "'";
    return make_error(Errc::io, what + ": " + errno_text(failure.err));
  }

  int fl = ::fcntl(out_pipe->first.get(), F_GETFL);
  ::fcntl(out_pipe->first.get(), F_SETFL, fl | O_NONBLOCK);
  if (in_write) {
    fl = ::fcntl(in_write.get(), F_GETFL);
    ::fcntl(in_write.get(), F_SETFL, fl | O_NONBLOCK);
  }
  SpawnedProcess out;
  out.pid = pid;
  out.output = std::move(out_pipe->first);
  out.input = std::move(in_write);
  return out;
}

}  // namespace fleetlink::agent
