// fleetlink-rigsim: one process simulating thousands of rigs that speak the real
// fleetlink protocol (plain ws or mutual TLS): HELLO with a boot_id per rig, ACK
// and a small RESULT for every COMMAND, pong for every ping, reconnect with the
// agent's jittered backoff honouring 503 Retry-After and GOAWAY.
//
// Why not libwebsockets' client: a lean epoll loop with its own masked framing
// costs a few hundred bytes and a few microseconds per rig, so the simulator is
// never what a benchmark measures. Its own CPU time is reported on every line.
//
// stdout: JSON lines. A status line every --status-ms, and an immediate
// {"event":"all_connected",...} line whenever every rig holds a WELCOMEd connection.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

// GCC 12 reports a false null dereference inside CLI11 2.1.2 (CLI::detail::split) once inlined here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <CLI/CLI.hpp>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "fleetlink/codec.hpp"
#include "fleetlink/messages.hpp"
#include "fleetlink/uuid.hpp"
#include "http_head.hpp"
#include "rig_certs.hpp"
#include "ws_frame.hpp"

namespace fb = fleetlink::bench;
namespace msg = fleetlink::msg;

namespace {

std::uint64_t now_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}
std::uint64_t mono_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}
double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}
long rss_kb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

struct Options {
  std::string url = "ws://127.0.0.1:8443/agent";
  unsigned count = 100;
  std::string rig_prefix = "rig-";
  unsigned start_index = 0;
  unsigned index_width = 5;
  std::string cert_dir;        // DIR/RIG.crt + DIR/RIG.key (fleetlink-lab-ca layout)
  std::string issue_ca;        // issue certificates in memory from DIR/ca.crt + DIR/ca.key
  std::string verify_ca;       // verify the broker's certificate against this CA (off by default)
  std::string source_ip;
  unsigned source_ip_count = 1;  // rig k binds to source_ip + (k % count)
  double connect_rate = 0;     // new connections per second at start-up; 0 = all at once
  unsigned result_bytes = 64;
  unsigned backoff_base_ms = 1000;
  unsigned backoff_cap_ms = 30000;
  unsigned status_ms = 1000;
  unsigned max_seconds = 0;    // 0 = run until SIGTERM/SIGINT
  std::string ws_protocol;     // Sec-WebSocket-Protocol, if the broker wants one
  std::vector<std::string> kinds{"dmesg", "reboot", "suite", "noop"};
  bool resume = true;          // keep each rig's TLS session ticket and offer it on reconnect
};

struct Url {
  bool tls = false;
  std::string host;
  int port = 0;
  std::string path;
};

bool parse_url(const std::string& text, Url& out) {
  std::string rest;
  if (text.rfind("ws://", 0) == 0) {
    rest = text.substr(5);
  } else if (text.rfind("wss://", 0) == 0) {
    out.tls = true;
    rest = text.substr(6);
  } else {
    return false;
  }
  const auto slash = rest.find('/');
  const std::string hostport = rest.substr(0, slash);
  out.path = slash == std::string::npos ? "/" : rest.substr(slash);
  const auto colon = hostport.rfind(':');
  if (colon == std::string::npos) return false;
  out.host = hostport.substr(0, colon);
  out.port = std::atoi(hostport.c_str() + colon + 1);
  return out.port > 0;
}

enum class Phase : std::uint8_t { idle, connecting, tls_handshake, upgrading, open };

struct Rig {
  int fd = -1;
  Phase phase = Phase::idle;
  bool welcomed = false;
  bool out_armed = false;       // EPOLLOUT registered
  bool closing = false;         // we sent a close frame; waiting for the socket to end
  std::uint8_t attempt = 0;
  std::uint32_t gen = 0;        // bumps on every teardown: stale timers are ignored
  std::int64_t next_delay_override_ms = -1;  // from Retry-After or GOAWAY
  SSL* ssl = nullptr;
  std::string rx;
  std::string tx;
  std::string fragments;        // a fragmented message being reassembled
};

