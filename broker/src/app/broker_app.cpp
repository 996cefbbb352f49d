#include "app/broker_app.hpp"

#include <arpa/inet.h>
#include <libwebsockets.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <cstring>

#include "fleetlink/codec.hpp"
#include "fleetlink/uuid.hpp"
#include "common/log.hpp"

#include "control_net/control_vhost.hpp"

namespace fleetlink::broker {

namespace {

constexpr std::uint64_t kSweepSliceMs = 10;  // one slice of the connection walk per tick: pings leave ~10 at a time
constexpr std::uint32_t kRegistryRefreshMs = 10000;   // registry entries (TTL 60 s) refreshed this often
constexpr std::size_t kMaxArgs = 64;
constexpr std::size_t kMaxArgBytes = 4096;

Connection* conn_of(void* user) {
  auto* c = static_cast<Connection*>(user);
  return (c && c->magic == Connection::kMagic) ? c : nullptr;
}

// No lws "validity" timer per rig connection: the broker runs its own keepalive, and
// lws 4.1.6 re-inserts that timer into one sorted list, walking every connection, at each
// WebSocket establishment and each PONG: O(connections) per event. At 19,900 rigs that
// walk was 53% of the broker's CPU and starved HELLOs and pongs (4008/4002 closes).
const lws_retry_bo_t g_no_lws_validity = {};

lws_protocols g_agent_protocols[] = {
    {"fleetlink.v1", &Broker::lws_callback, sizeof(Connection), 0, 0, nullptr, 0},
    {nullptr, nullptr, 0, 0, 0, nullptr, 0},
};

std::string peer_of(lws* wsi) {
  int fd = lws_get_socket_fd(wsi);
  sockaddr_storage ss{};
  socklen_t sl = sizeof ss;
  if (fd < 0 || getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &sl) != 0) return {};
  char host[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(a->sin_port));
  }
  auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
  inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
  return "[" + std::string(host) + "]:" + std::to_string(ntohs(a->sin6_port));
}

std::string asn1_text(const ASN1_STRING* s) {
  if (!s) return {};
  const unsigned char* d = ASN1_STRING_get0_data(s);
  return std::string(reinterpret_cast<const char*>(d), static_cast<std::size_t>(ASN1_STRING_length(s)));
}

std::optional<CertIdentity> identity_of_cert(X509* cert) {
  if (!cert) return std::nullopt;
  CertIdentity id;
  X509_NAME* subject = X509_get_subject_name(cert);
  if (subject) {
    char line[256] = {};
    X509_NAME_oneline(subject, line, sizeof line - 1);
    id.subject = line;
    int idx = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
    if (idx >= 0) id.common_name = asn1_text(X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, idx)));
  }
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans) {
    int n = sk_GENERAL_NAME_num(sans);
    for (int i = 0; i < n; ++i) {
      const GENERAL_NAME* gn = sk_GENERAL_NAME_value(sans, i);
      if (gn && gn->type == GEN_DNS) id.dns_sans.push_back(asn1_text(gn->d.dNSName));
    }
    GENERAL_NAMES_free(sans);
  }
  return id;
}

// lws_add_http_header_status() writes "HTTP/1.0" here: at CONFIRM_UPGRADE the
// request's version is not recorded yet. WebSocket clients (RFC 6455 4.1)
// expect an HTTP/1.1 answer, so the status line is written by hand.
int add_status_line(int code, const char* text, unsigned char** p, unsigned char* end) {
  int n = std::snprintf(reinterpret_cast<char*>(*p), static_cast<std::size_t>(end - *p), "HTTP/1.1 %d %s\r\n",
                        code, text);
  if (n < 0 || n >= end - *p) return 1;
  *p += n;
  return 0;
}

}  // namespace

Broker::Broker(BrokerConfig cfg, uv_loop_t* loop, BrokerMetrics& metrics,
               std::unique_ptr<RegistryBackend> registry)
    : cfg_(std::move(cfg)), loop_(loop), metrics_(metrics), registry_(std::move(registry)),
      accept_bucket_(cfg_.accept_rate, cfg_.accept_burst, 0), commands_(cfg_.command_history),
      rng_(std::random_device{}()) {
  keepalive_.ping_interval_ms = cfg_.ping_interval_ms;
  keepalive_.pong_timeout_ms = cfg_.pong_timeout_ms;
  keepalive_.max_missed = cfg_.max_missed_pongs;
  start_mono_ms_ = uv_now(loop_);
  accept_bucket_ = TokenBucket(cfg_.accept_rate, cfg_.accept_burst, mono_us());
  // A pending entry outlives lws's own TLS-accept timeout only if its end was missed.
  pending_handshakes_ = PendingHandshakes(cfg_.max_pending_handshakes,
                                          (std::uint64_t{cfg_.tls_accept_timeout_s} + 10) * 1000);
  tx_.reserve(LWS_PRE + 1024);
}

Broker::~Broker() { shutdown(); }

std::uint32_t Broker::mono_ms() const noexcept {
  return static_cast<std::uint32_t>(uv_now(loop_) - start_mono_ms_);
}
std::uint64_t Broker::mono_us() const noexcept { return uv_hrtime() / 1000; }

