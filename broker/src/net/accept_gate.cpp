#include "net/accept_gate.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <libwebsockets.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/log.hpp"
#include "fleet/observer.hpp"

namespace fleetlink::broker {

namespace {

std::uint64_t now_ms() { return uv_hrtime() / 1000000; }

}  // namespace

void PendingHandshakes::started(const void* key, std::uint64_t now_ms, std::string address) {
  entries_[key] = Entry{now_ms, std::move(address)};
}

std::optional<std::string> PendingHandshakes::finished(const void* key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  std::string address = std::move(it->second.address);
  entries_.erase(it);
  return address;
}

std::vector<std::string> PendingHandshakes::expire(std::uint64_t now_ms) {
  std::vector<std::string> gone;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (now_ms - it->second.started_ms > max_age_ms_) {
      gone.push_back(std::move(it->second.address));
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  return gone;
}

std::vector<const void*> PendingHandshakes::overdue(std::uint64_t now_ms, std::uint64_t deadline_ms) const {
  std::vector<const void*> keys;
  for (const auto& [key, entry] : entries_)
    if (now_ms - entry.started_ms >= deadline_ms) keys.push_back(key);
  return keys;
}

bool AddressCounts::try_add(const std::string& address) {
  std::uint32_t& n = counts_[address];
  if (limit_ != 0 && n >= limit_) {
    if (n == 0) counts_.erase(address);
    return false;
  }
  ++n;
  return true;
}

void AddressCounts::add(const std::string& address) { ++counts_[address]; }

void AddressCounts::remove(const std::string& address) {
  auto it = counts_.find(address);
  if (it == counts_.end()) return;
  if (--it->second == 0) counts_.erase(it);
}

std::uint32_t AddressCounts::count(const std::string& address) const {
  auto it = counts_.find(address);
  return it == counts_.end() ? 0 : it->second;
}

bool FdExhaustion::hit(std::uint64_t now_ms) noexcept {
  if (!active_) {
    active_ = true;
    recovering_ = false;
    started_ms_ = now_ms;
    episode_ = Episode{};
    backoff_ms_ = kFirstBackoffMs;
    return true;
  }
  recovering_ = false;
  ++episode_.retries;
  backoff_ms_ = std::min(backoff_ms_ * 2, kMaxBackoffMs);
  return false;
}

std::optional<FdExhaustion::Episode> FdExhaustion::room(std::uint64_t now_ms) noexcept {
  if (!active_) return std::nullopt;
  if (!recovering_) {
    recovering_ = true;
    room_since_ms_ = now_ms;
  }
  if (now_ms - room_since_ms_ < kSettleMs) return std::nullopt;
  return end(now_ms);
}

std::optional<FdExhaustion::Episode> FdExhaustion::end(std::uint64_t now_ms) noexcept {
  if (!active_) return std::nullopt;
  active_ = false;
  recovering_ = false;
  Episode e = episode_;
  e.duration_ms = now_ms - started_ms_;
  backoff_ms_ = kFirstBackoffMs;
  return e;
}

std::string address_text(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, host, sizeof host);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
      inet_ntop(AF_INET, &a6->sin6_addr.s6_addr[12], host, sizeof host);   // the same peer as over IPv4
    } else {
      inet_ntop(AF_INET6, &a6->sin6_addr, host, sizeof host);
    }
  }
  return host;
}

AdmissionListener::AdmissionListener(uv_loop_t* loop, Hooks hooks, Options options)
    : loop_(loop), hooks_(std::move(hooks)), options_(std::move(options)) {
  if (options_.max_waiting == 0) options_.max_waiting = 1;
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
  if (options_.reuse_port) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  // Linux hands TCP_NODELAY on to every socket accepted from this one: no
  // setsockopt() per connection.
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
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
  // The descriptors at and above the ceiling are the reserve: an accept that
  // gets one of them gives it back at once (see accept_some()).
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
    const rlim_t reserve = static_cast<rlim_t>(options_.fd_reserve);
    const rlim_t ceiling = nofile.rlim_cur > reserve ? nofile.rlim_cur - reserve : 0;
    fd_ceiling_ = static_cast<int>(std::min<rlim_t>(ceiling, std::numeric_limits<int>::max()));
  }
  if (options_.wait_for_data) {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) return make_error(Errc::io, std::string("epoll_create1: ") + std::strerror(errno));
    quiet_poll_ = new uv_poll_t{};
    uv_poll_init(loop_, quiet_poll_, epoll_fd_);
    quiet_poll_->data = this;
    uv_poll_start(quiet_poll_, UV_READABLE, &AdmissionListener::on_quiet_readable);
  }
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

