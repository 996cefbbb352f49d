#pragma once
// Admission: the broker owns accept(), on the rig listeners and on the control
// port. A rig listening socket has SO_REUSEPORT so several broker processes can
// share one port; a uv_poll_t watches it and every accepted socket is handed to
// libwebsockets (lws_adopt_socket_vhost), TLS included.
//
// A rig's socket goes through three rooms before it is a rig:
// - quiet: accepted, nothing received yet. It is watched by the listener's own
//   epoll set, unseen by lws, and costs nothing but its descriptor; it is closed
//   if its peer says nothing within the handshake deadline. So silent TCP
//   connections (port scanners, a flood) never take a handshake slot. A socket
//   whose first bytes are already there when it is accepted (one MSG_PEEK: the
//   usual case under load) skips this room, and one whose peer already left is
//   closed at once.
// - waiting: its first bytes (a ClientHello) arrived; it waits in the listener's
//   FIFO (up to max_waiting) while too many handed-over sockets have not
//   finished their TLS handshake and WebSocket upgrade, or (TLS listener) while
//   the accept-rate bucket is empty; with the FIFO full, the listener's poll
//   stops and the kernel's backlog is the waiting room. The own FIFO matters
//   because the backlog is capped by net.core.somaxconn (4096) and a full
//   backlog drops SYNs, which clients retransmit with an exponential backoff
//   (1, 3, 7, 15 s...). A TLS handshake accepted and then abandoned costs the
//   broker its CPU and the rig a failed attempt plus an exponential backoff;
//   waiting costs neither.
// - pending: handed to lws, handshake running. It is closed if its TLS handshake
//   and WebSocket upgrade are not done within the handshake deadline of being
//   handed over (time spent waiting for the broker's room is not the peer's fault).
// Connections from one source address in these rooms are bounded on the TLS
// listener (the plain one is loopback-only); over the bound a new one is closed
// at once. Plain ws rigs over the bucket are answered
// 503 with a Retry-After at the upgrade (AcceptGate::on_upgrade), which is cheap
// there; a TLS rig is never refused with 503 (that would cost the handshake the
// bucket protects): it waits.
//
// Descriptors: a rig listener keeps a reserve under RLIMIT_NOFILE that rig
// sockets never take (an accept that gets one is closed at once), so the
// control port (/healthz, /readyz, /metrics), the store and lws still have
// descriptors when rigs or a flood have taken the rest. Out of descriptors, a
// listener stops watching its socket and looks again after a back-off
// (FdExhaustion), with one log line when the episode starts and one when it ends.
#include <sys/resource.h>
#include <sys/socket.h>
#include <uv.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "net/host_port.hpp"
#include "fleetlink/expected.hpp"
#include "fleetlink/token_bucket.hpp"

struct lws;
struct lws_vhost;

namespace fleetlink::broker {

// Accepted sockets whose TLS handshake / WebSocket upgrade is still running,
// keyed by an opaque handle (the lws wsi), with the source address each came
// from. Pure bookkeeping, unit-tested. An entry whose end was never reported (a
// destroy notification missed) expires after max_age_ms, so the count cannot
// leak and close the listener for good.
class PendingHandshakes {
 public:
  PendingHandshakes(std::size_t limit, std::uint64_t max_age_ms) : limit_(limit), max_age_ms_(max_age_ms) {}
  void started(const void* key, std::uint64_t now_ms, std::string address = {});
  // The address key came from if it was pending (it is not any more).
  std::optional<std::string> finished(const void* key);
  // Forgets entries older than max_age_ms; returns their addresses.
  std::vector<std::string> expire(std::uint64_t now_ms);
  // Keys started at least deadline_ms ago (to be closed; they stay until finished()).
  std::vector<const void*> overdue(std::uint64_t now_ms, std::uint64_t deadline_ms) const;
  bool contains(const void* key) const { return entries_.count(key) != 0; }
  std::size_t count() const noexcept { return entries_.size(); }
  std::size_t limit() const noexcept { return limit_; }
  bool full() const noexcept { return entries_.size() >= limit_; }

 private:
  struct Entry {
    std::uint64_t started_ms;
    std::string address;
  };
  std::size_t limit_;
  std::uint64_t max_age_ms_;
  std::unordered_map<const void*, Entry> entries_;
};

// Connections per source address that have not finished their handshake (pure).
// A bound of 0 means none.
class AddressCounts {
 public:
  explicit AddressCounts(std::uint32_t limit) : limit_(limit) {}
  // False (and nothing counted) when `address` is at the bound already.
  bool try_add(const std::string& address);
  // Counted whatever the bound (a listener that is not bounded per address).
  void add(const std::string& address);
  void remove(const std::string& address);
  std::uint32_t count(const std::string& address) const;
  std::size_t addresses() const noexcept { return counts_.size(); }