Expected<void> Broker::start() {
  int lws_levels = LLL_ERR | (log::enabled(log::Level::debug) ? LLL_WARN : 0);
  if (const char* env = std::getenv("FLEETLINK_LWS_LOG")) lws_levels = std::atoi(env);  // debugging lws itself
  lws_set_log_level(lws_levels, nullptr);

  lws_context_creation_info info{};
  void* foreign_loops[1] = {loop_};
  info.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_EXPLICIT_VHOSTS |
                 LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
  info.foreign_loops = foreign_loops;
  info.port = CONTEXT_PORT_NO_LISTEN;
  info.user = this;
  info.pt_serv_buf_size = 16 * 1024;
  // Header memory (~3 KB each with 2 KB of data) is only held during a handshake
  // (and by open control-API streams such as SSE): a bounded pool caps the peak of
  // a reconnect storm (later handshakes wait their turn), so the heap does not stay
  // fragmented at the storm's high-water mark, with room left for the control port.
  info.max_http_header_pool = 256;
  info.max_http_header_data = 2048;
  // PENDING_TIMEOUT_SSL_ACCEPT (and lws's other protocol-level waits) use this; the
  // default 5 s killed handshakes that were merely queued behind others in a storm.
  info.timeout_secs = cfg_.tls_accept_timeout_s;
  context_ = lws_create_context(&info);
  if (!context_) return make_error(Errc::io, "lws_create_context failed (is libwebsockets-evlib-uv installed?)");

  g_agent_protocols[0].tx_packet_size = cfg_.max_frame_bytes + 64;
  // lws keeps a buffer of this size per rig for as long as it is connected, and reads
  // at most this much per wakeup; frames larger than it are reassembled in the
  // Connection. Small by default: idle rigs dominate a fleet (docs/PERFORMANCE.md).
  g_agent_protocols[0].rx_buffer_size = cfg_.ws_rx_buffer_bytes;

  rig_tls_.ca_path = cfg_.ca;
  rig_tls_.ticket_lifetime_s = cfg_.tls_ticket_lifetime_s;
  if (!cfg_.tls_ticket_key_file.empty()) {
    auto key = load_or_create_ticket_key(cfg_.tls_ticket_key_file);
    if (!key) return make_error(key.error().code, key.error().detail);
    rig_tls_.ticket_key = *key;
  }

  // The rig listener: TLS with a required client certificate, fed by our own accept().
  lws_context_creation_info vh{};
  vh.vhost_name = "agents";
  vh.port = CONTEXT_PORT_NO_LISTEN_SERVER;
  vh.protocols = g_agent_protocols;
  // DISABLE_OS_CA_CERTS: the broker never dials out, so lws need not parse the whole
  // system CA bundle into the vhost's client SSL_CTX at every start (finding 4).
  vh.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT |
               LWS_SERVER_OPTION_REQUIRE_VALID_OPENSSL_CLIENT_CERT | LWS_SERVER_OPTION_DISABLE_OS_CA_CERTS;
  vh.ssl_cert_filepath = cfg_.cert.c_str();
  vh.ssl_private_key_filepath = cfg_.key.c_str();
  vh.ssl_ca_filepath = cfg_.ca.c_str();
  vh.user = this;
  vh.retry_and_idle_policy = &g_no_lws_validity;
  agent_vhost_ = lws_create_vhost(context_, &vh);
  if (!agent_vhost_)
    return make_error(Errc::io, "cannot create the TLS listener: check --cert " + cfg_.cert + " --key " +
                                    cfg_.key + " --ca " + cfg_.ca);
  certs_loaded_ = true;

  // Admission at accept(): see admission.hpp. TLS rigs take their accept-rate token
  // here (over the bucket they wait in the backlog, no handshake is spent on a 503);
  // plain rigs take it at the upgrade, where a 503 with Retry-After is cheap.
  auto adopt_into = [this](lws_vhost* v, bool tls) {
    return [this, v, tls](int fd) {
      if (drain_.active) {
        ::close(fd);
        return;
      }
      if (tls) accept_bucket_.try_take(mono_us());
      lws* wsi = lws_adopt_socket_vhost(v, fd);
      if (!wsi) {
        FL_WARN("could not adopt an accepted socket");
        ::close(fd);
        return;
      }
      pending_handshakes_.started(wsi, mono_ms());
    };
  };
  auto hold_for = [this](bool tls) {
    return [this, tls]() -> std::uint64_t {
      if (pending_handshakes_.full()) {
        pending_handshakes_.expire(mono_ms());
        // Resumed by handshake_finished(); the timed look again only guards a missed end.
        if (pending_handshakes_.full()) return 100 * 1000;
      }
      return tls ? accept_bucket_.wait_us(mono_us()) : 0;
    };
  };
  listener_ = std::make_unique<AdmissionListener>(loop_, adopt_into(agent_vhost_, true), hold_for(true));
  if (auto r = listener_->open(cfg_.listen); !r) return r;
  listen_port_ = listener_->port();

  if (!cfg_.plain_listen.host.empty()) {
    lws_context_creation_info pv{};
    pv.vhost_name = "agents-plain";
    pv.port = CONTEXT_PORT_NO_LISTEN_SERVER;
    pv.protocols = g_agent_protocols;
    pv.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_DISABLE_OS_CA_CERTS;
    pv.user = this;
    pv.retry_and_idle_policy = &g_no_lws_validity;
    plain_vhost_ = lws_create_vhost(context_, &pv);
    if (!plain_vhost_) return make_error(Errc::io, "cannot create the plain ws vhost");
    plain_listener_ = std::make_unique<AdmissionListener>(loop_, adopt_into(plain_vhost_, false), hold_for(false));
    if (auto r = plain_listener_->open(cfg_.plain_listen); !r) return r;
    plain_port_ = plain_listener_->port();
    FL_WARN("plain ws listener on %s:%d: rig identities are NOT checked against certificates "
            "(bench/dev only)", cfg_.plain_listen.host.c_str(), plain_port_);
  }

  ControlApiOptions copts;
  copts.host = cfg_.control.host;
  copts.port = cfg_.control.port;
  copts.token = cfg_.control_token;
  copts.default_drain_window = std::chrono::milliseconds(cfg_.drain_window_ms);
  auto cv = create_control_vhost(context_, copts, *this, metrics_);
  if (!cv) return make_error(Errc::io, "control API on " + cfg_.control.to_string() + ": " + cv.error().detail);
  control_vhost_ = *cv;

  uv_timer_init(loop_, &resume_timer_);
  resume_timer_.data = this;
  uv_timer_init(loop_, &sweep_timer_);
  sweep_timer_.data = this;
  const std::uint64_t pass_ms = keepalive_.sweep_interval_ms(cfg_.hello_timeout_ms);
  const std::uint64_t slice_ms = std::min<std::uint64_t>(pass_ms, kSweepSliceMs);
  sweep_slices_ = static_cast<std::uint32_t>(pass_ms / slice_ms);
  uv_timer_start(&sweep_timer_, [](uv_timer_t* t) { static_cast<Broker*>(t->data)->sweep(); }, slice_ms,
                 slice_ms);
  auto on_signal = [](uv_signal_t* s, int signum) {
    auto* self = static_cast<Broker*>(s->data);
    if (self->drain_.active) {
      FL_WARN("signal %d during drain: exiting now", signum);
      self->stop_loop(0);
      return;
    }
    FL_INFO("signal %d: draining over %u ms", signum, self->cfg_.drain_window_ms);
    self->start_drain(std::chrono::milliseconds(self->cfg_.drain_window_ms));
  };
  uv_signal_init(loop_, &sigterm_);
  sigterm_.data = this;
  uv_signal_start(&sigterm_, on_signal, SIGTERM);
  uv_signal_init(loop_, &sigint_);
  sigint_.data = this;
  uv_signal_start(&sigint_, on_signal, SIGINT);
  handles_open_ = true;
  return {};
}

void Broker::stop_loop(int code) {
  if (stopping_) return;
  stopping_ = true;
  exit_code_ = code;
  uv_stop(loop_);
}

void Broker::shutdown() {
  if (control_vhost_) shutdown_control_api(control_vhost_);
  control_vhost_ = nullptr;
  if (listener_) listener_->close();
  if (plain_listener_) plain_listener_->close();
  if (handles_open_) {
    handles_open_ = false;
    uv_timer_stop(&sweep_timer_);
    uv_close(reinterpret_cast<uv_handle_t*>(&sweep_timer_), nullptr);
    uv_timer_stop(&resume_timer_);
    uv_close(reinterpret_cast<uv_handle_t*>(&resume_timer_), nullptr);
    uv_signal_stop(&sigterm_);
    uv_close(reinterpret_cast<uv_handle_t*>(&sigterm_), nullptr);
    uv_signal_stop(&sigint_);
    uv_close(reinterpret_cast<uv_handle_t*>(&sigint_), nullptr);
  }
  if (context_) {
    lws_context* c = context_;
    context_ = nullptr;
    lws_context_destroy(c);
    // lws closes its libuv handles asynchronously on the foreign loop.
    for (int i = 0; i < 16 && uv_run(loop_, UV_RUN_NOWAIT); ++i) {
    }
  }
  listener_.reset();
  plain_listener_.reset();
  uv_run(loop_, UV_RUN_NOWAIT);
}

int Broker::control_port() const noexcept {
  return control_vhost_ ? lws_get_vhost_listen_port(control_vhost_) : 0;
}