struct Timer {
  std::uint64_t due_ms;
  std::uint32_t rig;
  std::uint32_t gen;
  bool operator>(const Timer& o) const { return due_ms > o.due_ms; }
};

struct Counters {
  std::uint64_t connects = 0, connect_errors = 0, tls_failures = 0, refused_503 = 0,
                failed_handshakes = 0, upgrades = 0, welcomes = 0, commands = 0, acks = 0,
                results = 0, pings = 0, goaways = 0, closes = 0, decode_errors = 0,
                unexpected = 0, reconnects = 0, tls_full = 0, tls_resumed = 0, tls_tickets = 0;
  std::map<unsigned, std::uint64_t> close_codes;  // received from the broker
};

constexpr std::uint32_t kSignalTag = 0xFFFFFFFFU;

class Simulator {
 public:
  Simulator(Options opts, Url url) : o_(std::move(opts)), url_(std::move(url)), rng_(std::random_device{}()) {}

  int run();

 private:
  bool setup();
  void schedule(std::uint32_t i, std::uint64_t due) { timers_.push({due, i, rigs_[i].gen}); }
  void start_connect(std::uint32_t i);
  void on_event(std::uint32_t i, std::uint32_t ev);
  void drive_tls_handshake(std::uint32_t i);
  void send_upgrade(std::uint32_t i);
  void do_read(std::uint32_t i);
  void process_rx(std::uint32_t i);
  void handle_message(std::uint32_t i, std::span<std::uint8_t> payload);
  void send_message(std::uint32_t i, const fleetlink::Message& m);
  void flush(std::uint32_t i);
  void arm_out(std::uint32_t i, bool want);
  void teardown(std::uint32_t i, bool reconnect);
  std::uint64_t backoff_ms(Rig& r);
  void status_line(const char* event);
  static int on_new_session(SSL* ssl, SSL_SESSION* session);
  std::uint32_t mask_key() { return static_cast<std::uint32_t>(rng_()); }

  Options o_;
  Url url_;
  std::mt19937_64 rng_;
  int ep_ = -1;
  int sigfd_ = -1;
  sockaddr_in dst_{};
  std::uint32_t src_base_ = 0;   // host byte order
  bool bind_src_ = false;
  SSL_CTX* ctx_ = nullptr;
  std::vector<Rig> rigs_;
  fleetlink::Bytes encode_buf_;  // reused by send_message
  std::vector<std::string> ids_;
  std::vector<std::string> boot_ids_;
  std::vector<fb::X509Ptr> certs_;
  std::vector<fb::PkeyPtr> keys_;          // per rig (cert-dir) or one shared (issued)
  // Each rig's latest TLS session (with its ticket), offered at the next connect the way
  // an agent resumes after a broker restart. A copy: OpenSSL marks the connection's own
  // session unusable when that connection ends in an error (as it does when the broker dies).
  std::vector<SSL_SESSION*> sessions_;
  static Simulator* instance_;   // the one simulator of this process, for OpenSSL's session callback
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  Counters c_;
  unsigned connected_ = 0;
  bool all_connected_ = false;
  bool stopping_ = false;
  std::string request_tail_;
  std::string result_output_;
  std::vector<char> readbuf_ = std::vector<char>(256 * 1024);
  double cert_seconds_ = 0;
};

