// ClientSession on libwebsockets 4.1 + its libuv event-lib plugin.
//
// The session owns a uv_loop_t and hands it to lws as a foreign loop (lws_uv_getloop
// is not exported by Debian's build). Everything that touches lws runs on the loop
// thread; other threads queue work under `mu` and wake the loop with
// lws_cancel_service(), which is lws's only thread-safe call. Outbound frames are
// written one per LWS_CALLBACK_CLIENT_WRITEABLE: a single writer.
#include "fleetlink/client_session.hpp"

#include "tls_session_store.hpp"

#include <libwebsockets.h>
#include <uv.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace fleetlink {

namespace {

constexpr std::uint16_t kAbnormalClose = 1006;

std::string describe(const Error& e) { return std::string(to_string(e.code)) + ": " + e.detail; }

}  // namespace

// Hidden explicitly: a nested class takes the visibility of ClientSession
// (FLEETLINK_API), and none of this is part of the library's ABI.
struct __attribute__((visibility("hidden"))) ClientSession::Impl {
  // A timer on the lws scheduler; sul must stay the first member (see timer_owner).
  struct Timer {
    lws_sorted_usec_list_t sul{};
    Impl* self = nullptr;
  };
  // One entry of the outbound queue: a frame with LWS_PRE bytes of headroom, or a
  // request to close the connection once everything before it is written.
  struct Outgoing {
    Bytes buf;
    bool close = false;
    std::uint16_t code = 0;
    std::string reason;
  };

  Impl(ClientSessionConfig c, ClientSessionHandlers handlers)
      : cfg(std::move(c)),
        h(std::move(handlers)),
        backoff(cfg.backoff, cfg.backoff_seed ? cfg.backoff_seed : std::random_device{}()) {
    retry_timer.self = this;
    stop_timer.self = this;
  }

  ClientSessionConfig cfg;
  ClientSessionHandlers h;
  std::vector<BrokerUrl> urls;
  std::size_t url_index = 0;
  Backoff backoff;
  detail::TlsSessionStore tls_sessions;  // resumes the TLS session at the next connect

  // ---- loop-thread state
  uv_loop_t loop{};
  lws* wsi = nullptr;
  bool attempt_live = false;      // an attempt is in flight or its connection is open
  bool stopping = false;
  bool closing = false;           // our close frame is queued or sent: read nothing more
  bool close_sent = false;        // ... and written: write nothing more
  Bytes rx;                       // reassembly of a fragmented message
  std::uint16_t close_code = 0;   // the code of the close seen on this connection
  std::string close_reason;
  std::string bearer;  // the token of the current attempt (ClientSessionConfig::bearer_token)
  Timer retry_timer;
  Timer stop_timer;
  lws_retry_bo_t keepalive{};     // per-connection idle policy (PING, then hang up)
  bool write_requested = false;   // asked for a WRITEABLE that has not come yet (want_writable)
  std::thread::id loop_thread;

  // ---- shared with other threads, under mu
  mutable std::mutex mu;
  lws_context* ctx = nullptr;     // null outside run(): wakes are then no-ops
  bool open = false;              // accepting send()
  std::deque<Outgoing> outq;
  std::size_t out_bytes = 0;
  std::deque<std::function<void()>> tasks;
  std::string cur_url;

  std::atomic<bool> stop_requested{false};
  std::atomic<SessionState> st{SessionState::idle};

  static lws_protocols protocols[2];
  static int lws_cb(lws* wsi, lws_callback_reasons reason, void* user, void* in, std::size_t len);

  static Impl* timer_owner(lws_sorted_usec_list_t* sul) {
    return reinterpret_cast<Timer*>(sul)->self;
  }

  void log(int level, const std::string& line) const {
    if (h.on_log) {
      try {
        h.on_log(level, line);
        return;
      } catch (...) {
      }
    }
    if (level <= 4) std::fprintf(stderr, "fleetlink session: %s\n", line.c_str());
  }

