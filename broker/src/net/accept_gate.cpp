#include "net/accept_gate.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <libwebsockets.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/log.hpp"
#include "fleet/observer.hpp"

namespace fleetlink::broker {

std::size_t PendingHandshakes::expire(std::uint64_t now_ms) {
  std::size_t n = 0;
  for (auto it = started_at_.begin(); it != started_at_.end();) {
    if (now_ms - it->second > max_age_ms_) {
      it = started_at_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

AdmissionListener::~AdmissionListener() { close(); }

Expected<void> AdmissionListener::open(const HostPort& where, int backlog) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port = std::to_string(where.port);
  int rc = getaddrinfo(where.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || !res)
    return make_error(Errc::io, "cannot resolve " + where.to_string() + ": " + gai_strerror(rc));
  int fd = ::socket(res->ai_family, res->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return make_error(Errc::io, std::string("socket: ") + std::strerror(errno));
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, backlog) != 0) {
    std::string err = std::strerror(errno);
    freeaddrinfo(res);
    ::close(fd);
    return make_error(Errc::io, "cannot listen on " + where.to_string() + ": " + err);
  }
  freeaddrinfo(res);
  sockaddr_storage ss{};
  socklen_t sl = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl);
  port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  fd_ = fd;
  // Accepted-but-waiting sockets hold descriptors: while some wait, leave the last
  // kFdReserve for lws and the control port (see start_polling()). With nothing
  // waiting, sockets are served as they come, up to the limit itself.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
    fd_ceiling_ = nofile.rlim_cur > kFdReserve ? static_cast<int>(nofile.rlim_cur - kFdReserve) : 0;
  poll_ = new uv_poll_t{};
  uv_poll_init_socket(loop_, poll_, fd_);
  poll_->data = this;
  uv_poll_start(poll_, UV_READABLE, &AdmissionListener::on_readable);
  timer_ = new uv_timer_t{};
  uv_timer_init(loop_, timer_);
  timer_->data = this;
  return {};
}

void AdmissionListener::stop_polling() {
  if (poll_ && !paused_) {
    uv_poll_stop(poll_);
    paused_ = true;
  }
}

bool AdmissionListener::descriptors_tight() const {
  // The next descriptor an accept would get is the lowest free one: what dup() returns.
  int probe = ::dup(fd_);
  if (probe < 0) return true;
  ::close(probe);
  return probe >= fd_ceiling_;
}

void AdmissionListener::start_polling() {
  if (!poll_ || !paused_ || waiting_.size() >= max_waiting_) return;
  if (!waiting_.empty() && descriptors_tight()) {
    look_again_in(100 * 1000);
    return;
  }
  paused_ = false;
  // Level-triggered: fires at once if connections wait in the kernel's backlog.
  uv_poll_start(poll_, UV_READABLE, &AdmissionListener::on_readable);
}

void AdmissionListener::look_again_in(std::uint64_t us) {
  std::uint64_t ms = (us + 999) / 1000;
  uv_timer_start(timer_, [](uv_timer_t* t) {
    if (auto* self = static_cast<AdmissionListener*>(t->data)) {
      self->start_polling();   // after EMFILE
      self->pump();
    }
  }, ms == 0 ? 1 : ms, 0);
}

void AdmissionListener::resume() { pump(); }

void AdmissionListener::pump() {
  while (!waiting_.empty()) {
    if (hold_us_) {
      std::uint64_t hold = hold_us_();
      if (hold != 0) {
        if (hold != kUntilResumed) look_again_in(hold);
        return;
      }
    }
    int fd = waiting_.front();
    waiting_.pop_front();
    on_accept_(fd);
  }
  start_polling();
}

void AdmissionListener::on_readable(uv_poll_t* handle, int status, int /*events*/) {
  auto* self = static_cast<AdmissionListener*>(handle->data);
  if (!self || status < 0 || self->fd_ < 0) return;
  // Bounded per wake-up so a storm cannot starve established connections.
  for (int i = 0; i < 64; ++i) {
    if (self->waiting_.size() >= self->max_waiting_) {
      self->stop_polling();   // the kernel's backlog is the waiting room now
      break;
    }
    int fd = ::accept4(self->fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: a level-triggered poll would spin; look again later.
        FL_WARN("accept failed: %s (%zu accepted sockets waiting)", std::strerror(errno), self->waiting_.size());
        self->stop_polling();
        self->look_again_in(100 * 1000);
      } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        FL_WARN("accept failed: %s", std::strerror(errno));
      }
      break;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    self->waiting_.push_back(fd);
    if (fd >= self->fd_ceiling_ && self->waiting_.size() > 1) {
      // Waiting sockets must not eat the last descriptors (rigs being served and
      // the control port need them): until some are free again (start_polling()).
      self->stop_polling();
      self->look_again_in(100 * 1000);
      break;
    }
  }
  self->pump();
}