bool Broker::ready() const {
  return certs_loaded_ && listen_port_ != 0 && registry_ && registry_->up() && !drain_.active;
}

// ---------------------------------------------------------------------------------
// lws callbacks

int Broker::lws_callback(lws* wsi, lws_callback_reasons reason, void* user, void* in, std::size_t len) {
  lws_context* ctx = lws_get_context(wsi);
  auto* self = ctx ? static_cast<Broker*>(lws_context_user(ctx)) : nullptr;
  if (!self) return lws_callback_http_dummy(wsi, static_cast<lws_callback_reasons>(reason), user, in, len);
  return self->on_callback(wsi, reason, user, in, len);
}

int Broker::on_callback(lws* wsi, int reason, void* user, void* in, std::size_t len) {
  switch (reason) {
    case LWS_CALLBACK_OPENSSL_PERFORM_CLIENT_CERT_VERIFICATION: {
      // lws turns our 0 into "accept": keep OpenSSL's own verdict (len = preverify_ok).
      if (len == 0) {
        auto* store = static_cast<X509_STORE_CTX*>(user);
        X509* cert = store ? X509_STORE_CTX_get_current_cert(store) : nullptr;
        char line[256] = "?";
        if (cert) X509_NAME_oneline(X509_get_subject_name(cert), line, sizeof line - 1);
        int err = store ? X509_STORE_CTX_get_error(store) : 0;
        FL_WARN("client certificate refused: %s (%s)", line, X509_verify_cert_error_string(err));
        return 1;
      }
      return 0;
    }
    case LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS: {
      // user = the vhost's SSL_CTX: no session cache; tickets only with a key file (tls_tuning.hpp).
      if (auto* ctx = static_cast<SSL_CTX*>(user)) {
        if (auto r = configure_rig_ssl_ctx(ctx, rig_tls_); !r) {
          FL_ERROR("rig TLS setup: %s", r.error().detail.c_str());
          return 1;
        }
      }
      return 0;
    }
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
      return on_confirm_upgrade(wsi);
    case LWS_CALLBACK_HTTP:
      // Plain HTTP to the rig port: nothing here but the WebSocket endpoint.
      lws_return_http_status(wsi, HTTP_STATUS_NOT_FOUND, "WebSocket endpoint /agent only");
      return -1;
    case LWS_CALLBACK_WSI_DESTROY:
      handshake_finished(wsi);  // a handshake or upgrade that failed or was refused
      break;
    case LWS_CALLBACK_ESTABLISHED: {
      handshake_finished(wsi);
      if (!user) return -1;
      // Not lws_get_vhost(wsi) == plain_vhost_: on the upgrade lws 4.1 re-binds the wsi to a vhost
      // chosen by port (seen: the TLS one), so plain rigs failed 4401. The socket itself tells.
      auto* c = new (user) Connection(wsi, lws_is_ssl(wsi) == 0, cfg_.rig_burst, mono_ms(), log::wall_ms());
      c->next = head_;
      if (head_) head_->prev = c;
      head_ = c;
      ++connection_count_;
      ++metrics_.connections_open;
      if (SSL* ssl = c->plain ? nullptr : lws_get_ssl(wsi)) {
        // Whether session tickets work (--tls-ticket-key-file): after a restart
        // nearly every rig should resume.
        ++(SSL_session_reused(ssl) ? metrics_.tls_resumed : metrics_.tls_full);
      }
      FL_DEBUG("connection open peer=%s%s", peer_of(wsi).c_str(), c->plain ? " (plain ws)" : "");
      if (drain_.active) request_close(*c, CloseCode::going_away, "broker draining");
      return 0;
    }
    case LWS_CALLBACK_RECEIVE: {
      Connection* c = conn_of(user);
      if (!c) return -1;
      return on_receive(*c, static_cast<const std::uint8_t*>(in), len);
    }
    case LWS_CALLBACK_RECEIVE_PONG: {
      Connection* c = conn_of(user);
      if (!c) return 0;
      c->keepalive.pong(mono_ms(), keepalive_);
      c->last_seen_wall_ms = log::wall_ms();
      return 0;
    }
    case LWS_CALLBACK_SERVER_WRITEABLE: {
      Connection* c = conn_of(user);
      if (!c) return 0;
      return on_writeable(*c);
    }
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE: {
      Connection* c = conn_of(user);
      if (c && in && len >= 2) {
        auto* b = static_cast<const std::uint8_t*>(in);
        unsigned code = (static_cast<unsigned>(b[0]) << 8) | b[1];
        c->peer_close_code = static_cast<std::uint16_t>(code);
        FL_DEBUG("peer closed rig=%s code=%u reason=%.*s", c->rig_id.c_str(), code,
                 static_cast<int>(std::min<std::size_t>(len - 2, 123)), reinterpret_cast<const char*>(b + 2));
      }
      return 0;
    }
    case LWS_CALLBACK_CLOSED: {
      Connection* c = conn_of(user);
      if (c) on_closed(*c);
      return 0;
    }
    default:
      break;
  }
  return lws_callback_http_dummy(wsi, static_cast<lws_callback_reasons>(reason), user, in, len);
}

void Broker::handshake_finished(lws* wsi) {
  bool was_full = pending_handshakes_.full();
  if (!pending_handshakes_.finished(wsi) || !was_full) return;
  if (listener_) listener_->resume();
  if (plain_listener_) plain_listener_->resume();
}

int Broker::on_confirm_upgrade(lws* wsi) {
  char uri[128] = {};
  lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI);
  unsigned char buf[LWS_PRE + 512];
  unsigned char* start = buf + LWS_PRE;
  unsigned char* p = start;
  unsigned char* end = buf + sizeof buf - 1;
  if (std::strcmp(uri, "/agent") != 0) {
    FL_DEBUG("upgrade refused: path %s", uri);
    if (add_status_line(HTTP_STATUS_NOT_FOUND, "Not Found", &p, end) ||
        lws_add_http_header_content_length(wsi, 0, &p, end) ||
        lws_finalize_write_http_header(wsi, start, &p, end))
      return -1;
    return 1;
  }
  // TLS rigs already took their token at accept() (see start()).
  bool admit = !drain_.active && (lws_is_ssl(wsi) != 0 || accept_bucket_.try_take(mono_us()));
  if (admit) {
    ++metrics_.connections_accepted;
    return 0;
  }
  ++metrics_.admissions_refused;
  std::uniform_int_distribution<std::uint32_t> jitter(cfg_.retry_after_min_s, cfg_.retry_after_max_s);
  std::string retry = std::to_string(jitter(rng_));
  FL_DEBUG("upgrade refused: %s, Retry-After %s", drain_.active ? "draining" : "accept rate", retry.c_str());
  if (add_status_line(HTTP_STATUS_SERVICE_UNAVAILABLE, "Service Unavailable", &p, end) ||
      lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_RETRY_AFTER,
                                   reinterpret_cast<const unsigned char*>(retry.data()),
                                   static_cast<int>(retry.size()), &p, end) ||
      lws_add_http_header_content_length(wsi, 0, &p, end) ||
      lws_finalize_write_http_header(wsi, start, &p, end))
    return -1;
  return 1;
}

