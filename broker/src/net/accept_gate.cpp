#include "net/accept_gate.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.hpp"

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

}  // namespace fleetlink::broker