  // Calls a handler; nothing thrown in it may reach lws.
  template <typename F>
  void guarded(const char* what, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      log(3, std::string(what) + " handler threw: " + e.what());
    } catch (...) {
      log(3, std::string(what) + " handler threw");
    }
  }

  bool on_loop_thread() const { return std::this_thread::get_id() == loop_thread; }

  // Asks for one WRITEABLE, once until it comes. On Debian's lws 4.1 with libuv,
  // every lws_callback_on_writable() restarts the socket's uv_poll, and libuv then
  // drops a POLLOUT it already reported in this loop iteration: with a frame queued
  // by each task of a busy loop (an executor's start, a RESULT), the first queued
  // frame (an ACK) waited for an iteration without any, 0.5-1 ms and more.
  void want_writable(lws* w) {
    if (write_requested && w == wsi) return;
    // Only a request lws took counts (it answers 1); otherwise ask again next time.
    write_requested = lws_callback_on_writable(w) > 0 && w == wsi;
  }

  // Wake the loop so it looks at tasks/outq. Safe from any thread.
  void wake() {
    std::lock_guard lk(mu);
    if (ctx) lws_cancel_service(ctx);
  }

  // ---- connection management (loop thread)

  void connect() {
    if (stopping) return;
    const BrokerUrl& u = urls[url_index];
    {
      std::lock_guard lk(mu);
      cur_url = u.text;
    }
    lws_client_connect_info ci{};
    ci.context = ctx;
    ci.address = u.host.c_str();
    ci.port = u.port;
    ci.path = u.path.c_str();
    ci.host = u.host.c_str();
    ci.origin = u.host.c_str();
    ci.ssl_connection = u.tls ? LCCSCF_USE_SSL : 0;
    // Requested in Sec-WebSocket-Protocol; the broker answers with it. lws binds the
    // answer to the local protocol of that name, so the table below uses it too.
    ci.protocol = kSubprotocol;
    ci.local_protocol_name = kSubprotocol;
    ci.ietf_version_or_minus_one = -1;
    if (cfg.keepalive_idle.count() > 0 && cfg.keepalive_timeout > cfg.keepalive_idle) {
      keepalive.secs_since_valid_ping = static_cast<std::uint16_t>(std::min<long long>(cfg.keepalive_idle.count(), 65535));
      keepalive.secs_since_valid_hangup = static_cast<std::uint16_t>(std::min<long long>(cfg.keepalive_timeout.count(), 65535));
      ci.retry_and_idle_policy = &keepalive;
    }
    bearer.clear();
    if (cfg.bearer_token) guarded("bearer_token", [&] { bearer = cfg.bearer_token(); });
    attempt_live = true;
    wsi = nullptr;
    close_code = 0;
    close_reason.clear();
    st = SessionState::connecting;
    tls_sessions.set_peer(u.host + ":" + std::to_string(u.port));
    log(7, "connecting to " + u.text);
    lws* w = lws_client_connect_via_info(&ci);
    if (!w) connection_lost(0, "connect to " + u.text + " failed");
  }

  void schedule_retry() {
    const auto delay = backoff.next_delay();
    st = SessionState::backoff;
    log(6, "reconnect in " + std::to_string(delay.count()) + "ms to " + urls[url_index].text +
               " (attempt " + std::to_string(backoff.attempt()) + ")");
    lws_sul_schedule(ctx, 0, &retry_timer.sul, &Impl::retry_cb,
                     static_cast<lws_usec_t>(delay.count()) * LWS_US_PER_MS);
  }

  static void retry_cb(lws_sorted_usec_list_t* sul) {
    Impl* self = timer_owner(sul);
    self->connect();
  }

  static void stop_cb(lws_sorted_usec_list_t* sul) {
    Impl* self = timer_owner(sul);
    self->log(4, "close handshake did not finish in time; stopping anyway");
    uv_stop(&self->loop);
  }

  // The current attempt is over (failed, closed by either side). Idempotent.
  void connection_lost(std::uint16_t code, const std::string& reason) {
    if (!attempt_live) return;
    attempt_live = false;
    const bool was_welcomed = st == SessionState::welcomed;
    wsi = nullptr;
    write_requested = false;
    rx.clear();
    std::deque<Outgoing> leftover;
    {
      std::lock_guard lk(mu);
      open = false;
      leftover.swap(outq);
      out_bytes = 0;
    }
    std::vector<Message> unsent;
    for (const auto& o : leftover) {
      if (o.close || o.buf.size() <= LWS_PRE) continue;
      auto m = decode(std::span<const std::uint8_t>(o.buf).subspan(LWS_PRE),
                      DecodeOptions{o.buf.size()});
      if (m && !std::holds_alternative<msg::Hello>(*m)) unsent.push_back(std::move(*m));
    }
    if (!unsent.empty() && h.on_unsent) guarded("on_unsent", [&] { h.on_unsent(std::move(unsent)); });
    if (h.on_disconnected) guarded("on_disconnected", [&] { h.on_disconnected(code, reason); });
    if (stopping) {
      st = SessionState::stopped;
      uv_stop(&loop);
      return;
    }
    // A broker that never got as far as WELCOME is skipped for the next one.
    if (!was_welcomed && urls.size() > 1) url_index = (url_index + 1) % urls.size();
    schedule_retry();
  }

  void begin_stop() {
    if (stopping) return;
    stopping = true;
    lws_sul_cancel(&retry_timer.sul);
    bool have_open = false;
    {
      std::lock_guard lk(mu);
      if (open && wsi) {
        Outgoing o;
        o.close = true;
        o.code = static_cast<std::uint16_t>(CloseCode::going_away);
        o.reason = "client stopping";
        outq.push_back(std::move(o));
        have_open = true;
      }
    }
    if (have_open) {
      want_writable(wsi);
      lws_sul_schedule(ctx, 0, &stop_timer.sul, &Impl::stop_cb,
                       static_cast<lws_usec_t>(cfg.stop_grace.count()) * LWS_US_PER_MS);
    } else {
      st = SessionState::stopped;
      uv_stop(&loop);
    }
  }

  // Runs posted tasks, asks for a write if frames are waiting, notices stop().
  void drain_cross_thread() {
    std::deque<std::function<void()>> todo;
    {
      std::lock_guard lk(mu);
      todo.swap(tasks);
    }
    for (auto& t : todo) guarded("posted task", t);
    bool want_write = false;
    {
      std::lock_guard lk(mu);
      want_write = open && !outq.empty();
    }
    if (want_write && wsi) want_writable(wsi);
    if (stop_requested && !stopping) begin_stop();
  }

  // ---- frames

  bool enqueue_frame(const Message& m, bool front) {
    Bytes payload;
    try {
      payload = encode(m);
    } catch (...) {
      log(3, "encode failed");
      return false;
    }
    Outgoing o;
    o.buf.resize(LWS_PRE + payload.size());
    std::memcpy(o.buf.data() + LWS_PRE, payload.data(), payload.size());
    {
      std::lock_guard lk(mu);
      if (!open) return false;
      if (!front && out_bytes + payload.size() > cfg.max_queued_bytes) return false;
      out_bytes += payload.size();
      if (front)
        outq.push_front(std::move(o));
      else
        outq.push_back(std::move(o));
    }
    if (on_loop_thread()) {
      if (wsi) want_writable(wsi);
    } else {
      wake();
    }
    return true;
  }

  int write_one(lws* w) {
    if (closing && close_sent) return 0;
    Outgoing o;
    bool more = false;
    {
      std::lock_guard lk(mu);
      if (outq.empty()) return 0;
      o = std::move(outq.front());
      outq.pop_front();
      if (!o.close) out_bytes -= o.buf.size() - LWS_PRE;
      more = !outq.empty();
    }
    if (o.close) return write_close(w, o.code, o.reason);
    const std::size_t n = o.buf.size() - LWS_PRE;
    const int wrote = lws_write(w, o.buf.data() + LWS_PRE, n, LWS_WRITE_BINARY);
    if (wrote < 0 || static_cast<std::size_t>(wrote) < n) {
      log(4, "write failed; dropping the connection");
      return -1;
    }
    if (more) {
      want_writable(w);
    } else if (h.on_queue_empty) {
      guarded("on_queue_empty", [&] { h.on_queue_empty(); });
    }
    return 0;
  }

  // Writes the close frame ourselves and waits for the peer's answer (lws then
  // closes the socket), bounded by a timeout. Returning -1 after lws_close_reason()
  // is not enough on Debian's lws 4.1.6: built with _DEBUG on libuv it closes every
  // wsi twice in a row ("uv repeat test"), and the second call kills the socket
  // before the close frame is sent.
  int write_close(lws* w, std::uint16_t code, const std::string& reason) {
    close_code = code;
    close_reason = reason;
    closing = true;
    close_sent = true;
    unsigned char buf[LWS_PRE + 125];
    const std::size_t rlen = std::min<std::size_t>(reason.size(), 123);
    buf[LWS_PRE] = static_cast<unsigned char>(code >> 8);
    buf[LWS_PRE + 1] = static_cast<unsigned char>(code & 0xff);
    std::memcpy(buf + LWS_PRE + 2, reason.data(), rlen);
    log(6, "closing connection " + std::to_string(code) + " " + reason);
    // 4 is LWS_WRITE_CLOSE, internal to lws 4.1 but the value its own close path uses.
    if (lws_write(w, buf + LWS_PRE, 2 + rlen, static_cast<lws_write_protocol>(4)) < 0) return -1;
    lws_set_timeout(w, PENDING_TIMEOUT_CLOSE_ACK, 3);
    return 0;
  }

  // Close from inside a receive callback: the close frame goes out before anything
  // still queued, and nothing more is read from this connection.
  int close_now(lws* w, CloseCode code, const std::string& reason) {
    {
      std::lock_guard lk(mu);
      Outgoing o;
      o.close = true;
      o.code = static_cast<std::uint16_t>(code);
      o.reason = reason;
      outq.push_front(std::move(o));
    }
    closing = true;
    log(4, "closing connection " + std::to_string(static_cast<int>(code)) + " " + reason);
    want_writable(w);
    return 0;
  }

  void queue_close(CloseCode code, std::string reason) {
    {
      std::lock_guard lk(mu);
      if (!open) return;
      Outgoing o;
      o.close = true;
      o.code = static_cast<std::uint16_t>(code);
      o.reason = std::move(reason);
      outq.push_back(std::move(o));
    }
    if (on_loop_thread()) {
      if (wsi) want_writable(wsi);
    } else {
      wake();
    }
  }

  int on_receive(lws* w, const void* in, std::size_t len) {
    if (closing) return 0;
    if (rx.size() + len > cfg.max_frame_bytes)
      return close_now(w, CloseCode::message_too_big,
                       "frame over " + std::to_string(cfg.max_frame_bytes) + " bytes");
    const auto* p = static_cast<const std::uint8_t*>(in);
    rx.insert(rx.end(), p, p + len);
    if (!lws_is_final_fragment(w) || lws_remaining_packet_payload(w) != 0) return 0;
    Bytes frame;
    frame.swap(rx);
    return dispatch(w, frame);
  }

  int dispatch(lws* w, const Bytes& frame) {
    auto decoded = decode(frame, DecodeOptions{cfg.max_frame_bytes});
    if (!decoded) {
      const Error& e = decoded.error();
      if (e.code == Errc::unknown_type) {
        if (cfg.strictness == Strictness::strict)
          return close_now(w, CloseCode::unknown_type, e.detail);
        log(4, "ignoring frame of unknown type: " + e.detail);
        return 0;
      }
      if (e.code == Errc::unsupported_version)
        return close_now(w, CloseCode::unsupported_version, e.detail);
      // A command the broker sent wrongly is refused (NACK malformed) by the
      // owner, and the connection goes on; anything else undecodable ends it.
      if (h.on_malformed_command) {
        if (const std::optional<CommandPeek> peek = peek_command(frame, cfg.max_frame_bytes)) {
          const std::string why = describe(e);
          guarded("on_malformed_command", [&] { h.on_malformed_command(*peek, why); });
          return 0;
        }
      }
      return close_now(w, CloseCode::malformed, "undecodable frame: " + describe(e));
    }
    Message& m = *decoded;
    if (auto* wel = std::get_if<msg::Welcome>(&m)) {
      st = SessionState::welcomed;
      backoff.reset();
      log(7, "welcome broker=" + wel->broker_id + " session=" + wel->session_id);
      if (h.on_welcome) guarded("on_welcome", [&] { h.on_welcome(*wel); });
    } else if (auto* cmd = std::get_if<msg::Command>(&m)) {
      if (h.on_command) guarded("on_command", [&] { h.on_command(*cmd); });
    } else if (auto* can = std::get_if<msg::Cancel>(&m)) {
      if (h.on_cancel) guarded("on_cancel", [&] { h.on_cancel(*can); });
    } else if (auto* ga = std::get_if<msg::Goaway>(&m)) {
      backoff.override_next(std::chrono::milliseconds(ga->reconnect_after_ms));
      log(7, "goaway reason=" + ga->reason + " reconnect_after_ms=" +
                 std::to_string(ga->reconnect_after_ms));
      if (h.on_goaway) guarded("on_goaway", [&] { h.on_goaway(*ga); });
      // Leave after whatever is queued (results) has been written.
      queue_close(CloseCode::going_away, "goaway: " + ga->reason);
    } else {
      if (h.on_message) guarded("on_message", [&] { h.on_message(m); });
    }
    return 0;
  }

  int callback(lws* w, lws_callback_reasons reason, void* in, std::size_t len) {
    switch (reason) {
      case LWS_CALLBACK_ESTABLISHED_CLIENT_HTTP: {
        const unsigned status = lws_http_client_http_response(w);
        if (status == 503) {
          char value[64] = {0};
          std::optional<std::chrono::milliseconds> after;
          if (lws_hdr_copy(w, value, sizeof value, WSI_TOKEN_HTTP_RETRY_AFTER) > 0)
            after = parse_retry_after(value);
          if (after) backoff.override_next(*after);
          log(4, std::string("broker busy (HTTP 503), Retry-After ") +
                     (after ? std::to_string(after->count()) + "ms" : std::string("absent")));
        } else if (status != 0 && status != 101) {
          // Not the broker's own refusal: something between the rig and the broker
          // (a reverse proxy whose header buffers are too small, a load balancer
          // answering for a broker that is not there, a URL path it does not route)
          // answered the upgrade. Said once per attempt with the status line, so the
          // log shows why the rig keeps reconnecting; a 4xx will not go away by
          // itself, so the next attempt waits the backoff's cap.
          char line[128] = {0};
          const int got = lws_hdr_copy(w, line, sizeof line, WSI_TOKEN_HTTP);
          const std::string status_line = got > 0 ? std::string(line) : std::to_string(status);
          const bool client_error = status >= 400 && status < 500 && status != 408 && status != 429;
          if (client_error) backoff.override_next(backoff.policy().cap);
          log(3, "upgrade refused by HTTP " + status_line + " from " + urls[url_index].text +
                     (client_error ? " (a proxy or the broker refuses this request; next attempt in " +
                                         std::to_string(backoff.policy().cap.count()) + "ms)"
                                   : std::string()));
        }
        return 0;
      }
      case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
        if (bearer.empty() || !in) return 0;
        auto** p = static_cast<unsigned char**>(in);
        const std::string value = "Bearer " + bearer;
        if (lws_add_http_header_by_token(w, WSI_TOKEN_HTTP_AUTHORIZATION,
                                         reinterpret_cast<const unsigned char*>(value.c_str()),
                                         static_cast<int>(value.size()), p, *p + len) != 0) {
          log(3, "the bearer token (" + std::to_string(bearer.size()) + " bytes) does not fit the upgrade request");
          return -1;
        }
        return 0;
      }
      case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
        const std::string why = in && len ? std::string(static_cast<const char*>(in), strnlen(static_cast<const char*>(in), len))
                                : in ? std::string(static_cast<const char*>(in)) : std::string("unknown error");
        log(4, "connection to " + urls[url_index].text + " failed: " + why);
        connection_lost(0, why);
        return 0;
      }
      case LWS_CALLBACK_CLIENT_ESTABLISHED: {
        wsi = w;
        closing = false;
        close_sent = false;
        rx.clear();
        st = SessionState::open;
        {
          std::lock_guard lk(mu);
          open = true;
          outq.clear();
          out_bytes = 0;
        }
        log(6, "connected to " + urls[url_index].text);
        write_requested = false;
        if (!enqueue_frame(Message{cfg.hello}, true)) return -1;
        want_writable(w);
        return 0;
      }
      case LWS_CALLBACK_CLIENT_RECEIVE:
        return on_receive(w, in, len);
      case LWS_CALLBACK_CLIENT_WRITEABLE:
        write_requested = false;
        return write_one(w);
      case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE: {
        if (in && len >= 2) {
          const auto* p = static_cast<const std::uint8_t*>(in);
          close_code = static_cast<std::uint16_t>((p[0] << 8) | p[1]);
          close_reason.assign(reinterpret_cast<const char*>(p + 2), len - 2);
        }
        return 0;
      }
      case LWS_CALLBACK_CLIENT_CLOSED:
        connection_lost(close_code ? close_code : kAbnormalClose, close_reason);
        return 0;
      case LWS_CALLBACK_CLOSED_CLIENT_HTTP:
        if (attempt_live && wsi == nullptr) connection_lost(0, "http connection closed");
        return 0;
      case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        drain_cross_thread();
        return 0;
      default:
        return 0;
    }
  }
};

