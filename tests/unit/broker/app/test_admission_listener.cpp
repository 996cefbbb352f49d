// The accept gate's listener (net/accept_gate.hpp) on a real libuv loop and real
// loopback sockets: which accepted sockets go straight to the hand-over (their
// peer already spoke), which wait in the quiet set, and which are dropped.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <chrono>
#include <string>
#include <vector>

#include "net/accept_gate.hpp"

using fleetlink::broker::AdmissionListener;
using fleetlink::broker::HostPort;

namespace {

struct Gate {
  uv_loop_t loop{};
  std::vector<int> handed;          // descriptors handed over, in order
  std::vector<std::string> released;
  std::unique_ptr<AdmissionListener> listener;

  Gate() {
    REQUIRE(uv_loop_init(&loop) == 0);
    AdmissionListener::Hooks hooks;
    hooks.hand_over = [this](AdmissionListener::Accepted&& a) { handed.push_back(a.fd); };
    hooks.released = [this](const std::string& address) { released.push_back(address); };
    AdmissionListener::Options options;
    options.name = "test";
    options.wait_for_data = true;
    options.quiet_timeout_ms = 60'000;
    listener = std::make_unique<AdmissionListener>(&loop, std::move(hooks), options);
    REQUIRE(listener->open(HostPort{"127.0.0.1", 0}));
  }
  ~Gate() {
    for (int fd : handed) ::close(fd);
    listener.reset();
    uv_run(&loop, UV_RUN_NOWAIT);  // the handles' close callbacks
    uv_loop_close(&loop);
  }
  int connect_peer() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<std::uint16_t>(listener->port()));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
    return fd;
  }
  // Turns of the loop until `done` or a generous deadline (a loaded machine).
  template <typename Done>
  bool run_until(Done done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      uv_run(&loop, UV_RUN_NOWAIT);
      ::usleep(1000);
    }
    return true;
  }
};

}  // namespace

TEST_CASE("admission listener: a peer that spoke before its accept is handed over at once, with TCP_NODELAY") {
  Gate g;
  const int peer = g.connect_peer();
  REQUIRE(::send(peer, "GET", 3, MSG_NOSIGNAL) == 3);
  REQUIRE(g.run_until([&] { return !g.handed.empty(); }));
  CHECK(g.listener->quiet() == 0);
  int nodelay = 0;
  socklen_t len = sizeof nodelay;
  REQUIRE(::getsockopt(g.handed[0], IPPROTO_TCP, TCP_NODELAY, &nodelay, &len) == 0);
  CHECK(nodelay == 1);  // inherited from the listening socket
  char got[4] = {};
  CHECK(::recv(g.handed[0], got, sizeof got, 0) == 3);  // the peek left the bytes for lws
  ::close(peer);
}

TEST_CASE("admission listener: a silent peer waits in the quiet set until it speaks") {
  Gate g;
  const int peer = g.connect_peer();
  REQUIRE(g.run_until([&] { return g.listener->quiet() == 1; }));
  for (int i = 0; i < 20; ++i) uv_run(&g.loop, UV_RUN_NOWAIT);
  CHECK(g.handed.empty());
  REQUIRE(::send(peer, "GET", 3, MSG_NOSIGNAL) == 3);
  REQUIRE(g.run_until([&] { return !g.handed.empty(); }));
  CHECK(g.listener->quiet() == 0);
  ::close(peer);
}

TEST_CASE("admission listener: a peer gone before its accept is dropped, never handed over") {
  Gate g;
  const int peer = g.connect_peer();
  ::close(peer);  // its FIN waits in the accepted socket
  REQUIRE(g.run_until([&] { return !g.released.empty(); }));
  CHECK(g.released[0] == "127.0.0.1");
  CHECK(g.handed.empty());
  CHECK(g.listener->quiet() == 0);
}
