#pragma once
// A real redis-server for the tests: started on a free loopback port in a
// temporary directory, with no persistence, and stopped (by its PID) at the
// end. A machine without redis-server fails the test that needs it, saying
// so: it is never skipped.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

namespace redis_test {

inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

inline bool accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

class RedisServer {
 public:
  RedisServer() : port_(free_port()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fleetlink-redis-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    dir_ = tmpl;
    start();
  }
  ~RedisServer() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }

  void start() {
    REQUIRE_MESSAGE(::access("/usr/bin/redis-server", X_OK) == 0,
                    "redis-server is not installed (scripts/install-deps.sh installs it): this test cannot run");
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      const std::string port = std::to_string(port_);
      const std::string log = dir_ + "/redis.log";
      ::execl("/usr/bin/redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "",
              "--appendonly", "no", "--dir", dir_.c_str(), "--logfile", log.c_str(), "--loglevel", "warning",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!accepts(port_)) {
      int status = 0;
      REQUIRE_MESSAGE(::waitpid(pid_, &status, WNOHANG) == 0, "redis-server exited at start");
      REQUIRE_MESSAGE(std::chrono::steady_clock::now() < until, "redis-server did not listen within 10 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  int port_;
  std::string dir_;
  pid_t pid_ = -1;
};

}  // namespace redis_test