lws_protocols ClientSession::Impl::protocols[2] = {
    {kSubprotocol, &ClientSession::Impl::lws_cb, 0, 0, 0, nullptr, 0},
    {nullptr, nullptr, 0, 0, 0, nullptr, 0},
};

int ClientSession::Impl::lws_cb(lws* wsi, lws_callback_reasons reason, void* user, void* in,
                                std::size_t len) {
  lws_context* ctx = lws_get_context(wsi);
  auto* self = ctx ? static_cast<Impl*>(lws_context_user(ctx)) : nullptr;
  if (!self) return 0;
  if (reason == LWS_CALLBACK_OPENSSL_LOAD_EXTRA_CLIENT_VERIFY_CERTS) {  // user = the client SSL_CTX
    self->tls_sessions.attach(static_cast<SSL_CTX*>(user),
                              [self](int level, const std::string& line) { self->log(level, line); });
    if (!self->cfg.tls_session_file.empty() && !self->cfg.cert_path.empty())
      self->tls_sessions.persist_to(self->cfg.tls_session_file, self->cfg.cert_path);
    return 0;
  }
  try {
    return self->callback(wsi, reason, in, len);
  } catch (...) {
    // Never let an exception unwind through lws; drop this connection instead.
    return reason == LWS_CALLBACK_EVENT_WAIT_CANCELLED ? 0 : -1;
  }
}