int Broker::on_receive(Connection& c, const std::uint8_t* in, std::size_t len) {
  if (c.phase == ConnPhase::closing) return 0;  // already leaving; ignore input
  std::size_t remaining = lws_remaining_packet_payload(c.wsi);
  bool final = lws_is_final_fragment(c.wsi) != 0;
  if (!c.partial_frame && final) {
    on_frame(c, {in, len});  // the common case: the whole frame in one piece, no copy
    return 0;
  }
  if (!c.partial_frame) {
    c.partial_frame = std::make_unique<std::vector<std::uint8_t>>();
    c.partial_frame->reserve(std::min<std::size_t>(len + remaining, cfg_.max_frame_bytes));
  }
  std::vector<std::uint8_t>& buf = *c.partial_frame;
  if (buf.size() + len + remaining > cfg_.max_frame_bytes) {
    ++metrics_.frames_rejected;
    c.partial_frame.reset();
    request_close(c, CloseCode::message_too_big, "frame over " + std::to_string(cfg_.max_frame_bytes) + " bytes");
    return 0;
  }
  buf.insert(buf.end(), in, in + len);
  if (final) {
    const std::unique_ptr<std::vector<std::uint8_t>> frame = std::move(c.partial_frame);
    on_frame(c, *frame);
  }
  // A close requested above goes the same polite way as any other (see
  // request_close): returning -1 here would kill the socket at once, and a peer
  // still sending would get a TCP reset instead of our close code.
  return 0;
}

void Broker::on_frame(Connection& c, std::span<const std::uint8_t> frame) {
  ++metrics_.frames_in;
  c.last_seen_wall_ms = log::wall_ms();
  bool over_rate = !c.rate_limit.try_take(mono_ms(), cfg_.rig_rate, cfg_.rig_burst);
  auto decoded = decode(frame, DecodeOptions{cfg_.max_frame_bytes});
  if (over_rate) {
    // Traffic a command asked for (its output stream, ACK, NACK, RESULT) is slowed
    // down, not punished: stop reading this socket until the bucket refills, and TCP
    // pushes back on the agent (which drops output and says so in the RESULT).
    // Anything else over the limit is a flood: close 4429.
    bool answer = decoded && (std::holds_alternative<msg::OutputChunk>(*decoded) ||
                              std::holds_alternative<msg::Ack>(*decoded) ||
                              std::holds_alternative<msg::Nack>(*decoded) ||
                              std::holds_alternative<msg::Result>(*decoded));
    if (!answer || c.phase != ConnPhase::live) {
      ++metrics_.frames_rejected;
      FL_WARN("rig=%s over the inbound rate limit (%.0f/s, burst %.0f)", c.rig_id.c_str(), cfg_.rig_rate,
              cfg_.rig_burst);
      request_close(c, CloseCode::rate_limited, "inbound frame rate over the limit");
      return;
    }
    pause_reading(c);
  }
  if (!decoded) {
    const Error& e = decoded.error();
    if (e.code == Errc::unknown_type && c.phase == ConnPhase::live) {
      if (cfg_.strict) {
        ++metrics_.frames_rejected;
        request_close(c, CloseCode::unknown_type, "unknown message type (strict)");
      } else {
        ++metrics_.unknown_types_ignored;
        FL_DEBUG("rig=%s unknown message type ignored: %s", c.rig_id.c_str(), e.detail.c_str());
      }
      return;
    }
    ++metrics_.frames_rejected;
    if (c.phase == ConnPhase::awaiting_hello) {
      auto id = c.plain ? std::nullopt : peer_identity(c.wsi);
      FL_WARN("malformed HELLO from %s subject=%s: %s: %s", peer_of(c.wsi).c_str(),
              id ? id->subject.c_str() : "(none)", fleetlink::to_string(e.code), e.detail.c_str());
      ++metrics_.hellos["malformed"];
    } else {
      FL_WARN("rig=%s malformed frame: %s: %s", c.rig_id.c_str(), fleetlink::to_string(e.code), e.detail.c_str());
    }
    if (e.code == Errc::unsupported_version)
      request_close(c, CloseCode::unsupported_version, "unsupported protocol version");
    else if (e.code == Errc::too_large)
      request_close(c, CloseCode::message_too_big, "frame too large");
    else
      request_close(c, CloseCode::malformed, std::string("malformed frame: ") + fleetlink::to_string(e.code));
    return;
  }
  Message& m = *decoded;
  if (c.phase == ConnPhase::awaiting_hello) {
    if (auto* hello = std::get_if<msg::Hello>(&m)) {
      on_hello(c, std::move(*hello));
    } else {
      ++metrics_.hellos["malformed"];
      auto id = c.plain ? std::nullopt : peer_identity(c.wsi);
      FL_WARN("first frame from %s subject=%s is %s, not hello", peer_of(c.wsi).c_str(),
              id ? id->subject.c_str() : "(none)", type_name(m));
      request_close(c, CloseCode::malformed, "expected hello");
    }
    return;
  }
  if (auto* ack = std::get_if<msg::Ack>(&m)) {
    on_ack(c, *ack);
  } else if (auto* nack = std::get_if<msg::Nack>(&m)) {
    on_nack(c, *nack);
  } else if (auto* result = std::get_if<msg::Result>(&m)) {
    on_result(c, std::move(*result));
  } else if (auto* chunk = std::get_if<msg::OutputChunk>(&m)) {
    on_output(c, *chunk);
  } else if (auto* ev = std::get_if<msg::Event>(&m)) {
    std::string detail = ev->name;
    for (const auto& [k, v] : ev->fields) detail += " " + k + "=" + v;
    emit(EventType::rig_event, c.rig_id, {}, std::move(detail));
  } else {
    ++metrics_.frames_rejected;
    FL_WARN("rig=%s sent a %s frame, which agents never send", c.rig_id.c_str(), type_name(m));
    request_close(c, CloseCode::malformed, std::string("unexpected ") + type_name(m));
  }
}

std::optional<CertIdentity> Broker::peer_identity(lws* wsi) const {
  SSL* ssl = lws_get_ssl(wsi);
  if (!ssl) return std::nullopt;
  X509* cert = SSL_get0_peer_certificate(ssl);
  return identity_of_cert(cert);
}