 private:
  std::uint32_t limit_;
  std::unordered_map<std::string, std::uint32_t> counts_;
};

// One listener's out-of-descriptors episodes (pure): an episode starts when an
// accept fails with EMFILE/ENFILE or would eat the descriptor reserve. Meanwhile
// the listener is not watched; it is looked at again after a back-off that
// doubles from kFirstBackoffMs to kMaxBackoffMs, so an exhausted process does
// not spin on a level-triggered listener. When a look finds room the listener
// is watched again, but the episode ends only when the room has lasted
// kSettleMs or nobody is left waiting: a few descriptors freed by others (an
// evicted control connection) and taken at once by the next rig in the backlog
// do not make a new episode, and a new pair of log lines, each time.
class FdExhaustion {
 public:
  static constexpr std::uint64_t kFirstBackoffMs = 100;
  static constexpr std::uint64_t kMaxBackoffMs = 1000;
  static constexpr std::uint64_t kSettleMs = 1000;
  struct Episode {
    std::uint64_t duration_ms = 0;
    std::uint64_t retries = 0;   // looks at the listener that found no room
    std::uint64_t refused = 0;   // accepted and closed at once (the reserve)
  };
  // No room: true if this starts an episode. Sets the next back-off.
  bool hit(std::uint64_t now_ms) noexcept;
  void refused() noexcept { ++episode_.refused; }
  // A socket accepted within the budget: the listener may be watched again;
  // the episode that ends, if room has lasted kSettleMs.
  std::optional<Episode> room(std::uint64_t now_ms) noexcept;
  bool active() const noexcept { return active_; }
  // Out of room and not watched: only the back-off timer looks again.
  bool paused() const noexcept { return active_ && !recovering_; }
  std::uint64_t backoff_ms() const noexcept { return backoff_ms_; }
  // Nobody waits any more: the episode that ends, if one was running.
  std::optional<Episode> end(std::uint64_t now_ms) noexcept;

 private:
  bool active_ = false;
  bool recovering_ = false;
  std::uint64_t started_ms_ = 0;
  std::uint64_t room_since_ms_ = 0;
  std::uint64_t backoff_ms_ = kFirstBackoffMs;
  Episode episode_;
};

// The text form of a peer's address (no port): the key of AddressCounts.
std::string address_text(const sockaddr_storage& ss);

class AdmissionListener {
 public:
  struct Accepted {
    int fd = -1;
    std::string address;   // the peer's, without port
  };
  struct Hooks {
    // Each socket handed over (the callee adopts or closes it).
    std::function<void(Accepted&&)> hand_over;
    // 0: hand one over now. kUntilResumed: wait for resume(). Otherwise: look
    // again after that many microseconds. Empty: always now.
    std::function<std::uint64_t()> hold_us;
    // At accept: false closes the socket at once (a bound per address). Empty: all.
    std::function<bool(const std::string& address)> admit;
    // A socket admitted but closed here before it was handed over.
    std::function<void(const std::string& address)> released;
    // An out-of-descriptors episode began (a metric).
    std::function<void()> exhausted;
    // A socket that said nothing before its deadline was closed (a metric).
    std::function<void()> quiet_timed_out;
  };
  struct Options {
    std::string name = "rig";     // in log lines: "<name> listener"
    bool reuse_port = true;       // SO_REUSEPORT: brokers on one host share the port
    // Hold each accepted socket, unseen by lws, until its peer's first bytes
    // arrive (a TLS ClientHello): one that says nothing costs no handshake slot
    // and is closed after quiet_timeout_ms.
    bool wait_for_data = false;
    std::uint64_t quiet_timeout_ms = 10000;
    // Descriptors below RLIMIT_NOFILE this listener leaves to others: an accept
    // that gets one of them is closed at once and accepting pauses (an episode).
    std::uint64_t fd_reserve = 0;
    std::size_t max_waiting = 32768;
  };
  static constexpr std::uint64_t kUntilResumed = std::numeric_limits<std::uint64_t>::max();

  AdmissionListener(uv_loop_t* loop, Hooks hooks, Options options);
  ~AdmissionListener();
  AdmissionListener(const AdmissionListener&) = delete;
  AdmissionListener& operator=(const AdmissionListener&) = delete;