ClientSession::ClientSession(ClientSessionConfig config, ClientSessionHandlers handlers)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(handlers))) {}

ClientSession::~ClientSession() = default;

Expected<void> ClientSession::validate() const {
  const auto& c = impl_->cfg;
  if (c.broker_urls.empty()) return make_error(Errc::invalid_argument, "no broker URL");
  if (c.hello.rig_id.empty()) return make_error(Errc::invalid_argument, "HELLO has no rig_id");
  bool any_tls = false;
  for (const auto& text : c.broker_urls) {
    auto u = parse_broker_url(text);
    if (!u) return u.error();
    if (!u->tls) {
      if (!c.allow_plain)
        return make_error(Errc::invalid_argument,
                          "'" + text + "': plain ws:// needs allow_plain (and a loopback address)");
      if (!is_loopback_host(u->host))
        return make_error(Errc::invalid_argument,
                          "'" + text + "': plain ws:// is only allowed to a loopback address");
    } else {
      any_tls = true;
    }
  }
  if (any_tls) {
    if (c.ca_path.empty())
      return make_error(Errc::invalid_argument, "wss:// needs a CA file to check the broker");
    if (c.cert_path.empty() != c.key_path.empty())
      return make_error(Errc::invalid_argument, "give both the client certificate and its key");
  }
  if (c.max_frame_bytes < 64) return make_error(Errc::invalid_argument, "max_frame_bytes too small");
  return {};
}

