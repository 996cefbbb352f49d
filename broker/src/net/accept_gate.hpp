#pragma once
// Admission: the broker owns accept(). Its listening socket has SO_REUSEPORT so
// several broker processes can share one port; a uv_poll_t watches it and every
// accepted socket is handed to libwebsockets (lws_adopt_socket_vhost), TLS included.
//
// A socket is handed over only while the broker says it has room (hold_us() == 0):
// while too many handed-over sockets have not finished their TLS handshake and
// WebSocket upgrade, or (TLS listener) while the accept-rate bucket is empty, the
// accepted sockets wait, first in the listener's own FIFO (up to max_waiting; an
// accepted socket costs no user-space memory beyond its fd, and its client's
// ClientHello just sits in the receive buffer), then, with the listener's poll
// stopped, in the kernel's backlog. The own FIFO matters because the backlog is
// capped by net.core.somaxconn (4096) and a full backlog drops SYNs, which clients
// retransmit with an exponential backoff (1, 3, 7, 15 s...). A TLS handshake
// accepted and then abandoned costs the broker its CPU and the rig a failed
// attempt plus an exponential backoff; waiting costs neither. Plain ws rigs over the bucket are still answered 503 with a
// Retry-After at the upgrade (Broker::on_confirm_upgrade), which is cheap there.
#include <sys/resource.h>
#include <uv.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>

#include "net/host_port.hpp"
#include "fleetlink/expected.hpp"
#include "fleetlink/token_bucket.hpp"

struct lws;
struct lws_vhost;

namespace fleetlink::broker {

// Accepted sockets whose TLS handshake / WebSocket upgrade is still running,
// keyed by an opaque handle (the lws wsi). Pure bookkeeping, unit-tested.
// An entry whose end was never reported (a destroy notification missed) expires
// after max_age_ms, so the count cannot leak and close the listener for good.
class PendingHandshakes {
 public:
  PendingHandshakes(std::size_t limit, std::uint64_t max_age_ms) : limit_(limit), max_age_ms_(max_age_ms) {}
  void started(const void* key, std::uint64_t now_ms) { started_at_[key] = now_ms; }
  // True if key was pending (it is not any more).
  bool finished(const void* key) { return started_at_.erase(key) != 0; }
  std::size_t expire(std::uint64_t now_ms);   // returns how many expired
  std::size_t count() const noexcept { return started_at_.size(); }
  std::size_t limit() const noexcept { return limit_; }
  bool full() const noexcept { return started_at_.size() >= limit_; }

 private:
  std::size_t limit_;
  std::uint64_t max_age_ms_;
  std::unordered_map<const void*, std::uint64_t> started_at_;
};

class AdmissionListener {
 public:
  // Called for each accepted fd (the callee adopts or closes it).
  using OnAccept = std::function<void(int fd)>;
  // 0: accept one now. kUntilResumed: wait for resume(). Otherwise: look again
  // after that many microseconds.
  using HoldUs = std::function<std::uint64_t()>;
  static constexpr std::uint64_t kUntilResumed = std::numeric_limits<std::uint64_t>::max();

  AdmissionListener(uv_loop_t* loop, OnAccept on_accept, HoldUs hold_us = {}, std::size_t max_waiting = 32768)
      : loop_(loop), on_accept_(std::move(on_accept)), hold_us_(std::move(hold_us)),
        max_waiting_(max_waiting == 0 ? 1 : max_waiting) {}
  ~AdmissionListener();
  AdmissionListener(const AdmissionListener&) = delete;
  AdmissionListener& operator=(const AdmissionListener&) = delete;

  // Bind (SO_REUSEADDR + SO_REUSEPORT), listen, start watching. The kernel caps
  // the backlog at net.core.somaxconn (4096 by default on Linux >= 5.4).
  Expected<void> open(const HostPort& where, int backlog = 65535);
  int port() const noexcept { return port_; }
  // Room again (a handshake finished): hand over waiting sockets (cheap; call freely).
  void resume();
  bool paused() const noexcept { return paused_; }
  std::size_t waiting() const noexcept { return waiting_.size(); }
  // Stop accepting and close the socket (drain). Idempotent.
  void close();

 private:
  static void on_readable(uv_poll_t* handle, int status, int events);
  void pump();
  void stop_polling();
  void start_polling();
  void look_again_in(std::uint64_t us);
  bool descriptors_tight() const;
  static constexpr rlim_t kFdReserve = 64;
  uv_loop_t* loop_;
  OnAccept on_accept_;
  HoldUs hold_us_;
  uv_poll_t* poll_ = nullptr;    // heap: freed in the uv close callback
  uv_timer_t* timer_ = nullptr;  // heap: likewise; re-checks a timed hold
  int fd_ = -1;
  int port_ = 0;
  bool paused_ = false;
  std::size_t max_waiting_;
  int fd_ceiling_ = std::numeric_limits<int>::max();   // RLIMIT_NOFILE minus kFdReserve
  std::deque<int> waiting_;   // accepted, not yet handed over (FIFO)
};

class FleetObserver;

// The rig listeners' gate, both of them (TLS; plain ws on loopback for benches):
// an AdmissionListener each, the accept-rate token bucket, the bound on
// handshakes in flight, and the answer at the WebSocket upgrade. TLS rigs take
// their token at accept() (over the bucket they wait in the backlog: no
// handshake is spent on a 503); plain rigs take it at the upgrade, where a 503
// with a jittered Retry-After is cheap.
class AcceptGate {
 public:
  struct Settings {
    double accept_rate = 50;
    double accept_burst = 100;
    std::uint32_t retry_after_min_s = 5;
    std::uint32_t retry_after_max_s = 15;
    std::uint32_t max_pending_handshakes = 256;
    std::uint32_t tls_accept_timeout_s = 30;
  };
  // `draining`: whether the broker refuses new rigs now.
  AcceptGate(uv_loop_t* loop, Settings settings, FleetObserver& observer, std::function<bool()> draining);
  ~AcceptGate();
  AcceptGate(const AcceptGate&) = delete;
  AcceptGate& operator=(const AcceptGate&) = delete;

  // Listens on `where` and hands accepted sockets to `vhost` (TLS or plain).
  Expected<void> open(lws_vhost* vhost, const HostPort& where, bool tls);
  int tls_port() const noexcept { return tls_ ? tls_->port() : 0; }
  int plain_port() const noexcept { return plain_ ? plain_->port() : 0; }
  // A socket handed to lws finished (or failed) its handshake and upgrade.
  void handshake_finished(lws* wsi);
  // LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: 0 to admit; 1 when answered here (404 for
  // another path, 503 + Retry-After over the rate or while draining); -1 on error.
  int on_upgrade(lws* wsi);
  // Stops accepting and closes the listening sockets (a drain, or shutdown).
  void close();

 private:
  std::uint64_t mono_us() const noexcept;
  std::uint64_t mono_ms() const noexcept;
  uv_loop_t* loop_;
  Settings settings_;
  FleetObserver& observer_;
  std::function<bool()> draining_;
  TokenBucket bucket_;
  PendingHandshakes pending_;
  std::unique_ptr<AdmissionListener> tls_;
  std::unique_ptr<AdmissionListener> plain_;
  std::mt19937_64 rng_;
};

}  // namespace fleetlink::broker
