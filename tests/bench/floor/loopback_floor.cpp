// fleetlink-loopback-floor: what the kernel alone charges a broker per command
// on this machine, with no WebSocket, no TLS, no protocol and no event library.
//
// A "broker" process (this one, pinned to --broker-cpu) holds --count TCP
// connections over loopback to a "rig" process (forked, pinned to --rig-cpu).
// Each round the broker writes a --command-bytes message to every connection
// (fan-out), and the rig answers each with --reply-bytes (an ACK and a small
// RESULT together, as the simulated rigs do); the broker reads every answer
// through epoll. Reported: the median round's wall time and the broker's own CPU
// (user + system) per command. A real broker does at least this much work per
// command, so these figures are the floor under the `fanout` scenario (and, per
// command, under `pipelined`, which adds the control client's socket I/O).
#include <sched.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include <CLI/CLI.hpp>

namespace {

struct Options {
  int count = 10000;
  int rounds = 5;
  int command_bytes = 90;   // a COMMAND frame of kind "noop" with its cmd_id
  int reply_bytes = 200;    // ACK + RESULT with 64 bytes of output
  int broker_cpu = 0;
  int rig_cpu = 1;
};

void pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6; };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
}

void set_nodelay_nonblock(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// The rig side: answer every message with reply_bytes, until the broker hangs up.
int run_rig(int listen_fd, const Options& o) {
  pin(o.rig_cpu);
  const int ep = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd;
  epoll_ctl(ep, EPOLL_CTL_ADD, listen_fd, &ev);
  std::vector<char> reply(static_cast<std::size_t>(o.reply_bytes), 'r');
  std::vector<char> buf(65536);
  std::vector<epoll_event> events(1024);
  int open = 0;
  bool accepted_all = false;
  while (!accepted_all || open > 0) {
    const int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), 10000);
    if (n <= 0) return n == 0 ? 3 : 4;
    for (int i = 0; i < n; ++i) {
      const int fd = events[static_cast<std::size_t>(i)].data.fd;
      if (fd == listen_fd) {
        for (;;) {
          const int c = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK);
          if (c < 0) break;
          set_nodelay_nonblock(c);
          epoll_event cev{};
          cev.events = EPOLLIN;
          cev.data.fd = c;
          epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
          if (++open == o.count) accepted_all = true;
        }
        continue;
      }
      const ssize_t got = recv(fd, buf.data(), buf.size(), 0);
      if (got == 0 || (got < 0 && errno != EAGAIN)) {
        close(fd);
        --open;
        continue;
      }
      // One reply per message received (messages arrive whole: one per round).
      for (ssize_t seen = 0; seen < got; seen += o.command_bytes) {
        if (send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) < 0) break;
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"fleetlink-loopback-floor: the kernel's cost per command on this machine (see the source)"};
  app.add_option("--count", o.count, "connections (one per simulated rig)")->check(CLI::Range(1, 19000));
  app.add_option("--rounds", o.rounds, "fan-out rounds (the median is reported)")->check(CLI::Range(1, 1000));
  app.add_option("--command-bytes", o.command_bytes)->check(CLI::Range(1, 65536));
  app.add_option("--reply-bytes", o.reply_bytes)->check(CLI::Range(1, 65536));
  app.add_option("--broker-cpu", o.broker_cpu, "-1: not pinned");
  app.add_option("--rig-cpu", o.rig_cpu, "-1: not pinned");
  CLI11_PARSE(app, argc, argv);

  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < static_cast<rlim_t>(o.count) + 64) {
    std::fprintf(stderr, "loopback-floor: --count %d needs %d open files, the limit is %llu\n", o.count,
                 o.count + 64, static_cast<unsigned long long>(rl.rlim_cur));
    return 2;
  }

  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof addr;
  if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(lfd, 4096) != 0 ||
      getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) {
    std::perror("loopback-floor: listen");
    return 1;
  }
  const pid_t rig = fork();
  if (rig == 0) _exit(run_rig(lfd, o));
  close(lfd);
  pin(o.broker_cpu);

  std::vector<int> fds;
  fds.reserve(static_cast<std::size_t>(o.count));
  const int ep = epoll_create1(0);
  for (int i = 0; i < o.count; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    // Spread the source addresses: tens of thousands of connections from one
    // address to one port make the kernel's ephemeral-port search the cost.
    sockaddr_in src{};
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl(0x7F000000u | (10u << 16) | static_cast<unsigned>(1 + i % 200));
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 ||
        connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      std::perror("loopback-floor: connect");
      kill(rig, SIGTERM);
      return 1;
    }
    set_nodelay_nonblock(fd);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    fds.push_back(fd);
  }

  std::vector<char> command(static_cast<std::size_t>(o.command_bytes), 'c');
  std::vector<char> buf(65536);
  std::vector<epoll_event> events(1024);
  std::vector<double> walls;
  std::vector<double> cpus;
  for (int round = 0; round < o.rounds; ++round) {
    const double cpu0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    for (const int fd : fds) {
      if (send(fd, command.data(), command.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(command.size())) {
        std::perror("loopback-floor: send");
        kill(rig, SIGTERM);
        return 1;
      }
    }
    long long want = static_cast<long long>(o.count) * o.reply_bytes;
    while (want > 0) {
      const int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), 10000);
      if (n <= 0) {
        std::fprintf(stderr, "loopback-floor: replies stopped (%lld bytes missing)\n", want);
        kill(rig, SIGTERM);
        return 1;
      }
      for (int i = 0; i < n; ++i) {
        const ssize_t got = recv(events[static_cast<std::size_t>(i)].data.fd, buf.data(), buf.size(), 0);
        if (got > 0) want -= got;
      }
    }
    walls.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    cpus.push_back(cpu_seconds() - cpu0);
  }
  for (const int fd : fds) close(fd);
  int status = 0;
  waitpid(rig, &status, 0);

  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double wall = median(walls);
  const double cpu = median(cpus);
  std::printf("{\"count\": %d, \"rounds\": %d, \"median_round_s\": %.4f, \"broker_cpu_s_per_round\": %.4f, "
              "\"broker_cpu_us_per_command\": %.2f, \"rig_exit\": %d}\n",
              o.count, o.rounds, wall, cpu, cpu * 1e6 / o.count, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return 0;
}