int ClientSession::run() {
  Impl& s = *impl_;
  if (auto ok = validate(); !ok) {
    s.log(3, "bad session configuration: " + ok.error().detail);
    s.st = SessionState::stopped;
    return 2;
  }
  s.urls.clear();
  bool any_tls = false;
  for (const auto& text : s.cfg.broker_urls) {
    s.urls.push_back(*parse_broker_url(text));
    any_tls = any_tls || s.urls.back().tls;
  }
  if (s.stop_requested) {
    s.st = SessionState::stopped;
    return 0;
  }
  s.loop_thread = std::this_thread::get_id();
  if (uv_loop_init(&s.loop) != 0) {
    s.log(3, "uv_loop_init failed");
    return 1;
  }
  lws_set_log_level(LLL_ERR | LLL_WARN, nullptr);

  void* loops[1] = {&s.loop};
  lws_context_creation_info info{};
  info.port = CONTEXT_PORT_NO_LISTEN;
  info.protocols = Impl::protocols;
  info.options = LWS_SERVER_OPTION_LIBUV;
  info.foreign_loops = loops;
  info.user = &s;
  info.gid = -1;
  info.uid = -1;
  info.timeout_secs = 10;
  info.connect_timeout_secs = 10;
  if (any_tls) {
    info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    if (!s.cfg.cert_path.empty()) info.client_ssl_cert_filepath = s.cfg.cert_path.c_str();
    if (!s.cfg.key_path.empty()) info.client_ssl_private_key_filepath = s.cfg.key_path.c_str();
    info.client_ssl_ca_filepath = s.cfg.ca_path.c_str();
  }
  lws_context* ctx = lws_create_context(&info);
  if (!ctx) {
    s.log(3, "cannot create the libwebsockets context (TLS files unusable, or the libuv "
             "event-lib plugin libwebsockets-evlib_uv.so is missing)");
    uv_loop_close(&s.loop);
    s.st = SessionState::stopped;
    return 1;
  }
  {
    std::lock_guard lk(s.mu);
    s.ctx = ctx;
  }
  s.stopping = false;
  // First attempt from inside the loop; tasks posted before run() are picked up too.
  lws_sul_schedule(ctx, 0, &s.retry_timer.sul, &Impl::retry_cb, 0);
  lws_cancel_service(ctx);

  uv_run(&s.loop, UV_RUN_DEFAULT);

  s.stopping = true;
  lws_sul_cancel(&s.retry_timer.sul);
  lws_sul_cancel(&s.stop_timer.sul);
  {
    std::lock_guard lk(s.mu);
    s.ctx = nullptr;
    s.open = false;
  }
  lws_context_destroy(ctx);
  // lws closes its libuv handles asynchronously: let them finish, then close the loop.
  uv_run(&s.loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&s.loop) != 0) {
    uv_walk(
        &s.loop,
        [](uv_handle_t* handle, void*) {
          if (!uv_is_closing(handle)) uv_close(handle, nullptr);
        },
        nullptr);
    uv_run(&s.loop, UV_RUN_DEFAULT);
    uv_loop_close(&s.loop);
  }
  s.st = SessionState::stopped;
  return 0;
}

void ClientSession::stop() {
  impl_->stop_requested = true;
  impl_->wake();
}

bool ClientSession::send(const Message& m) { return impl_->enqueue_frame(m, false); }

void ClientSession::post(std::function<void()> task) {
  {
    std::lock_guard lk(impl_->mu);
    impl_->tasks.push_back(std::move(task));
  }
  impl_->wake();
}

void ClientSession::reconnect(CloseCode code, std::string reason) {
  impl_->queue_close(code, std::move(reason));
}

SessionState ClientSession::state() const noexcept { return impl_->st.load(); }

std::string ClientSession::current_url() const {
  std::lock_guard lk(impl_->mu);
  return impl_->cur_url;
}

}  // namespace fleetlink
