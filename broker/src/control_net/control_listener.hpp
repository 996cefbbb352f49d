#pragma once
// The control port's listener. The broker owns its accept(), as it does for the
// rig ports (net/accept_gate.hpp), for three reasons lws's own vhost listener
// does not serve: out of file descriptors lws retries accept() in a loop
// (100% CPU, a log line each time); it has no bound on connections; and an idle
// connection holds one of the context's HTTP header slots, which rigs'
// handshakes need too.
//
// So, on a plain HTTP control port: an AdmissionListener (no SO_REUSEPORT: each
// broker has its own control port) that backs off when out of descriptors and
// hands each socket to the control vhost (lws_adopt_socket_vhost). An HTTPS
// control port stays lws's own listener: lws 4.1.6 serves TLS only on a vhost
// with a port or CONTEXT_PORT_NO_LISTEN_SERVER, and on the latter it re-binds
// each connection (SNI, then the Host header) to the first such vhost, the
// rigs' (LWS-NOTES). Either way, this class's bookkeeping of the connections
// open (told by the vhost's callbacks):
// - at most max_connections; at the bound a new connection replaces the one
//   idle longest (so /healthz, /readyz and /metrics still get in when idle
//   connections have taken every place), and with none idle it is refused
//   (a plain 503 with Retry-After on HTTP, a close on HTTPS);
// - a connection with no request in progress for idle_timeout_ms is closed
//   (keep-alive connections that say nothing, or a request whose headers never
//   finish). An event stream, a held request and a /v1/stream WebSocket are
//   in progress for as long as they last.
#include <uv.h>

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "fleetlink/expected.hpp"
#include "net/accept_gate.hpp"
#include "net/host_port.hpp"

struct lws;
struct lws_vhost;

namespace fleetlink::broker {

class FleetObserver;

class ControlListener {
 public:
  struct Settings {
    std::uint32_t max_connections = 64;
    std::uint32_t idle_timeout_ms = 60000;
  };
  ControlListener(uv_loop_t* loop, Settings settings, FleetObserver& observer);
  ~ControlListener();
  ControlListener(const ControlListener&) = delete;
  ControlListener& operator=(const ControlListener&) = delete;

  // `own_accept`: listens on `where` and hands accepted sockets to the control
  // vhost (made with CONTEXT_PORT_NO_LISTEN); otherwise lws listens (HTTPS) and
  // only the bookkeeping runs here.
  Expected<void> open(lws_vhost* vhost, const HostPort& where, bool own_accept);
  int port() const noexcept;
  std::size_t open_connections() const noexcept { return conns_.size(); }
  // Stops accepting and forgets the connections (before the lws context goes). Idempotent.
  void close();

  // From the control vhost's callbacks (control_http.cpp):
  // A connection was accepted (LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED):
  // false to close it (at the bound, none idle to make room).
  bool connection_opened(lws* wsi);
  void request_started(lws* wsi);   // a request's headers are in
  void connection_gone(lws* wsi);   // LWS_CALLBACK_WSI_DESTROY

 private:
  struct Conn {
    std::uint64_t last_active_ms = 0;
    std::uint64_t closing_since_ms = 0;   // 0: not being closed by us
  };
  void hand_over(int fd);
  // At the bound: closes the connection idle longest; false if none is idle.
  bool make_room();
  void sweep();
  void close_connection(lws* wsi, Conn& c, const char* why);
  std::size_t live() const noexcept { return conns_.size() - closing_; }
  static std::uint64_t now_ms();

  uv_loop_t* loop_;
  Settings settings_;
  FleetObserver& observer_;
  lws_vhost* vhost_ = nullptr;
  bool own_accept_ = false;
  std::unique_ptr<AdmissionListener> listener_;
  uv_timer_t* sweep_timer_ = nullptr;   // heap: freed in the uv close callback
  std::unordered_map<lws*, Conn> conns_;
  std::size_t closing_ = 0;
};

}  // namespace fleetlink::broker