void Broker::on_hello(Connection& c, msg::Hello hello) {
  std::optional<CertIdentity> identity;
  if (!c.plain) {
    identity = peer_identity(c.wsi);
    if (!identity) identity = CertIdentity{};  // TLS without a peer cert: matches nothing
  }
  std::optional<ExistingConnection> existing;
  Connection* old = nullptr;
  if (auto it = rigs_.find(hello.rig_id); it != rigs_.end()) {
    old = it->second;
    existing = ExistingConnection{old->boot_id.to_string(), old->phase == ConnPhase::closing, old->keepalive.missed};
  }
  HelloDecision d = decide_hello(hello, identity, existing);
  if (d.verdict == HelloVerdict::supersede_existing && old) {
    // Drop the old connection first so its registry entry is released before the claim.
    FL_INFO("rig=%s superseded: old boot=%s new boot=%s (%s)", hello.rig_id.c_str(), existing->boot_id.c_str(),
            hello.boot_id.c_str(), d.reason.c_str());
    request_close(*old, CloseCode::superseded, "superseded by a newer connection");
  }
  if (d.verdict == HelloVerdict::accept || d.verdict == HelloVerdict::supersede_existing) {
    ClaimOutcome claim = registry_->claim(hello.rig_id, hello.boot_id, cfg_.broker_id,
                                          d.verdict == HelloVerdict::supersede_existing, log::wall_ms());
    if (claim == ClaimOutcome::lost)
      d = {HelloVerdict::reject_duplicate, "rig is live elsewhere with a newer boot"};
  }
  ++metrics_.hellos[to_string(d.verdict)];
  if (d.verdict != HelloVerdict::accept && d.verdict != HelloVerdict::supersede_existing) {
    FL_WARN("hello refused rig=%s boot=%s peer=%s subject=%s outcome=%s: %s", hello.rig_id.c_str(),
            hello.boot_id.c_str(), peer_of(c.wsi).c_str(), identity ? identity->subject.c_str() : "(plain)",
            to_string(d.verdict), d.reason.c_str());
    if (d.verdict == HelloVerdict::reject_duplicate && old && old->phase == ConnPhase::live &&
        existing && existing->boot_id == hello.boot_id && !old->want_ping) {
      // The same agent process says it reconnected: its old socket is probably
      // half-open. Probe it now instead of waiting for the next ping.
      FL_INFO("rig=%s same boot_id reconnected: probing its old connection now", hello.rig_id.c_str());
      old->want_ping = true;
      old->keepalive.ping_sent(mono_ms(), keepalive_);
      lws_callback_on_writable(old->wsi);
    }
    request_close(c, close_code_for(d.verdict), d.reason);
    return;
  }
  c.rig_id = std::move(hello.rig_id);
  c.boot_id = parse_uuid(hello.boot_id).value_or(Uuid{});  // validated by hello_problem
  auto version = versions_.try_emplace(std::move(hello.agent_version), 0).first;
  ++version->second;
  c.agent_version = &version->first;
  std::sort(hello.kinds.begin(), hello.kinds.end());
  auto kinds = kind_sets_.try_emplace(std::move(hello.kinds), 0).first;
  ++kinds->second;
  c.kinds = &kinds->first;
  auto labels = label_sets_.try_emplace(Fleet::LabelList(std::make_move_iterator(hello.labels.begin()),
                                                        std::make_move_iterator(hello.labels.end())),
                                        0).first;
  ++labels->second;
  c.labels = &labels->first;
  c.phase = ConnPhase::live;
  c.registered = true;
  rigs_.erase(std::string_view(c.rig_id));
  rigs_.emplace(std::string_view(c.rig_id), &c);
  ++metrics_.rigs_registered;
  c.keepalive.start(mono_ms(), keepalive_);
  c.want_welcome = true;
  lws_callback_on_writable(c.wsi);
  FL_INFO("hello rig=%s boot=%s version=%s peer=%s outcome=%s", c.rig_id.c_str(), hello.boot_id.c_str(),
          c.agent_version->c_str(), peer_of(c.wsi).c_str(), to_string(d.verdict));
  emit(EventType::rig_connected, c.rig_id, {}, hello.boot_id);
}

void Broker::on_ack(Connection& c, const msg::Ack& ack) {
  auto entry = c.outbox.settle(ack.seq, ack.cmd_id);
  if (!entry) {
    FL_WARN("rig=%s ack for unknown seq=%llu cmd=%s", c.rig_id.c_str(),
            static_cast<unsigned long long>(ack.seq), ack.cmd_id.c_str());
    return;
  }
  std::uint64_t now = log::wall_ms();
  c.outbox.record_ack(ack.seq, now);
  ++metrics_.commands_acked;
  metrics_.ack_latency_seconds.observe(static_cast<double>(now - std::min(now, entry->enqueued_ms)) / 1000.0);
  if (CommandView* v = entry->view ? entry->view : commands_.find(entry->cmd_id)) {
    if (v->state == CommandState::queued || v->state == CommandState::sent) v->state = CommandState::acked;
    v->acked_at_ms = now;
    v->duplicate = ack.duplicate;
  }
  FL_DEBUG("ack rig=%s seq=%llu cmd=%s%s", c.rig_id.c_str(), static_cast<unsigned long long>(ack.seq),
           entry->cmd_id.c_str(), ack.duplicate ? " duplicate" : "");
  emit(EventType::command_acked, c.rig_id, entry->cmd_id, ack.duplicate ? "duplicate" : "");
}

void Broker::on_nack(Connection& c, const msg::Nack& nack) {
  auto entry = c.outbox.settle(nack.seq, nack.cmd_id);
  if (!entry) {
    FL_WARN("rig=%s nack for unknown seq=%llu", c.rig_id.c_str(), static_cast<unsigned long long>(nack.seq));
    return;
  }
  ++metrics_.commands_nacked;
  std::uint64_t now = log::wall_ms();
  if (CommandView* v = entry->view ? entry->view : commands_.find(entry->cmd_id)) {
    commands_.finish(*v, CommandState::nacked);
    v->nack = nack;
    v->finished_at_ms = now;
  }
  FL_INFO("nack rig=%s seq=%llu cmd=%s reason=%s %s", c.rig_id.c_str(),
          static_cast<unsigned long long>(nack.seq), entry->cmd_id.c_str(), fleetlink::to_string(nack.reason),
          nack.detail.c_str());
  emit(EventType::command_nacked, c.rig_id, entry->cmd_id, fleetlink::to_string(nack.reason));
}

void Broker::on_result(Connection& c, msg::Result result) {
  CommandView* v = commands_.find(result.cmd_id);
  if (!v) {
    FL_WARN("rig=%s result for unknown cmd=%s", c.rig_id.c_str(), result.cmd_id.c_str());
    return;
  }
  if (v->rig_id != c.rig_id) {
    FL_WARN("rig=%s sent a result for cmd=%s of rig %s: ignored", c.rig_id.c_str(), result.cmd_id.c_str(),
            v->rig_id.c_str());
    return;
  }
  if (result.output.size() > kMaxResultOutput) {
    result.dropped_bytes += result.output.size() - kMaxResultOutput;
    result.output.resize(kMaxResultOutput);
    result.truncated = true;
  }
  if (std::uint64_t lost = reconcile_result(*v, result); lost > 0)
    FL_WARN("rig=%s cmd=%s: %llu output bytes lost in transit (stream gaps %llu, rig counted %llu dropped)",
            c.rig_id.c_str(), result.cmd_id.c_str(), static_cast<unsigned long long>(lost),
            static_cast<unsigned long long>(v->stream_gap_bytes),
            static_cast<unsigned long long>(result.dropped_bytes - lost));
  // A result whose ACK was never seen settles the command too (also when OUTPUT
  // came first and made it "running"): a finished command never stays in an
  // outbox, where it would later be reported lost.
  if (v->state != CommandState::acked) c.outbox.settle_cmd(v->cmd_id);
  commands_.finish(*v, CommandState::done);
  v->finished_at_ms = log::wall_ms();
  if (!v->acked_at_ms) v->acked_at_ms = v->finished_at_ms;
  std::string status = fleetlink::to_string(result.status);
  FL_INFO("result rig=%s cmd=%s status=%s exit=%d bytes=%zu", c.rig_id.c_str(), result.cmd_id.c_str(),
          status.c_str(), result.exit_code, result.output.size());
  v->result = std::move(result);
  ++metrics_.commands_completed;
  emit(EventType::command_done, c.rig_id, v->cmd_id, status);
}