void AdmissionListener::close() {
  if (timer_) {
    timer_->data = nullptr;
    uv_timer_stop(timer_);
    uv_close(reinterpret_cast<uv_handle_t*>(timer_),
             [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
    timer_ = nullptr;
  }
  paused_ = false;
  for (int fd : waiting_) ::close(fd);
  waiting_.clear();
  if (poll_) {
    poll_->data = nullptr;
    uv_poll_stop(poll_);
    uv_close(reinterpret_cast<uv_handle_t*>(poll_),
             [](uv_handle_t* h) { delete reinterpret_cast<uv_poll_t*>(h); });
    poll_ = nullptr;
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

// ---------------------------------------------------------------------------------
// AcceptGate

namespace {

// lws_add_http_header_status() writes "HTTP/1.0" here: at CONFIRM_UPGRADE the
// request's version is not recorded yet. WebSocket clients (RFC 6455 4.1)
// expect an HTTP/1.1 answer, so the status line is written by hand.
int add_status_line(int code, const char* text, unsigned char** p, unsigned char* end) {
  const int n = std::snprintf(reinterpret_cast<char*>(*p), static_cast<std::size_t>(end - *p), "HTTP/1.1 %d %s\r\n",
                              code, text);
  if (n < 0 || n >= end - *p) return 1;
  *p += n;
  return 0;
}

}  // namespace

AcceptGate::AcceptGate(uv_loop_t* loop, Settings settings, FleetObserver& observer, std::function<bool()> draining)
    : loop_(loop), settings_(settings), observer_(observer), draining_(std::move(draining)),
      bucket_(settings.accept_rate, settings.accept_burst, mono_us()),
      // A pending entry outlives lws's own TLS-accept timeout only if its end was missed.
      pending_(settings.max_pending_handshakes, (std::uint64_t{settings.tls_accept_timeout_s} + 10) * 1000),
      rng_(std::random_device{}()) {}

AcceptGate::~AcceptGate() { close(); }

std::uint64_t AcceptGate::mono_us() const noexcept { return uv_hrtime() / 1000; }
std::uint64_t AcceptGate::mono_ms() const noexcept { return uv_hrtime() / 1000000; }

Expected<void> AcceptGate::open(lws_vhost* vhost, const HostPort& where, bool tls) {
  auto adopt = [this, vhost, tls](int fd) {
    if (draining_()) {
      ::close(fd);
      return;
    }
    if (tls) bucket_.try_take(mono_us());
    lws* wsi = lws_adopt_socket_vhost(vhost, fd);
    if (!wsi) {
      FL_WARN("could not adopt an accepted socket");
      ::close(fd);
      return;
    }
    pending_.started(wsi, mono_ms());
  };
  auto hold = [this, tls]() -> std::uint64_t {
    if (pending_.full()) {
      pending_.expire(mono_ms());
      // Resumed by handshake_finished(); the timed look again only guards a missed end.
      if (pending_.full()) return 100 * 1000;
    }
    return tls ? bucket_.wait_us(mono_us()) : 0;
  };
  std::unique_ptr<AdmissionListener>& slot = tls ? tls_ : plain_;
  slot = std::make_unique<AdmissionListener>(loop_, adopt, hold);
  return slot->open(where);
}

void AcceptGate::handshake_finished(lws* wsi) {
  const bool was_full = pending_.full();
  if (!pending_.finished(wsi) || !was_full) return;
  if (tls_) tls_->resume();
  if (plain_) plain_->resume();
}

int AcceptGate::on_upgrade(lws* wsi) {
  char uri[128] = {};
  lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI);
  unsigned char buf[LWS_PRE + 512];
  unsigned char* start = buf + LWS_PRE;
  unsigned char* p = start;
  unsigned char* end = buf + sizeof buf - 1;
  if (std::strcmp(uri, "/agent") != 0) {
    FL_DEBUG("upgrade refused: path %s", uri);
    if (add_status_line(HTTP_STATUS_NOT_FOUND, "Not Found", &p, end) ||
        lws_add_http_header_content_length(wsi, 0, &p, end) || lws_finalize_write_http_header(wsi, start, &p, end))
      return -1;
    return 1;
  }
  // TLS rigs already took their token at accept().
  const bool draining = draining_();
  if (!draining && (lws_is_ssl(wsi) != 0 || bucket_.try_take(mono_us()))) {
    observer_.upgrade_admitted();
    return 0;
  }
  std::uniform_int_distribution<std::uint32_t> jitter(settings_.retry_after_min_s, settings_.retry_after_max_s);
  const std::string retry = std::to_string(jitter(rng_));
  observer_.upgrade_refused(draining ? "draining" : "accept rate", retry);
  if (add_status_line(HTTP_STATUS_SERVICE_UNAVAILABLE, "Service Unavailable", &p, end) ||
      lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_RETRY_AFTER,
                                   reinterpret_cast<const unsigned char*>(retry.data()),
                                   static_cast<int>(retry.size()), &p, end) ||
      lws_add_http_header_content_length(wsi, 0, &p, end) || lws_finalize_write_http_header(wsi, start, &p, end))
    return -1;
  return 1;
}

void AcceptGate::close() {
  if (tls_) tls_->close();
  if (plain_) plain_->close();
}

}  // namespace fleetlink::broker