bool Simulator::setup() {
  // Many sockets in one process: take the hard limit (BRIEF: 20,000 here).
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  if (static_cast<rlim_t>(o_.count) + 32 > rl.rlim_cur) {
    std::fprintf(stderr, "rigsim: --count %u needs more than the %llu open files allowed; use several processes\n",
                 o_.count, static_cast<unsigned long long>(rl.rlim_cur));
    return false;
  }
  signal(SIGPIPE, SIG_IGN);

  dst_.sin_family = AF_INET;
  dst_.sin_port = htons(static_cast<std::uint16_t>(url_.port));
  if (inet_pton(AF_INET, url_.host == "localhost" ? "127.0.0.1" : url_.host.c_str(), &dst_.sin_addr) != 1) {
    std::fprintf(stderr, "rigsim: host must be an IPv4 address: %s\n", url_.host.c_str());
    return false;
  }
  if (!o_.source_ip.empty()) {
    in_addr a{};
    if (inet_pton(AF_INET, o_.source_ip.c_str(), &a) != 1 || o_.source_ip_count == 0) {
      std::fprintf(stderr, "rigsim: bad --source-ip %s\n", o_.source_ip.c_str());
      return false;
    }
    src_base_ = ntohl(a.s_addr);
    bind_src_ = true;
  }

  rigs_.resize(o_.count);
  ids_.reserve(o_.count);
  boot_ids_.reserve(o_.count);
  for (unsigned k = 0; k < o_.count; ++k) {
    char num[32];
    std::snprintf(num, sizeof num, "%0*u", static_cast<int>(o_.index_width), o_.start_index + k);
    ids_.push_back(o_.rig_prefix + num);
    boot_ids_.push_back(fleetlink::uuid_v7().to_string());
  }
  result_output_.assign(o_.result_bytes, 'x');
  request_tail_ = "Host: " + url_.host + ":" + std::to_string(url_.port) +
                  "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n";
  if (!o_.ws_protocol.empty()) request_tail_ += "Sec-WebSocket-Protocol: " + o_.ws_protocol + "\r\n";

  if (url_.tls) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx_, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                               SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (o_.resume) {
      // No internal cache: on_new_session keeps one session per rig.
      SSL_CTX_set_session_cache_mode(ctx_, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
      SSL_CTX_sess_set_new_cb(ctx_, &Simulator::on_new_session);
      instance_ = this;
      sessions_.assign(o_.count, nullptr);
    } else {
      SSL_CTX_set_session_cache_mode(ctx_, SSL_SESS_CACHE_OFF);
    }
    if (!o_.verify_ca.empty()) {
      if (SSL_CTX_load_verify_locations(ctx_, o_.verify_ca.c_str(), nullptr) != 1) {
        std::fprintf(stderr, "rigsim: cannot load %s\n", o_.verify_ca.c_str());
        return false;
      }
      SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    } else {
      SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
    }
    const double t0 = cpu_seconds();
    certs_.resize(o_.count);
    if (!o_.issue_ca.empty()) {
      auto issuer = fb::RigCertIssuer::open(o_.issue_ca);
      if (!issuer) {
        std::fprintf(stderr, "rigsim: %s\n", issuer.error().detail.c_str());
        return false;
      }
      EVP_PKEY_up_ref(issuer->rig_key());
      keys_.emplace_back(issuer->rig_key());
      for (unsigned k = 0; k < o_.count; ++k) {
        auto cert = issuer->issue(ids_[k], static_cast<long>(now_ms() % 1000000000) * 100000 + k);
        if (!cert) {
          std::fprintf(stderr, "rigsim: %s\n", cert.error().detail.c_str());
          return false;
        }
        certs_[k] = std::move(*cert);
      }
    } else if (!o_.cert_dir.empty()) {
      for (unsigned k = 0; k < o_.count; ++k) {
        auto cert = fb::load_cert_file(o_.cert_dir + "/" + ids_[k] + ".crt");
        auto key = fb::load_key_file(o_.cert_dir + "/" + ids_[k] + ".key");
        if (!cert || !key) {
          std::fprintf(stderr, "rigsim: no certificate/key for %s in %s\n", ids_[k].c_str(), o_.cert_dir.c_str());
          return false;
        }
        certs_[k] = std::move(*cert);
        keys_.push_back(std::move(*key));
      }
    } else {
      std::fprintf(stderr, "rigsim: wss:// needs --issue-ca DIR or --cert-dir DIR\n");
      return false;
    }
    cert_seconds_ = cpu_seconds() - t0;
  }

  ep_ = epoll_create1(EPOLL_CLOEXEC);
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  sigfd_ = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = kSignalTag;
  epoll_ctl(ep_, EPOLL_CTL_ADD, sigfd_, &ev);
  return true;
}

Simulator* Simulator::instance_ = nullptr;