void Broker::on_output(Connection& c, const msg::OutputChunk& chunk) {
  CommandView* v = commands_.find(chunk.cmd_id);
  if (!v || v->rig_id != c.rig_id) return;
  const std::uint64_t expected = v->stream_next_offset;
  if (std::uint64_t gap = account_output(*v, chunk); gap > 0)
    FL_DEBUG("output gap rig=%s cmd=%s: expected offset %llu, got %llu (%llu bytes not streamed)", c.rig_id.c_str(),
             chunk.cmd_id.c_str(), static_cast<unsigned long long>(expected),
             static_cast<unsigned long long>(chunk.offset), static_cast<unsigned long long>(gap));
  if (v->state == CommandState::acked || v->state == CommandState::sent) v->state = CommandState::running;
}

bool Broker::more_to_write(const Connection& c) const noexcept {
  if (c.phase == ConnPhase::closing) return false;
  return c.want_ping || c.want_welcome || c.has_cancels ||
         c.outbox.has_unsent() || c.want_goaway;
}

int Broker::write_frame(Connection& c, const Message& m) {
  tx_.resize(LWS_PRE);  // lws's headroom, then the frame: encoded in place
  encode_to(m, tx_);
  int n = lws_write(c.wsi, tx_.data() + LWS_PRE, tx_.size() - LWS_PRE, LWS_WRITE_BINARY);
  if (n < 0) return -1;
  ++metrics_.frames_out;
  return 0;
}

int Broker::on_writeable(Connection& c) {
  if (c.phase == ConnPhase::closing) return 0;  // lws itself sends the close frame
  if (c.want_ping) {
    c.want_ping = false;
    // A non-empty payload on purpose: lws 4.1.6 drops zero-length PONGs before
    // LWS_CALLBACK_RECEIVE_PONG, so an empty PING's answer would never be seen.
    unsigned char ping[LWS_PRE + 4];
    std::uint32_t stamp = mono_ms();
    std::memcpy(ping + LWS_PRE, &stamp, sizeof stamp);
    if (!c.plain) refresh_ticket_if_due(lws_get_ssl(c.wsi), rig_tls_, std::time(nullptr));  // rides on this write
    if (lws_write(c.wsi, ping + LWS_PRE, sizeof stamp, LWS_WRITE_PING) < 0) return -1;
    ++metrics_.pings_sent;
  } else if (c.want_welcome) {
    c.want_welcome = false;
    msg::Welcome w;
    w.broker_id = cfg_.broker_id;
    w.session_id = uuid_v7().to_string();
    w.ping_interval_ms = cfg_.ping_interval_ms;
    w.max_frame_bytes = cfg_.max_frame_bytes;
    if (write_frame(c, w) < 0) return -1;
  } else if (c.has_cancels) {
    auto& list = pending_cancels_[&c];
    msg::Cancel cancel;
    if (!list.empty()) {
      cancel.cmd_id = std::move(list.front());
      list.erase(list.begin());
    }
    if (list.empty()) {
      pending_cancels_.erase(&c);
      c.has_cancels = false;
    }
    if (!cancel.cmd_id.empty() && write_frame(c, cancel) < 0) return -1;
  } else if (const OutboxEntry* e = c.outbox.next_unsent()) {
    std::uint64_t now = log::wall_ms();
    std::uint64_t seq = e->seq;
    CommandView* v = e->view ? e->view : commands_.find(e->cmd_id);
    if (v) {
      msg::Command cmd;
      cmd.seq = seq;
      cmd.cmd_id = v->cmd_id;
      cmd.kind = v->kind;
      cmd.args = v->args;
      cmd.issued_at_ms = v->enqueued_at_ms;
      if (write_frame(c, cmd) < 0) return -1;
      if (v->state == CommandState::queued) v->state = CommandState::sent;
      v->sent_at_ms = now;
    }
    c.outbox.mark_sent(seq, now);
  } else if (c.want_goaway) {
    c.want_goaway = false;
    msg::Goaway g{"broker draining", c.goaway_after_ms};
    if (write_frame(c, g) < 0) return -1;
    FL_DEBUG("goaway rig=%s reconnect_after_ms=%u", c.rig_id.c_str(), c.goaway_after_ms);
  }
  if (more_to_write(c)) lws_callback_on_writable(c.wsi);
  return 0;
}

void Broker::request_close(Connection& c, CloseCode code, std::string reason) {
  if (c.phase == ConnPhase::closing) return;
  c.phase = ConnPhase::closing;
  c.close_code = static_cast<std::uint16_t>(code);
  if (reason.size() > 123) reason.resize(123);
  ++metrics_.closes[c.close_code];
  FL_INFO("closing rig=%s peer=%s code=%u (%s) %s", c.rig_id.empty() ? "-" : c.rig_id.c_str(),
          peer_of(c.wsi).c_str(), c.close_code, std::string(close_code_name(c.close_code)).c_str(),
          reason.c_str());
  unregister(c, reason);
  // Why not "return -1 from SERVER_WRITEABLE": Debian's lws 4.1.6 is a _DEBUG
  // build, and with libuv its close_and_handled path closes a second time
  // ("uv repeat test"), which kills the socket before the close frame goes out.
  // An async kill takes lws's polite path (close frame with our code, then wait
  // for the ack, bounded by lws at 5 s, also for a peer that stopped reading) only
  // for the HTTP_KEEPALIVE_IDLE reason: every other timeout is a "violent death"
  // in 4.1.6 (wsi-timeout.c sets socket_is_permanently_unusable).
  lws_close_reason(c.wsi, static_cast<lws_close_status>(c.close_code),
                   reinterpret_cast<unsigned char*>(reason.data()), reason.size());
  lws_set_timeout(c.wsi, PENDING_TIMEOUT_HTTP_KEEPALIVE_IDLE, LWS_TO_KILL_ASYNC);
  // Called from our own timers, lws would only look at its timer list on its next
  // wake-up: wake it now (the event pipe) so the async kill runs at once.
  lws_cancel_service(context_);
}

void Broker::unregister(Connection& c, const std::string& why) {
  if (c.registered) {
    c.registered = false;
    auto it = rigs_.find(c.rig_id);
    if (it != rigs_.end() && it->second == &c) {
      rigs_.erase(it);
      registry_->release(c.rig_id, c.boot_id.to_string(), cfg_.broker_id);
    }
    --metrics_.rigs_registered;
    emit(EventType::rig_disconnected, c.rig_id, {}, why);
  }
  // Whatever was not acknowledged on this connection is lost: shown, never retransmitted.
  if (c.outbox.size() != 0) {
    std::uint64_t now = log::wall_ms();
    for (auto& e : c.outbox.take_all()) {
      ++metrics_.commands_lost;
      if (CommandView* v = e.view ? e.view : commands_.find(e.cmd_id)) {
        commands_.finish(*v, CommandState::lost);
        v->finished_at_ms = now;
      }
      FL_WARN("command lost rig=%s seq=%llu cmd=%s (connection ended before its ACK)", c.rig_id.c_str(),
              static_cast<unsigned long long>(e.seq), e.cmd_id.c_str());
      emit(EventType::command_lost, c.rig_id, e.cmd_id, "connection ended before ACK");
    }
  }
}