std::uint64_t AdmissionListener::backlog() const {
  // Linux reports a listening socket's accept queue length in tcpi_unacked.
  tcp_info info{};
  socklen_t len = sizeof info;
  if (fd_ < 0 || getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return 0;
  return info.tcpi_unacked;
}

void AdmissionListener::start_polling() {
  // During an episode only the back-off timer looks again (look_again_after_episode()).
  if (!poll_ || !paused_ || exhaustion_.paused() || waiting_.size() >= options_.max_waiting) return;
  paused_ = false;
  // Level-triggered: fires at once if connections wait in the kernel's backlog.
  uv_poll_start(poll_, UV_READABLE, &AdmissionListener::on_readable);
}

void AdmissionListener::look_again_in(std::uint64_t us) {
  std::uint64_t ms = (us + 999) / 1000;
  uv_timer_start(timer_, [](uv_timer_t* t) {
    if (auto* self = static_cast<AdmissionListener*>(t->data)) {
      if (self->exhaustion_.active()) {
        self->look_again_after_episode();
      } else {
        self->pump();
      }
    }
  }, ms == 0 ? 1 : ms, 0);
}

void AdmissionListener::look_again_after_episode() {
  if (descriptors_tight()) {
    exhaustion_.hit(now_ms());
    stop_polling();
    look_again_in(exhaustion_.backoff_ms() * 1000);
    pump();
    return;
  }
  // Room: accept what waits (the episode ends with the first socket kept, or
  // with an empty backlog), and watch the listener again.
  accept_some();
  // Sockets already accepted need no new descriptor: they go on being handed over.
  pump();
}

void AdmissionListener::out_of_descriptors(int err) {
  const bool first = exhaustion_.hit(now_ms());
  if (first) {
    if (hooks_.exhausted) hooks_.exhausted();
    rlimit nofile{};
    getrlimit(RLIMIT_NOFILE, &nofile);
    FL_WARN("%s listener: out of file descriptors (%s; limit %llu, %llu kept in reserve): accepting paused, "
            "looking again every %llu-%llu ms; %zu accepted sockets waiting, %llu in the backlog",
            options_.name.c_str(), err != 0 ? std::strerror(err) : "the rest is the reserve",
            static_cast<unsigned long long>(nofile.rlim_cur), static_cast<unsigned long long>(options_.fd_reserve),
            static_cast<unsigned long long>(FdExhaustion::kFirstBackoffMs),
            static_cast<unsigned long long>(FdExhaustion::kMaxBackoffMs), waiting_.size() + quiet_.size(),
            static_cast<unsigned long long>(backlog()));
  }
  stop_polling();
  look_again_in(exhaustion_.backoff_ms() * 1000);
}

void AdmissionListener::end_episode(bool nobody_waits) {
  const std::uint64_t now = now_ms();
  if (auto e = nobody_waits ? exhaustion_.end(now) : exhaustion_.room(now)) {
    FL_WARN("%s listener: accepting again after %llu ms out of file descriptors (%llu connections refused, "
            "%llu looks without room, %llu waiting in the backlog)",
            options_.name.c_str(), static_cast<unsigned long long>(e->duration_ms),
            static_cast<unsigned long long>(e->refused), static_cast<unsigned long long>(e->retries),
            static_cast<unsigned long long>(backlog()));
    uv_timer_stop(timer_);
  }
}

void AdmissionListener::resume() { pump(); }

void AdmissionListener::pump() {
  while (!waiting_.empty()) {
    if (hooks_.hold_us) {
      std::uint64_t hold = hooks_.hold_us();
      if (hold != 0) {
        if (hold != kUntilResumed && !exhaustion_.paused()) look_again_in(hold);
        return;
      }
    }
    Accepted a = std::move(waiting_.front());
    waiting_.pop_front();
    hooks_.hand_over(std::move(a));
  }
  start_polling();
}

void AdmissionListener::drop(int fd, const std::string& address) {
  ::close(fd);
  if (hooks_.released) hooks_.released(address);
}

void AdmissionListener::keep(Accepted&& a) {
  if (!options_.wait_for_data) {
    waiting_.push_back(std::move(a));
    return;
  }
  // Under load a peer has usually spoken by the time its socket is accepted (it
  // sends its upgrade or ClientHello right after connect()): one peek then
  // replaces the quiet set's epoll_ctl() add and delete and its wake-up, about
  // a tenth of the broker's CPU per connection in a reconnect storm.
  char first = 0;
  const ssize_t peeked = ::recv(a.fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
  if (peeked > 0) {
    waiting_.push_back(std::move(a));
    return;
  }
  if (peeked == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    drop(a.fd, a.address);   // gone (or broken) before it said anything
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = a.fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, a.fd, &ev) != 0) {
    waiting_.push_back(std::move(a));   // cannot watch it: let lws have it
    return;
  }
  const std::uint64_t serial = ++next_serial_;
  const std::uint64_t at = now_ms();
  quiet_order_.push_back(QuietAge{a.fd, serial, at});
  quiet_.emplace(a.fd, Quiet{std::move(a.address), at, serial});
}

void AdmissionListener::accept_some() {
  // Bounded per wake-up so a storm cannot starve established connections.
  for (int i = 0; i < 64; ++i) {
    if (waiting_.size() >= options_.max_waiting) {
      stop_polling();   // the kernel's backlog is the waiting room now
      break;
    }
    sockaddr_storage ss{};
    socklen_t sl = sizeof ss;
    int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: a level-triggered poll would spin; look again later.
        out_of_descriptors(errno);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        end_episode(true);   // nobody waits: whatever the episode was, it is over
      } else {
        FL_WARN("%s listener: accept failed: %s", options_.name.c_str(), std::strerror(errno));
      }
      break;
    }
    if (fd >= fd_ceiling_) {
      // The reserve: this descriptor belongs to the control port and the broker's
      // own files. The connection is refused (closed) and accepting pauses.
      ::close(fd);
      exhaustion_.refused();
      out_of_descriptors(0);
      break;
    }
    end_episode(false);   // room: the episode ends once it has lasted
    Accepted a{fd, address_text(ss)};   // TCP_NODELAY comes from the listener (open())
    if (hooks_.admit && !hooks_.admit(a.address)) {
      ::close(fd);
      continue;
    }
    keep(std::move(a));
  }
}

