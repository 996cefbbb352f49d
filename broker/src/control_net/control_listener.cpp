#include "control_net/control_listener.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <libwebsockets.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/log.hpp"
#include "control_net/control_state.hpp"
#include "fleet/observer.hpp"

namespace fleetlink::broker {

namespace {

// The whole answer to a connection over the bound, written on the raw socket
// before it is closed: cheap (no lws, no parsing), and an HTTP client says why.
constexpr char kTooManyConnections[] =
    "HTTP/1.1 503 Service Unavailable\r\n"
    "Content-Type: application/json\r\n"
    "Retry-After: 1\r\n"
    "Connection: close\r\n"
    "Content-Length: 95\r\n"
    "\r\n"
    "{\"error\":\"too_many_connections\",\"detail\":\"control-max-connections reached, none of them idle\"}\n";

}  // namespace

ControlListener::ControlListener(uv_loop_t* loop, Settings settings, FleetObserver& observer)
    : loop_(loop), settings_(settings), observer_(observer) {
  if (settings_.max_connections == 0) settings_.max_connections = 1;
}


ControlListener::~ControlListener() { close(); }

std::uint64_t ControlListener::now_ms() { return uv_hrtime() / 1000000; }

int ControlListener::port() const noexcept {
  if (listener_) return listener_->port();
  return vhost_ != nullptr ? lws_get_vhost_listen_port(vhost_) : 0;
}

Expected<void> ControlListener::open(lws_vhost* vhost, const HostPort& where, bool own_accept) {
  vhost_ = vhost;
  own_accept_ = own_accept;
  if (own_accept_) {
  AdmissionListener::Hooks hooks;
  hooks.hand_over = [this](AdmissionListener::Accepted&& a) { hand_over(a.fd); };
  hooks.exhausted = [this] { observer_.accept_fd_exhausted("control"); };
  AdmissionListener::Options options;
  options.name = "control";
  options.reuse_port = false;   // one broker per control port: a second one must fail to start
  options.wait_for_data = false;
  options.fd_reserve = 0;       // the control port is what the reserve is kept for
  listener_ = std::make_unique<AdmissionListener>(loop_, std::move(hooks), std::move(options));
  if (auto r = listener_->open(where, 1024); !r) return r;
  }
  const std::uint64_t every = std::clamp<std::uint64_t>(settings_.idle_timeout_ms / 4, 20, 1000);
  sweep_timer_ = new uv_timer_t{};
  uv_timer_init(loop_, sweep_timer_);
  sweep_timer_->data = this;
  uv_timer_start(sweep_timer_, [](uv_timer_t* t) {
    if (auto* self = static_cast<ControlListener*>(t->data)) self->sweep();
  }, every, every);
  return {};
}

void ControlListener::close_connection(lws* wsi, Conn& c, const char* why) {
  if (c.closing_since_ms == 0) {
    ++closing_;
    observer_.control_connection_closed(why);
  }
  c.closing_since_ms = now_ms();
  // Outside of its callbacks: lws closes it on its next turn, which a timeout
  // set from outside does not bring about by itself (lws re-arms its timer
  // only when it runs): wake it.
  lws_set_timeout(wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
  lws_cancel_service(lws_get_context(wsi));
}

bool ControlListener::make_room() {
  lws* oldest = nullptr;
  std::uint64_t oldest_ms = 0;
  for (auto& [wsi, c] : conns_) {
    if (c.closing_since_ms != 0 || control_net::connection_busy(wsi)) continue;
    if (oldest == nullptr || c.last_active_ms < oldest_ms) {
      oldest = wsi;
      oldest_ms = c.last_active_ms;
    }
  }
  if (oldest == nullptr) return false;
  close_connection(oldest, conns_[oldest], "evicted");
  return true;
}

void ControlListener::hand_over(int fd) {
  if (live() >= settings_.max_connections && !make_room()) {
    observer_.control_connection_closed("refused");
    (void)::send(fd, kTooManyConnections, sizeof kTooManyConnections - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    ::close(fd);
    return;
  }
  // Registered by connection_opened(), from inside the adoption.
  if (lws_adopt_socket_vhost(vhost_, fd) == nullptr) FL_WARN("control port: could not adopt an accepted socket");
}

bool ControlListener::connection_opened(lws* wsi) {
  if (live() >= settings_.max_connections && !make_room()) {
    observer_.control_connection_closed("refused");
    return false;
  }
  conns_[wsi] = Conn{now_ms(), 0};
  observer_.control_connections(conns_.size());
  return true;
}

void ControlListener::request_started(lws* wsi) {
  auto it = conns_.find(wsi);
  if (it != conns_.end()) it->second.last_active_ms = now_ms();
}

void ControlListener::connection_gone(lws* wsi) {
  auto it = conns_.find(wsi);
  if (it == conns_.end()) return;
  if (it->second.closing_since_ms != 0) --closing_;
  conns_.erase(it);
  observer_.control_connections(conns_.size());
}

void ControlListener::sweep() {
  const std::uint64_t now = now_ms();
  for (auto& [wsi, c] : conns_) {
    if (c.closing_since_ms != 0) {
      // A later lws timeout may have replaced ours: ask again.
      if (now - c.closing_since_ms >= 1000) close_connection(wsi, c, "idle");
      continue;
    }
    if (control_net::connection_busy(wsi)) {
      c.last_active_ms = now;
    } else if (now - c.last_active_ms >= settings_.idle_timeout_ms) {
      FL_DEBUG("control port: closing a connection idle for %llu ms",
               static_cast<unsigned long long>(now - c.last_active_ms));
      close_connection(wsi, c, "idle");
    }
  }
}

void ControlListener::close() {
  if (sweep_timer_) {
    sweep_timer_->data = nullptr;
    uv_timer_stop(sweep_timer_);
    uv_close(reinterpret_cast<uv_handle_t*>(sweep_timer_),
             [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
    sweep_timer_ = nullptr;
  }
  if (listener_) listener_->close();
  conns_.clear();
  closing_ = 0;
}

}  // namespace fleetlink::broker