void Broker::on_closed(Connection& c) {
  // Closes by code: ours are counted in request_close; the rig's own code here,
  // 1006 (abnormal, RFC 6455) when the socket simply went away.
  if (c.phase != ConnPhase::closing) ++metrics_.closes[c.peer_close_code ? c.peer_close_code : 1006];
  unregister(c, "connection closed");
  if (c.has_cancels) pending_cancels_.erase(&c);
  if (c.rx_paused) std::erase(paused_, &c);
  release_interned(c);
  if (sweep_cursor_ == &c) sweep_cursor_ = c.next;
  if (c.prev) c.prev->next = c.next;
  else head_ = c.next;
  if (c.next) c.next->prev = c.prev;
  --connection_count_;
  --metrics_.connections_open;
  FL_DEBUG("connection closed rig=%s", c.rig_id.empty() ? "-" : c.rig_id.c_str());
  c.magic = 0;
  c.~Connection();
  if (drain_.active) check_drain_done();
}

void Broker::release_interned(Connection& c) {
  if (c.agent_version) {
    auto it = versions_.find(*c.agent_version);
    if (it != versions_.end() && --it->second == 0) versions_.erase(it);
    c.agent_version = nullptr;
  }
  if (c.kinds) {
    auto it = kind_sets_.find(*c.kinds);
    if (it != kind_sets_.end() && --it->second == 0) kind_sets_.erase(it);
    c.kinds = nullptr;
  }
  if (c.labels) {
    auto it = label_sets_.find(*c.labels);
    if (it != label_sets_.end() && --it->second == 0) label_sets_.erase(it);
    c.labels = nullptr;
  }
}

void Broker::emit(EventType type, const std::string& rig_id, const std::string& cmd_id, std::string detail) {
  if (!bus_.wants(type, cmd_id)) return;
  bus_.emit(FleetEvent{type, rig_id, cmd_id, std::move(detail), log::wall_ms()});
}

// ---------------------------------------------------------------------------------
// timers

void Broker::pause_reading(Connection& c) {
  if (c.rx_paused) return;
  c.rx_paused = true;
  lws_rx_flow_control(c.wsi, 0);
  paused_.push_back(&c);
  if (!uv_is_active(reinterpret_cast<uv_handle_t*>(&resume_timer_)))
    uv_timer_start(&resume_timer_, [](uv_timer_t* t) { static_cast<Broker*>(t->data)->resume_paused(); }, 20, 20);
}

void Broker::resume_paused() {
  std::uint32_t now = mono_ms();
  bool resumed = false;
  for (std::size_t i = 0; i < paused_.size();) {
    Connection* c = paused_[i];
    if (c->rate_limit.available(now, cfg_.rig_rate, cfg_.rig_burst) >= 1.0) {
      c->rx_paused = false;
      lws_rx_flow_control(c->wsi, 1);
      paused_[i] = paused_.back();
      paused_.pop_back();
      resumed = true;
    } else {
      ++i;
    }
  }
  if (paused_.empty()) uv_timer_stop(&resume_timer_);
  if (resumed) lws_cancel_service(context_);  // let lws deliver what it buffered meanwhile
}

void Broker::sweep() {
  const std::uint32_t now = mono_ms();
  if (sweep_cursor_ == nullptr) {  // a new pass
    sweep_cursor_ = head_;
    refresh_pass_ = now - last_refresh_ms_ >= kRegistryRefreshMs;
    if (refresh_pass_) last_refresh_ms_ = now;
  }
  std::size_t budget = (connection_count_ + sweep_slices_ - 1) / sweep_slices_;
  while (sweep_cursor_ != nullptr && budget-- > 0) {
    Connection* c = sweep_cursor_;
    sweep_cursor_ = c->next;
    sweep_one(*c, now, refresh_pass_);
  }
  if (drain_.active) check_drain_done();
}

void Broker::sweep_one(Connection& c, std::uint32_t now, bool refresh) {
  if (c.phase == ConnPhase::awaiting_hello) {
    if (now - c.established_mono_ms >= cfg_.hello_timeout_ms)
      request_close(c, CloseCode::hello_timeout, "no hello within " + std::to_string(cfg_.hello_timeout_ms) + " ms");
    return;
  }
  if (c.phase != ConnPhase::live) return;
  if (refresh && c.registered) registry_->refresh(c.rig_id, c.boot_id.to_string(), cfg_.broker_id, log::wall_ms());
  const unsigned before = c.keepalive.missed;
  const KeepaliveAction a = c.keepalive.tick(now, keepalive_);
  if (c.keepalive.missed > before) {
    ++metrics_.pongs_missed;
    FL_INFO("rig=%s missed pong %u/%u", c.rig_id.c_str(), c.keepalive.missed, keepalive_.max_missed);
  }
  if (a == KeepaliveAction::dead) {
    request_close(c, CloseCode::keepalive_timeout, std::to_string(c.keepalive.missed) + " pongs missed");
  } else if (a == KeepaliveAction::send_ping) {
    // The pong clock starts now, whether or not the socket lets the ping out:
    // a rig that stopped reading is as dead as one that stopped answering.
    c.keepalive.ping_sent(now, keepalive_);
    c.want_ping = true;
    send_now_or_when_writable(c);
  }
}

// ---------------------------------------------------------------------------------
// Fleet

EnqueueOutcome Broker::enqueue(std::string_view rig_id, std::string kind, StringMap args) {
  auto fail = [&](EnqueueError e, std::string detail) -> EnqueueOutcome {
    ++metrics_.commands_rejected;
    EnqueueFailure f;
    f.error = e;
    f.rig_id = std::string(rig_id);
    f.detail = std::move(detail);
    return f;
  };
  if (drain_.active) return fail(EnqueueError::draining, "broker " + cfg_.broker_id + " is draining");
  if (kind.empty() || kind.size() > 64) return fail(EnqueueError::bad_request, "kind must be 1..64 characters");
  if (args.size() > kMaxArgs) return fail(EnqueueError::bad_request, "more than 64 args");
  std::size_t arg_bytes = 0;
  for (const auto& [k, v] : args) arg_bytes += k.size() + v.size();
  if (arg_bytes > kMaxArgBytes || arg_bytes + 256 > cfg_.max_frame_bytes)
    return fail(EnqueueError::bad_request, "args larger than " + std::to_string(kMaxArgBytes) + " bytes");
  auto it = rigs_.find(rig_id);
  if (it == rigs_.end())
    return fail(EnqueueError::unknown_rig, "rig " + std::string(rig_id) + " is not connected to " + cfg_.broker_id);
  Connection& c = *it->second;
  if (c.kinds && !c.kinds->empty() && !std::binary_search(c.kinds->begin(), c.kinds->end(), kind))
    return fail(EnqueueError::unsupported_kind, "rig " + c.rig_id + " does not run '" + kind + "'");
  std::string cmd_id = uuid_v7().to_string();
  std::uint64_t now = log::wall_ms();
  std::uint64_t seq = 0;
  if (auto full = c.outbox.enqueue(cmd_id, now, cfg_.outbox_capacity, &seq)) {
    ++metrics_.commands_rejected;
    EnqueueFailure f;
    f.error = EnqueueError::rig_unresponsive;
    f.rig_id = c.rig_id;
    f.detail = std::move(full->detail);
    f.last_ack_seq = c.outbox.last_ack_seq();
    f.last_ack_at_ms = c.outbox.last_ack_at_ms();
    f.suggested_action = "force_reconnect";
    FL_WARN("enqueue refused rig=%s: %s", c.rig_id.c_str(), f.detail.c_str());
    return f;
  }
  CommandView v;
  v.cmd_id = cmd_id;
  v.rig_id = c.rig_id;
  v.kind = std::move(kind);
  v.args = std::move(args);
  v.seq = seq;
  v.state = CommandState::queued;
  v.enqueued_at_ms = now;
  FL_DEBUG("enqueue rig=%s seq=%llu cmd=%s kind=%s", c.rig_id.c_str(), static_cast<unsigned long long>(seq),
           cmd_id.c_str(), v.kind.c_str());
  c.outbox.set_view(seq, commands_.insert(std::move(v)));
  ++metrics_.commands_enqueued;
  metrics_.outbox_depth.observe(static_cast<double>(c.outbox.size()));
  send_now_or_when_writable(c);
  return EnqueueOk{std::move(cmd_id), c.rig_id, seq};
}