int Simulator::on_new_session(SSL* ssl, SSL_SESSION* session) {
  Simulator* self = instance_;
  const auto tag = reinterpret_cast<std::uintptr_t>(SSL_get_app_data(ssl));
  if (self == nullptr || tag == 0 || tag > self->sessions_.size()) return 0;
  SSL_SESSION* copy = SSL_SESSION_dup(session);
  if (copy == nullptr) return 0;
  ++self->c_.tls_tickets;
  SSL_SESSION*& kept = self->sessions_[tag - 1];
  SSL_SESSION_free(kept);
  kept = copy;
  return 0;  // OpenSSL keeps its own reference; we hold the copy
}

std::uint64_t Simulator::backoff_ms(Rig& r) {
  if (r.next_delay_override_ms >= 0) {
    const auto d = static_cast<std::uint64_t>(r.next_delay_override_ms);
    r.next_delay_override_ms = -1;
    return d;
  }
  const unsigned shift = std::min<unsigned>(r.attempt, 20);
  const std::uint64_t ceiling =
      std::min<std::uint64_t>(static_cast<std::uint64_t>(o_.backoff_base_ms) << shift, o_.backoff_cap_ms);
  if (r.attempt < 255) ++r.attempt;
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  return static_cast<std::uint64_t>(static_cast<double>(ceiling) * jitter(rng_));
}

void Simulator::start_connect(std::uint32_t i) {
  Rig& r = rigs_[i];
  ++c_.connects;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ++c_.connect_errors;
    schedule(i, mono_ms() + backoff_ms(r));
    return;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (bind_src_) {
    // Why several source addresses: with ~20,000 connections from one address to one
    // port, the kernel's ephemeral-port search (__inet_hash_connect) walks the used
    // ports on every connect() and becomes most of this process's CPU. Spread over
    // K addresses, the first candidate port is almost always free.
    sockaddr_in src{};
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl(src_base_ + i % o_.source_ip_count);
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    bind(fd, reinterpret_cast<const sockaddr*>(&src), sizeof src);
  }
  r.fd = fd;
  r.phase = Phase::connecting;
  const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&dst_), sizeof dst_);
  if (rc != 0 && errno != EINPROGRESS) {
    ++c_.connect_errors;
    teardown(i, true);
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT;
  ev.data.u32 = i;
  r.out_armed = true;
  epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
}

void Simulator::arm_out(std::uint32_t i, bool want) {
  Rig& r = rigs_[i];
  if (r.out_armed == want || r.fd < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN | (want ? EPOLLOUT : 0U);
  ev.data.u32 = i;
  epoll_ctl(ep_, EPOLL_CTL_MOD, r.fd, &ev);
  r.out_armed = want;
}

void Simulator::teardown(std::uint32_t i, bool reconnect) {
  Rig& r = rigs_[i];
  if (r.welcomed) {
    r.welcomed = false;
    --connected_;
    all_connected_ = false;
  }
  if (r.ssl != nullptr) {
    SSL_free(r.ssl);
    r.ssl = nullptr;
  }
  if (r.fd >= 0) {
    close(r.fd);  // also removes it from the epoll set
    r.fd = -1;
  }
  r.phase = Phase::idle;
  r.closing = false;
  r.out_armed = false;
  r.rx.clear();
  r.rx.shrink_to_fit();
  r.tx.clear();
  r.tx.shrink_to_fit();
  r.fragments.clear();
  r.fragments.shrink_to_fit();
  ++r.gen;
  if (reconnect && !stopping_) {
    ++c_.reconnects;
    schedule(i, mono_ms() + backoff_ms(r));
  }
}

void Simulator::send_upgrade(std::uint32_t i) {
  Rig& r = rigs_[i];
  r.phase = Phase::upgrading;
  r.tx += "GET " + url_.path + " HTTP/1.1\r\nSec-WebSocket-Key: " +
          fb::websocket_key_base64(rng_(), rng_()) + "\r\n" + request_tail_ + "\r\n";
  flush(i);
}

void Simulator::drive_tls_handshake(std::uint32_t i) {
  Rig& r = rigs_[i];
  const int rc = SSL_do_handshake(r.ssl);
  if (rc == 1) {
    ++(SSL_session_reused(r.ssl) == 1 ? c_.tls_resumed : c_.tls_full);
    send_upgrade(i);
    return;
  }
  const int err = SSL_get_error(r.ssl, rc);
  if (err == SSL_ERROR_WANT_READ) {
    arm_out(i, false);
  } else if (err == SSL_ERROR_WANT_WRITE) {
    arm_out(i, true);
  } else {
    ++c_.tls_failures;
    ++c_.failed_handshakes;
    ERR_clear_error();
    teardown(i, true);
  }
}

void Simulator::flush(std::uint32_t i) {
  Rig& r = rigs_[i];
  while (!r.tx.empty()) {
    long n;
    if (r.ssl != nullptr) {
      const int w = SSL_write(r.ssl, r.tx.data(), static_cast<int>(r.tx.size()));
      if (w <= 0) {
        const int err = SSL_get_error(r.ssl, w);
        if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
          arm_out(i, true);
          return;
        }
        ERR_clear_error();
        teardown(i, true);
        return;
      }
      n = w;
    } else {
      n = send(r.fd, r.tx.data(), r.tx.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          arm_out(i, true);
          return;
        }
        teardown(i, true);
        return;
      }
    }
    r.tx.erase(0, static_cast<std::size_t>(n));
  }
  arm_out(i, false);
}