  // Bind (SO_REUSEADDR, and SO_REUSEPORT if so asked), listen, start watching.
  // The kernel caps the backlog at net.core.somaxconn (4096 by default on Linux >= 5.4).
  Expected<void> open(const HostPort& where, int backlog = 65535);
  int port() const noexcept { return port_; }
  // Room again (a handshake finished): hand over waiting sockets (cheap; call freely).
  void resume();
  bool paused() const noexcept { return paused_; }
  std::size_t waiting() const noexcept { return waiting_.size(); }
  std::size_t quiet() const noexcept { return quiet_.size(); }
  // Closes the sockets that said nothing for quiet_timeout_ms; returns how many.
  std::size_t expire_quiet(std::uint64_t now_ms);
  // Stop accepting and close the socket (drain). Idempotent.
  void close();

 private:
  struct Quiet {
    std::string address;
    std::uint64_t accepted_ms;
    std::uint64_t serial;
  };
  struct QuietAge {
    int fd;
    std::uint64_t serial;
    std::uint64_t accepted_ms;
  };
  static void on_readable(uv_poll_t* handle, int status, int events);
  static void on_quiet_readable(uv_poll_t* handle, int status, int events);
  void accept_some();
  void keep(Accepted&& a);
  void drop(int fd, const std::string& address);
  void out_of_descriptors(int err);
  // Room found (nobody_waits false) or the backlog empty (true).
  void end_episode(bool nobody_waits);
  void pump();
  void stop_polling();
  void start_polling();
  void look_again_in(std::uint64_t us);
  void look_again_after_episode();
  bool descriptors_tight() const;
  std::uint64_t backlog() const;
  uv_loop_t* loop_;
  Hooks hooks_;
  Options options_;
  uv_poll_t* poll_ = nullptr;    // heap: freed in the uv close callback
  uv_timer_t* timer_ = nullptr;  // heap: likewise; re-checks a timed hold or an episode
  uv_poll_t* quiet_poll_ = nullptr;  // watches epoll_fd_
  int fd_ = -1;
  int epoll_fd_ = -1;            // the quiet sockets (wait_for_data)
  int port_ = 0;
  bool paused_ = false;
  int fd_ceiling_ = std::numeric_limits<int>::max();   // RLIMIT_NOFILE minus the reserve
  FdExhaustion exhaustion_;
  std::deque<Accepted> waiting_;   // accepted, not yet handed over (FIFO)
  std::unordered_map<int, Quiet> quiet_;   // by fd: accepted, nothing received yet
  std::deque<QuietAge> quiet_order_;       // oldest first; stale entries skipped by serial
  std::uint64_t next_serial_ = 0;
};

class FleetObserver;

// The rig listeners' gate, both of them (TLS; plain ws on loopback for benches):
// an AdmissionListener each, the accept-rate token bucket, the bound on
// handshakes in flight and per source address, the handshake deadline, and the
// answer at the WebSocket upgrade. TLS rigs take their token when handed to lws
// (over the bucket they wait: no handshake is spent on a 503); plain rigs take
// it at the upgrade, where a 503 with a jittered Retry-After is cheap.
class AcceptGate {
 public:
  struct Settings {
    double accept_rate = 50;
    double accept_burst = 100;
    std::uint32_t retry_after_min_s = 5;
    std::uint32_t retry_after_max_s = 15;
    std::uint32_t max_pending_handshakes = 256;
    std::uint32_t tls_accept_timeout_s = 30;
    std::uint32_t handshake_timeout_ms = 10000;     // accept -> WebSocket upgrade done
    std::uint32_t max_handshakes_per_address = 32;  // 0: no bound
    std::uint64_t fd_reserve = 96;                  // descriptors rig sockets leave free
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
  void sweep();
  std::uint64_t mono_us() const noexcept;
  std::uint64_t mono_ms() const noexcept;
  uv_loop_t* loop_;
  Settings settings_;
  FleetObserver& observer_;
  std::function<bool()> draining_;
  TokenBucket bucket_;
  PendingHandshakes pending_;
  AddressCounts addresses_;
  std::unordered_set<const void*> killed_;   // overdue handshakes already counted
  std::unique_ptr<AdmissionListener> tls_;
  std::unique_ptr<AdmissionListener> plain_;
  uv_timer_t* sweep_timer_ = nullptr;   // heap: freed in the uv close callback
  std::mt19937_64 rng_;
};

}  // namespace fleetlink::broker