void AdmissionListener::on_readable(uv_poll_t* handle, int status, int /*events*/) {
  auto* self = static_cast<AdmissionListener*>(handle->data);
  if (!self || status < 0 || self->fd_ < 0) return;
  self->accept_some();
  self->pump();
}

void AdmissionListener::on_quiet_readable(uv_poll_t* handle, int status, int /*events*/) {
  auto* self = static_cast<AdmissionListener*>(handle->data);
  if (!self || status < 0 || self->epoll_fd_ < 0) return;
  epoll_event evs[64];
  const int n = epoll_wait(self->epoll_fd_, evs, 64, 0);
  for (int i = 0; i < n; ++i) {
    const int fd = evs[i].data.fd;
    epoll_ctl(self->epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    auto it = self->quiet_.find(fd);
    if (it == self->quiet_.end()) continue;
    std::string address = std::move(it->second.address);
    self->quiet_.erase(it);
    if ((evs[i].events & EPOLLIN) == 0 && (evs[i].events & (EPOLLERR | EPOLLHUP | EPOLLRDHUP)) != 0) {
      self->drop(fd, address);   // gone before it said anything
      continue;
    }
    self->waiting_.push_back(Accepted{fd, std::move(address)});
  }
  self->pump();
}

std::size_t AdmissionListener::expire_quiet(std::uint64_t now) {
  std::size_t n = 0;
  while (!quiet_order_.empty() && now - quiet_order_.front().accepted_ms >= options_.quiet_timeout_ms) {
    const QuietAge age = quiet_order_.front();
    quiet_order_.pop_front();
    auto it = quiet_.find(age.fd);
    if (it == quiet_.end() || it->second.serial != age.serial) continue;   // it spoke, or it is another socket now
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, age.fd, nullptr);
    std::string address = std::move(it->second.address);
    quiet_.erase(it);
    drop(age.fd, address);
    if (hooks_.quiet_timed_out) hooks_.quiet_timed_out();
    ++n;
  }
  if (quiet_.empty()) quiet_order_.clear();
  return n;
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
  for (Accepted& a : waiting_) drop(a.fd, a.address);
  waiting_.clear();
  for (auto& [fd, q] : quiet_) drop(fd, q.address);
  quiet_.clear();
  quiet_order_.clear();
  if (quiet_poll_) {
    quiet_poll_->data = nullptr;
    uv_poll_stop(quiet_poll_);
    uv_close(reinterpret_cast<uv_handle_t*>(quiet_poll_),
             [](uv_handle_t* h) { delete reinterpret_cast<uv_poll_t*>(h); });
    quiet_poll_ = nullptr;
  }
  if (epoll_fd_ >= 0) {
    ::close(epoll_fd_);
    epoll_fd_ = -1;
  }
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
      // An entry outlives the handshake deadline (whose sweep closes it) only if its end was missed.
      pending_(settings.max_pending_handshakes, std::uint64_t{settings.handshake_timeout_ms} + 10000),
      addresses_(settings.max_handshakes_per_address), rng_(std::random_device{}()) {}

AcceptGate::~AcceptGate() { close(); }

std::uint64_t AcceptGate::mono_us() const noexcept { return uv_hrtime() / 1000; }
std::uint64_t AcceptGate::mono_ms() const noexcept { return uv_hrtime() / 1000000; }

Expected<void> AcceptGate::open(lws_vhost* vhost, const HostPort& where, bool tls) {
  AdmissionListener::Hooks hooks;
  hooks.hand_over = [this, vhost, tls](AdmissionListener::Accepted&& a) {
    if (draining_()) {
      ::close(a.fd);
      addresses_.remove(a.address);
      return;
    }
    if (tls) bucket_.try_take(mono_us());
    lws* wsi = lws_adopt_socket_vhost(vhost, a.fd);
    if (!wsi) {
      // lws closed the socket (lws_adopt_descriptor_vhost2's failure path) or never had it.
      FL_WARN("could not adopt an accepted socket");
      addresses_.remove(a.address);
      return;
    }
    pending_.started(wsi, mono_ms(), std::move(a.address));
  };
  hooks.hold_us = [this, tls]() -> std::uint64_t {
    if (pending_.full()) {
      for (const std::string& address : pending_.expire(mono_ms())) addresses_.remove(address);
      // Resumed by handshake_finished(); the timed look again only guards a missed end.
      if (pending_.full()) return 100 * 1000;
    }
    return tls ? bucket_.wait_us(mono_us()) : 0;
  };
  hooks.admit = [this, tls](const std::string& address) {
    // The plain listener is loopback-only (benches, development): every peer has
    // one address there, so it is not bounded per address (only counted).
    if (!tls) {
      addresses_.add(address);
      return true;
    }
    if (addresses_.try_add(address)) return true;
    observer_.handshake_refused_per_address();
    FL_DEBUG("connection from %s closed: %u handshakes pending from that address", address.c_str(),
             addresses_.count(address));
    return false;
  };
  hooks.released = [this](const std::string& address) { addresses_.remove(address); };
  hooks.exhausted = [this, tls] { observer_.accept_fd_exhausted(tls ? "rig" : "plain"); };
  hooks.quiet_timed_out = [this] { observer_.handshake_timed_out(); };
  AdmissionListener::Options options;
  options.name = tls ? "rig" : "plain rig";
  options.reuse_port = true;
  options.wait_for_data = true;
  options.quiet_timeout_ms = settings_.handshake_timeout_ms;
  options.fd_reserve = settings_.fd_reserve;
  std::unique_ptr<AdmissionListener>& slot = tls ? tls_ : plain_;
  slot = std::make_unique<AdmissionListener>(loop_, std::move(hooks), std::move(options));
  if (auto r = slot->open(where); !r) return r;
  if (!sweep_timer_) {
    // The handshake deadline is kept to about a tenth of itself.
    const std::uint64_t every = std::clamp<std::uint64_t>(settings_.handshake_timeout_ms / 10, 10, 500);
    sweep_timer_ = new uv_timer_t{};
    uv_timer_init(loop_, sweep_timer_);
    sweep_timer_->data = this;
    uv_timer_start(sweep_timer_, [](uv_timer_t* t) {
      if (auto* self = static_cast<AcceptGate*>(t->data)) self->sweep();
    }, every, every);
  }
  return {};
}

void AcceptGate::sweep() {
  const std::uint64_t now = mono_ms();
  if (tls_) tls_->expire_quiet(now);
  if (plain_) plain_->expire_quiet(now);
  // Handed over and still not through TLS and the upgrade: lws closes them on its
  // next turn (their WSI_DESTROY ends the entry). Asked again each sweep in case a
  // later lws timeout of the handshake replaced this one.
  lws_context* context = nullptr;
  for (const void* key : pending_.overdue(now, settings_.handshake_timeout_ms)) {
    auto* wsi = static_cast<lws*>(const_cast<void*>(key));
    if (killed_.insert(key).second) observer_.handshake_timed_out();
    lws_set_timeout(wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
    context = lws_get_context(wsi);
  }
  // A timeout set from outside lws's callbacks waits for lws's next turn: wake it.
  if (context != nullptr) lws_cancel_service(context);
  for (const std::string& address : pending_.expire(now)) addresses_.remove(address);
  std::erase_if(killed_, [this](const void* key) { return !pending_.contains(key); });
}

void AcceptGate::handshake_finished(lws* wsi) {
  const bool was_full = pending_.full();
  killed_.erase(wsi);
  std::optional<std::string> address = pending_.finished(wsi);
  if (!address) return;
  addresses_.remove(*address);
  if (!was_full) return;
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
  if (sweep_timer_) {
    sweep_timer_->data = nullptr;
    uv_timer_stop(sweep_timer_);
    uv_close(reinterpret_cast<uv_handle_t*>(sweep_timer_),
             [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
    sweep_timer_ = nullptr;
  }
  if (tls_) tls_->close();
  if (plain_) plain_->close();
}

}  // namespace fleetlink::broker