void Simulator::send_message(std::uint32_t i, const fleetlink::Message& m) {
  encode_buf_.clear();  // one buffer for every frame: the simulator must stay cheap
  fleetlink::encode_to(m, encode_buf_);
  fb::append_client_frame(rigs_[i].tx, fb::WsOpcode::binary, encode_buf_, mask_key());
}

void Simulator::on_event(std::uint32_t i, std::uint32_t ev) {
  Rig& r = rigs_[i];
  if (r.fd < 0) return;
  if (r.phase == Phase::connecting) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(r.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0 || (ev & (EPOLLERR | EPOLLHUP)) != 0) {
      ++c_.connect_errors;
      teardown(i, true);
      return;
    }
    if ((ev & EPOLLOUT) == 0) return;
    if (url_.tls) {
      r.ssl = SSL_new(ctx_);
      SSL_set_fd(r.ssl, r.fd);
      SSL_use_certificate(r.ssl, certs_[i].get());
      SSL_use_PrivateKey(r.ssl, keys_.size() == 1 ? keys_[0].get() : keys_[i].get());
      SSL_set_connect_state(r.ssl);
      if (o_.resume) {
        // on_new_session finds the rig by this (index + 1: never a null pointer)
        SSL_set_app_data(r.ssl, reinterpret_cast<void*>(static_cast<std::uintptr_t>(i) + 1));
        if (sessions_[i] != nullptr) {
          // A copy again: an OpenSSL 3.0 client marks a TLS 1.3 session it resumed as
          // not resumable, while the broker may let a rig reuse a young ticket.
          SSL_SESSION* offer = SSL_SESSION_dup(sessions_[i]);
          if (offer != nullptr) SSL_set_session(r.ssl, offer);
          SSL_SESSION_free(offer);
        }
      }
      r.phase = Phase::tls_handshake;
      drive_tls_handshake(i);
    } else {
      send_upgrade(i);
    }
    return;
  }
  if (r.phase == Phase::tls_handshake) {
    drive_tls_handshake(i);
    return;
  }
  if ((ev & EPOLLOUT) != 0) {
    flush(i);
    if (rigs_[i].fd < 0) return;
  }
  if ((ev & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0) do_read(i);
}