void Broker::send_now_or_when_writable(Connection& c) {
  // The writeable callback is the single writer; a frame that finds nothing lws
  // still holds from a partial write is written at once instead: one send()
  // where arming POLLOUT would cost two epoll_ctl() and a turn of the loop.
  // on_writeable() writes the most urgent frame waiting (ping, WELCOME, CANCEL,
  // the oldest command, GOAWAY), so the order on the wire is the same either
  // way; whatever else waits, or whatever the socket does not take, goes out
  // from the writeable callback as before.
  if (c.phase != ConnPhase::live || lws_partial_buffered(c.wsi)) {
    lws_callback_on_writable(c.wsi);
    return;
  }
  ++metrics_.direct_writes;
  if (on_writeable(c) < 0) {
    // Not inside this connection's callback: it cannot return -1, so lws is
    // asked to drop it (its commands become lost, as for any broken connection).
    FL_WARN("rig=%s write failed: closing", c.rig_id.c_str());
    lws_set_timeout(c.wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
  }
}

RigView Broker::view_of(const Connection& c) const {
  RigView r;
  r.rig_id = c.rig_id;
  r.state = drain_.active ? "draining" : c.keepalive.missed > 0 ? "unresponsive" : "connected";
  r.boot_id = c.boot_id.to_string();
  if (c.agent_version) r.agent_version = *c.agent_version;
  if (c.labels) r.labels = StringMap(c.labels->begin(), c.labels->end());
  if (c.kinds) r.kinds = *c.kinds;
  r.peer = peer_of(c.wsi);
  r.connected_at_ms = c.connected_at_ms;
  r.last_seen_ms = c.last_seen_wall_ms ? c.last_seen_wall_ms : c.connected_at_ms;
  r.last_ack_seq = c.outbox.last_ack_seq();
  r.last_ack_at_ms = c.outbox.last_ack_at_ms();
  r.next_seq = c.outbox.next_seq();
  r.outbox_depth = c.outbox.unsent();
  r.outbox_capacity = cfg_.outbox_capacity;
  r.missed_pongs = c.keepalive.missed;
  std::uint64_t now = log::wall_ms();
  for (const auto& e : c.outbox.entries()) {
    UnackedCommand u;
    u.cmd_id = e.cmd_id;
    u.seq = e.seq;
    if (const CommandView* v = commands_.find(e.cmd_id)) u.kind = v->kind;
    u.age_ms = now > e.enqueued_ms ? now - e.enqueued_ms : 0;
    u.sent = e.sent_ms != 0;
    r.unacked.push_back(std::move(u));
  }
  return r;
}

std::vector<RigView> Broker::rigs() const {
  std::vector<RigView> out;
  out.reserve(rigs_.size());
  for (const auto& [id, c] : rigs_) out.push_back(view_of(*c));
  std::sort(out.begin(), out.end(), [](const RigView& a, const RigView& b) { return a.rig_id < b.rig_id; });
  return out;
}

void Broker::visit_rig_labels(const RigLabelsVisitor& visit) const {
  static const LabelList kNoLabels;
  for (const auto& [id, c] : rigs_) visit(id, c->labels ? *c->labels : kNoLabels);
}

std::optional<RigView> Broker::rig(std::string_view rig_id) const {
  auto it = rigs_.find(rig_id);
  if (it == rigs_.end()) return std::nullopt;
  return view_of(*it->second);
}

bool Broker::read_command(std::string_view cmd_id,
                          const std::function<void(const CommandView&)>& read) const {
  const CommandView* v = commands_.find(cmd_id);
  if (v) read(*v);
  return v != nullptr;
}

std::optional<CommandView> Broker::command(std::string_view cmd_id) const {
  const CommandView* v = commands_.find(cmd_id);
  if (!v) return std::nullopt;
  return *v;
}

bool Broker::force_reconnect(std::string_view rig_id) {
  auto it = rigs_.find(rig_id);
  if (it == rigs_.end()) return false;
  request_close(*it->second, CloseCode::forced_reconnect, "operator asked for a reconnect");
  return true;
}

bool Broker::cancel(std::string_view cmd_id) {
  const CommandView* v = commands_.find(cmd_id);
  if (!v || CommandTable::finished(v->state)) return false;
  auto it = rigs_.find(v->rig_id);
  if (it == rigs_.end()) return false;
  auto& list = pending_cancels_[it->second];
  if (list.size() >= 64 || std::find(list.begin(), list.end(), cmd_id) != list.end()) return false;  // bounded
  list.emplace_back(cmd_id);
  it->second->has_cancels = true;
  lws_callback_on_writable(it->second->wsi);
  return true;
}

void Broker::start_drain(std::chrono::milliseconds window) {
  if (drain_.active) return;
  auto window_ms = static_cast<std::uint32_t>(std::max<std::int64_t>(0, window.count()));
  drain_.active = true;
  drain_.started_ms = mono_ms();
  drain_.window_ms = window_ms;
  drain_.deadline_ms = std::max(cfg_.effective_drain_deadline_ms(), window_ms + 1000);
  if (listener_) listener_->close();
  if (plain_listener_) plain_listener_->close();
  std::vector<Connection*> live;
  for (Connection* c = head_; c; c = c->next) {
    if (c->phase == ConnPhase::live) live.push_back(c);
    else if (c->phase == ConnPhase::awaiting_hello) request_close(*c, CloseCode::going_away, "broker draining");
  }
  auto delays = drain_spread(live.size(), window_ms, rng_);
  for (std::size_t i = 0; i < live.size(); ++i) {
    live[i]->want_goaway = true;
    live[i]->goaway_after_ms = delays[i];
    lws_callback_on_writable(live[i]->wsi);
  }
  FL_INFO("drain started: %zu rigs, window %u ms, deadline %u ms", live.size(), window_ms, drain_.deadline_ms);
  emit(EventType::drain_started, {}, {}, std::to_string(window_ms));
  check_drain_done();
}

void Broker::check_drain_done() {
  if (!drain_.active || stopping_) return;
  if (connection_count_ == 0) {
    FL_INFO("drain complete: no connections left");
    stop_loop(0);
  } else if (drain_.past_deadline(mono_ms())) {
    FL_WARN("drain deadline reached with %zu connections left", connection_count_);
    stop_loop(0);
  }
}

}  // namespace fleetlink::broker