void Simulator::do_read(std::uint32_t i) {
  const std::uint32_t gen = rigs_[i].gen;
  for (;;) {
    Rig& r = rigs_[i];
    if (r.gen != gen || r.fd < 0) return;
    long n;
    if (r.ssl != nullptr) {
      const int got = SSL_read(r.ssl, readbuf_.data(), static_cast<int>(readbuf_.size()));
      if (got <= 0) {
        const int err = SSL_get_error(r.ssl, got);
        if (err == SSL_ERROR_WANT_READ) return;
        if (err == SSL_ERROR_WANT_WRITE) {
          arm_out(i, true);
          return;
        }
        ERR_clear_error();
        n = 0;
      } else {
        n = got;
      }
    } else {
      n = recv(r.fd, readbuf_.data(), readbuf_.size(), 0);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0) n = 0;
    }
    if (n == 0) {  // the peer went away (or a TLS/socket error)
      if (r.phase == Phase::upgrading) ++c_.failed_handshakes;
      if (r.phase == Phase::open) ++c_.closes;
      teardown(i, true);
      return;
    }
    r.rx.append(readbuf_.data(), static_cast<std::size_t>(n));
    process_rx(i);
  }
}

void Simulator::process_rx(std::uint32_t i) {
  const std::uint32_t gen = rigs_[i].gen;
  std::size_t pos = 0;
  for (;;) {
    Rig& r = rigs_[i];
    if (r.gen != gen) return;  // torn down while handling a message
    std::string_view view(r.rx);
    view.remove_prefix(pos);
    if (r.phase == Phase::upgrading) {
      auto head = fb::parse_http_head(view);
      if (!head) break;
      if (head->status == 101) {
        ++c_.upgrades;
        r.phase = Phase::open;
        pos += head->head_bytes;
        msg::Hello hello;
        hello.rig_id = ids_[i];
        hello.agent_version = "fleetlink-rigsim/1";
        hello.boot_id = boot_ids_[i];
        hello.labels = {{"sim", "rigsim"}};
        hello.kinds = o_.kinds;
        send_message(i, hello);
        flush(i);
        continue;
      }
      if (head->status == 503) {
        ++c_.refused_503;
        if (auto ra = head->header("Retry-After")) {
          r.next_delay_override_ms = std::atoll(std::string(*ra).c_str()) * 1000;
        }
      } else {
        ++c_.failed_handshakes;
      }
      teardown(i, true);
      return;
    }
    auto h = fb::parse_frame_header(view);
    if (!h || view.size() < h->header_bytes + h->payload_bytes) break;
    auto* payload = reinterpret_cast<std::uint8_t*>(r.rx.data() + pos + h->header_bytes);
    std::span<std::uint8_t> body(payload, static_cast<std::size_t>(h->payload_bytes));
    fb::unmask(body, h->mask);
    pos += h->header_bytes + static_cast<std::size_t>(h->payload_bytes);
    switch (h->opcode) {
      case fb::WsOpcode::binary:
      case fb::WsOpcode::text:
      case fb::WsOpcode::continuation:
        if (h->fin && r.fragments.empty()) {
          handle_message(i, body);
        } else {
          r.fragments.append(reinterpret_cast<const char*>(body.data()), body.size());
          if (h->fin) {
            std::string whole = std::move(r.fragments);
            r.fragments.clear();
            handle_message(i, std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(whole.data()), whole.size()));
          }
        }
        break;
      case fb::WsOpcode::ping:
        ++c_.pings;
        fb::append_client_frame(r.tx, fb::WsOpcode::pong, body, mask_key());
        flush(i);
        break;
      case fb::WsOpcode::pong:
        break;
      case fb::WsOpcode::close: {
        const unsigned code = body.size() >= 2 ? (static_cast<unsigned>(body[0]) << 8U) | body[1] : 1005U;
        ++c_.close_codes[code];
        ++c_.closes;
        if (!r.closing) {
          fb::append_client_close(r.tx, static_cast<std::uint16_t>(code == 1005U ? 1000U : code), mask_key());
          flush(i);
        }
        teardown(i, true);
        return;
      }
    }
  }
  Rig& r = rigs_[i];
  if (r.gen != gen) return;
  if (pos >= r.rx.size()) {
    r.rx.clear();
    if (r.rx.capacity() > 4096) r.rx.shrink_to_fit();
  } else if (pos > 0) {
    r.rx.erase(0, pos);
  }
}

void Simulator::handle_message(std::uint32_t i, std::span<std::uint8_t> payload) {
  auto decoded = fleetlink::decode(payload);
  if (!decoded) {
    ++c_.decode_errors;
    return;
  }
  Rig& r = rigs_[i];
  if (auto* w = std::get_if<msg::Welcome>(&*decoded)) {
    (void)w;
    ++c_.welcomes;
    if (!r.welcomed) {
      r.welcomed = true;
      r.attempt = 0;
      ++connected_;
      if (connected_ == o_.count && !all_connected_) {
        all_connected_ = true;
        status_line("all_connected");
      }
    }
  } else if (auto* cmd = std::get_if<msg::Command>(&*decoded)) {
    ++c_.commands;
    const std::uint64_t t = now_ms();
    send_message(i, msg::Ack{cmd->seq, cmd->cmd_id, false});
    ++c_.acks;
    msg::Result res;
    res.cmd_id = cmd->cmd_id;
    res.status = msg::Status::ok;
    res.output.assign(result_output_.begin(), result_output_.end());
    res.started_at_ms = t;
    res.finished_at_ms = t;
    send_message(i, res);
    ++c_.results;
    flush(i);
  } else if (auto* ga = std::get_if<msg::Goaway>(&*decoded)) {
    ++c_.goaways;
    r.next_delay_override_ms = ga->reconnect_after_ms;
    fb::append_client_close(r.tx, 1001, mask_key());
    r.closing = true;
    flush(i);
    if (rigs_[i].fd >= 0 && rigs_[i].tx.empty()) teardown(i, true);
  } else if (std::holds_alternative<msg::Cancel>(*decoded)) {
    // nothing runs long enough to be cancelled
  } else {
    ++c_.unexpected;
  }
}

void Simulator::status_line(const char* event) {
  std::string codes;
  for (const auto& [code, n] : c_.close_codes) {
    if (!codes.empty()) codes += ',';
    codes += "\"" + std::to_string(code) + "\":" + std::to_string(n);
  }
  std::printf(
      "{\"event\":\"%s\",\"t_ms\":%" PRIu64 ",\"count\":%u,\"connected\":%u,\"connects\":%" PRIu64
      ",\"connect_errors\":%" PRIu64 ",\"refused_503\":%" PRIu64 ",\"failed_handshakes\":%" PRIu64
      ",\"tls_failures\":%" PRIu64 ",\"upgrades\":%" PRIu64 ",\"welcomes\":%" PRIu64 ",\"commands\":%" PRIu64
      ",\"acks\":%" PRIu64 ",\"results\":%" PRIu64 ",\"pings\":%" PRIu64 ",\"goaways\":%" PRIu64
      ",\"closes\":%" PRIu64 ",\"reconnects\":%" PRIu64 ",\"decode_errors\":%" PRIu64 ",\"unexpected\":%" PRIu64
      ",\"tls_full\":%" PRIu64 ",\"tls_resumed\":%" PRIu64 ",\"tls_tickets\":%" PRIu64
      ",\"close_codes\":{%s},\"cpu_s\":%.3f,\"cert_cpu_s\":%.3f,\"maxrss_kb\":%ld}\n",
      event, now_ms(), o_.count, connected_, c_.connects, c_.connect_errors, c_.refused_503,
      c_.failed_handshakes, c_.tls_failures, c_.upgrades, c_.welcomes, c_.commands, c_.acks, c_.results,
      c_.pings, c_.goaways, c_.closes, c_.reconnects, c_.decode_errors, c_.unexpected, c_.tls_full,
      c_.tls_resumed, c_.tls_tickets, codes.c_str(),
      cpu_seconds(), cert_seconds_, rss_kb());
  std::fflush(stdout);
}

int Simulator::run() {
  if (!setup()) return 2;
  status_line("started");
  const std::uint64_t t0 = mono_ms();
  for (std::uint32_t k = 0; k < o_.count; ++k) {
    const std::uint64_t due =
        o_.connect_rate > 0 ? t0 + static_cast<std::uint64_t>(static_cast<double>(k) * 1000.0 / o_.connect_rate) : t0;
    schedule(k, due);
  }
  std::vector<epoll_event> events(4096);
  std::uint64_t next_status = mono_ms() + o_.status_ms;
  const std::uint64_t deadline = o_.max_seconds > 0 ? t0 + o_.max_seconds * 1000ULL : 0;
  while (!stopping_) {
    const std::uint64_t now = mono_ms();
    // Connections due now; at most a few thousand per turn so reads are not starved.
    unsigned started = 0;
    while (!timers_.empty() && timers_.top().due_ms <= now && started < 2000) {
      const Timer t = timers_.top();
      timers_.pop();
      if (rigs_[t.rig].gen != t.gen || rigs_[t.rig].fd >= 0) continue;
      start_connect(t.rig);
      ++started;
    }
    if (now >= next_status) {
      status_line("status");
      next_status = now + o_.status_ms;
    }
    if (deadline != 0 && now >= deadline) break;
    std::uint64_t wake = next_status;
    if (!timers_.empty()) wake = std::min(wake, timers_.top().due_ms);
    const int timeout = started >= 2000 ? 0 : static_cast<int>(wake > now ? wake - now : 0);
    const int n = epoll_wait(ep_, events.data(), static_cast<int>(events.size()), timeout);
    for (int k = 0; k < n; ++k) {
      if (events[static_cast<std::size_t>(k)].data.u32 == kSignalTag) {
        stopping_ = true;
        continue;
      }
      on_event(events[static_cast<std::size_t>(k)].data.u32, events[static_cast<std::size_t>(k)].events);
    }
  }
  stopping_ = true;
  status_line("final");
  for (std::uint32_t k = 0; k < o_.count; ++k) teardown(k, false);
  for (SSL_SESSION* kept : sessions_) SSL_SESSION_free(kept);
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"fleetlink-rigsim: many simulated rigs in one process, real protocol"};
  app.add_option("--url", o.url, "ws://127.0.0.1:PORT/agent or wss://127.0.0.1:PORT/agent");
  app.add_option("--count", o.count, "rigs in this process");
  app.add_option("--rig-prefix", o.rig_prefix, "rig id prefix");
  app.add_option("--start-index", o.start_index, "number of the first rig");
  app.add_option("--index-width", o.index_width, "zero-padded digits of the rig number");
  app.add_option("--cert-dir", o.cert_dir, "per-rig certificates DIR/RIG.crt + DIR/RIG.key");
  app.add_option("--issue-ca", o.issue_ca, "issue rig certificates in memory from DIR/ca.crt + DIR/ca.key");
  app.add_option("--verify-ca", o.verify_ca, "verify the broker certificate against this CA file");
  app.add_option("--source-ip", o.source_ip, "bind to this 127.0.0.X before connecting");
  app.add_option("--source-ip-count", o.source_ip_count,
                 "spread rigs over this many consecutive source addresses from --source-ip");
  app.add_option("--connect-rate", o.connect_rate, "initial connections per second (0 = all at once)");
  app.add_option("--result-bytes", o.result_bytes, "output bytes in each RESULT");
  app.add_option("--backoff-base-ms", o.backoff_base_ms);
  app.add_option("--backoff-cap-ms", o.backoff_cap_ms);
  app.add_option("--status-ms", o.status_ms, "status line period");
  app.add_option("--max-seconds", o.max_seconds, "exit after this long (0 = until SIGTERM)");
  app.add_option("--ws-protocol", o.ws_protocol, "Sec-WebSocket-Protocol to ask for");
  app.add_option("--kind", o.kinds, "command kinds announced in HELLO");
  bool no_resume = false;
  app.add_flag("--no-resume", no_resume, "do not keep TLS session tickets (every connect is a full handshake)");
  CLI11_PARSE(app, argc, argv);
  o.resume = !no_resume;
  Url url;
  if (!parse_url(o.url, url)) {
    std::fprintf(stderr, "rigsim: bad --url %s\n", o.url.c_str());
    return 2;
  }
  Simulator sim(std::move(o), std::move(url));
  return sim.run();
}
