#include "net/rig_protocol.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <strings.h>

#include <cstring>
#include <ctime>
#include <new>

#include "common/log.hpp"
#include "net/tls_identity.hpp"

namespace fleetlink::broker::net {

namespace {

// What lws allocates per rig connection (zeroed): the session, constructed at
// ESTABLISHED, and a mark that it was, so that callbacks before or after find none.
// The mark goes after the session, in what would otherwise be the allocation's
// tail padding: 216 + 4 bytes fit malloc's 224-byte size class (docs/PERFORMANCE.md).
struct RigSlot {
  static constexpr std::uint32_t kMagic = 0xF1EE7C0Au;
  alignas(RigSession) unsigned char storage[sizeof(RigSession)];
  std::uint32_t magic;
  RigSession* session() noexcept { return std::launder(reinterpret_cast<RigSession*>(storage)); }
};
static_assert(sizeof(RigSlot) <= 224, "the rig slot left malloc's 224-byte size class");

RigSession* session_of(void* user) {
  auto* slot = static_cast<RigSlot*>(user);
  return slot && slot->magic == RigSlot::kMagic ? slot->session() : nullptr;
}

lws* wsi_of(const RigSession& s) { return static_cast<lws*>(s.handle); }

// The SSL's ex_data slot for the trust generation its client certificate was verified under.
int trust_generation_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

std::string peer_of(lws* wsi) {
  const int fd = lws_get_socket_fd(wsi);
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

// What the upgrade's Authorization header grants (null: it has none). A token
// that is refused is still a grant, with the problem: the core closes the
// connection 4401 at its HELLO with that reason (its rig_id is known then).
std::unique_ptr<RigGrant> grant_of(lws* wsi, const JwtVerifier& verifier) {
  const int n = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_AUTHORIZATION);
  if (n <= 0) return nullptr;
  auto grant = std::make_unique<RigGrant>();
  if (static_cast<std::size_t>(n) > JwtVerifier::kMaxTokenBytes + 16) {
    grant->problem = "Authorization header longer than " + std::to_string(JwtVerifier::kMaxTokenBytes) + " bytes";
    return grant;
  }
  std::string value(static_cast<std::size_t>(n) + 1, '\0');
  const int got = lws_hdr_copy(wsi, value.data(), n + 1, WSI_TOKEN_HTTP_AUTHORIZATION);
  value.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
  if (value.size() < 8 || strncasecmp(value.c_str(), "Bearer ", 7) != 0) {
    grant->problem = "Authorization is not \"Bearer <token>\"";
    return grant;
  }
  std::string_view token(value);
  token.remove_prefix(7);
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
  Expected<RigTokenClaims> claims = verifier.verify(token, now);
  if (!claims) {
    grant->problem = claims.error().detail;
    return grant;
  }
  grant->subject = std::move(claims->subject);
  grant->kinds = std::move(claims->kinds);
  // The verifier let it in within the leeway: its grant lasts as long.
  grant->expires_at_ms = static_cast<std::uint64_t>(claims->expires_at_s + verifier.rules().leeway_s) * 1000;
  return grant;
}

}  // namespace

lws_protocols* RigProtocol::protocols(std::size_t max_frame_bytes, std::size_t rx_buffer_bytes) {
  protocols_[0] = {kSubprotocol, &RigProtocol::callback, sizeof(RigSlot), rx_buffer_bytes, 0, nullptr,
                   max_frame_bytes + 64};
  protocols_[1] = {nullptr, nullptr, 0, 0, 0, nullptr, 0};
  return protocols_;
}

int RigProtocol::callback(lws* wsi, lws_callback_reasons reason, void* user, void* in, std::size_t len) {
  lws_context* ctx = lws_get_context(wsi);
  auto* self = ctx ? static_cast<RigProtocol*>(lws_context_user(ctx)) : nullptr;
  if (!self || !self->core_) return lws_callback_http_dummy(wsi, reason, user, in, len);
  return self->on_callback(wsi, reason, user, in, len);
}

int RigProtocol::on_callback(lws* wsi, lws_callback_reasons reason, void* user, void* in, std::size_t len) {
  switch (reason) {
    case LWS_CALLBACK_OPENSSL_PERFORM_CLIENT_CERT_VERIFICATION:
      // in = the SSL: it was verified under the trust in use now (see open_session).
      if (in) SSL_set_ex_data(static_cast<SSL*>(in), trust_generation_index(), reinterpret_cast<void*>(trust_generation_));
      return verify_client_certificate(static_cast<X509_STORE_CTX*>(user), static_cast<int>(len));
    case LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS:
      // user = the vhost's SSL_CTX: no session cache; tickets only with a key file (tls_tickets.hpp);
      // the CAs, CRLs, certificate and key the broker loaded (rig_trust.hpp), kept for reloads.
      if (auto* ssl_ctx = static_cast<SSL_CTX*>(user)) {
        if (auto r = configure_rig_ssl_ctx(ssl_ctx, tls_); !r) {
          FL_ERROR("rig TLS setup: %s", r.error().detail.c_str());
          return 1;
        }
        if (trust_) {
          if (auto r = install_rig_trust(ssl_ctx, *trust_); !r) {
            FL_ERROR("rig TLS setup: %s", r.error().detail.c_str());
            return 1;
          }
          ssl_ctx_ = ssl_ctx;
        }
      }
      return 0;
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
      return gate_->on_upgrade(wsi);
    case LWS_CALLBACK_HTTP: {
      const std::string_view uri(static_cast<const char*>(in), len);
      if (artifacts_ && ArtifactEndpoint::is_artifact_path(uri)) {
        gate_->handshake_finished(wsi);  // an upload is not a handshake: it may take minutes
        return artifacts_->on_request(wsi, uri);
      }
      // Plain HTTP to the rig port: nothing here but the WebSocket endpoint and artifacts.
      lws_return_http_status(wsi, HTTP_STATUS_NOT_FOUND, "WebSocket endpoint /agent and /v1/artifacts/ only");
      return -1;
    }
    case LWS_CALLBACK_HTTP_BODY:
      return artifacts_ && artifacts_->owns(wsi) ? artifacts_->on_body(wsi, static_cast<const char*>(in), len) : -1;
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
      return artifacts_ && artifacts_->owns(wsi) ? artifacts_->on_body_complete(wsi) : -1;
    case LWS_CALLBACK_HTTP_WRITEABLE:
      if (artifacts_ && artifacts_->owns(wsi)) return artifacts_->on_writeable(wsi);
      break;
    case LWS_CALLBACK_CLOSED_HTTP:
      if (artifacts_) artifacts_->on_closed(wsi);
      break;
    case LWS_CALLBACK_WSI_DESTROY:
      if (artifacts_) artifacts_->on_closed(wsi);
      gate_->handshake_finished(wsi);  // a handshake or upgrade that failed or was refused
      break;
    case LWS_CALLBACK_ESTABLISHED:
      gate_->handshake_finished(wsi);
      if (!user) return -1;
      open_session(wsi, user);
      return 0;
    case LWS_CALLBACK_RECEIVE: {
      RigSession* s = session_of(user);
      if (!s) return -1;
      core_->on_data(*s, {static_cast<const std::uint8_t*>(in), len}, lws_remaining_packet_payload(wsi),
                     lws_is_final_fragment(wsi) != 0);
      // A close asked for meanwhile goes the polite way (close_politely): returning
      // -1 here would kill the socket at once, and a peer still sending would get
      // a TCP reset instead of our close code.
      return 0;
    }
    case LWS_CALLBACK_RECEIVE_PONG:
      if (RigSession* s = session_of(user)) core_->on_pong(*s);
      return 0;
    case LWS_CALLBACK_SERVER_WRITEABLE: {
      RigSession* s = session_of(user);
      if (!s) return 0;
      return write_next(*s) == WriteStatus::written ? 0 : -1;
    }
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE: {
      RigSession* s = session_of(user);
      if (s && in && len >= 2) {
        auto* b = static_cast<const std::uint8_t*>(in);
        const auto code = static_cast<std::uint16_t>((b[0] << 8) | b[1]);
        core_->on_peer_close(*s, code);
        FL_DEBUG("peer closed rig=%s code=%u reason=%.*s", s->rig_id.c_str(), code,
                 static_cast<int>(std::min<std::size_t>(len - 2, 123)), reinterpret_cast<const char*>(b + 2));
      }
      return 0;
    }
    case LWS_CALLBACK_CLOSED: {
      auto* slot = static_cast<RigSlot*>(user);
      if (RigSession* s = session_of(user)) {
        core_->on_closed(*s);
        slot->magic = 0;
        s->~RigSession();
      }
      return 0;
    }
    default:
      break;
  }
  return lws_callback_http_dummy(wsi, reason, user, in, len);
}

void RigProtocol::open_session(lws* wsi, void* user) {
  auto* slot = static_cast<RigSlot*>(user);
  // Not lws_get_vhost(wsi) == the plain vhost: on the upgrade lws 4.1 re-binds the wsi to a
  // vhost chosen by port (seen: the TLS one), so plain rigs failed 4401. The socket itself tells.
  const bool tls = lws_is_ssl(wsi) != 0;
  const Clock& clock = core_->clock();
  auto* s = new (slot->storage) RigSession(wsi, tls, core_->settings().rig_burst, clock.mono_ms(), clock.wall_ms());
  slot->magic = RigSlot::kMagic;
  SSL* ssl = tls ? lws_get_ssl(wsi) : nullptr;
  if (ssl) {
    // Whether session tickets work (--tls-ticket-key-file): after a restart nearly every rig should resume.
    observer_.tls_established(SSL_session_reused(ssl) != 0);
  }
  if (tokens_) s->set_grant(grant_of(wsi, *tokens_));
  FL_DEBUG("connection open peer=%s%s%s", peer_of(wsi).c_str(), tls ? "" : " (plain ws)",
           !s->grant() ? "" : s->grant()->problem.empty() ? " (token)" : " (refused token)");
  core_->on_open(*s);
  // A handshake that straddled a reload (verified, or its ticket issued, under the
  // trust before it) is not among the connections the reload re-checks: check it here.
  if (ssl && trust_ && verified_under_older_trust(ssl)) {
    if (std::optional<std::string> why = peer_refusal(ssl, *trust_)) core_->distrust(*s, *why);
  }
}

bool RigProtocol::verified_under_older_trust(SSL* ssl) const {
  if (SSL_session_reused(ssl)) {
    // No verification on a resumption: the ticket's session carries the session id
    // context (the digest of the CA bundle and CRLs) it was issued under.
    const SSL_SESSION* session = SSL_get0_session(ssl);
    unsigned int len = 0;
    const unsigned char* ctx = session ? SSL_SESSION_get0_id_context(session, &len) : nullptr;
    const RigTrust::Digest& now = trust_->session_context();
    return ctx == nullptr || len != now.size() || std::memcmp(ctx, now.data(), len) != 0;
  }
  const auto generation = reinterpret_cast<std::uintptr_t>(SSL_get_ex_data(ssl, trust_generation_index()));
  return generation != trust_generation_;
}

Expected<void> RigProtocol::replace_trust(std::shared_ptr<const RigTrust> trust) {
  if (!trust) return make_error(Errc::invalid_argument, "no trust to install");
  if (ssl_ctx_ == nullptr) return make_error(Errc::io, "the rig listener's TLS context is not there");
  if (auto r = install_rig_trust(ssl_ctx_, *trust); !r) {
    if (trust_) (void)install_rig_trust(ssl_ctx_, *trust_);
    return r;
  }
  trust_ = std::move(trust);
  ++trust_generation_;
  return {};
}

std::optional<std::string> RigProtocol::certificate_refusal(const RigSession& s) const {
  if (!trust_ || !s.authenticated) return std::nullopt;
  SSL* ssl = lws_get_ssl(wsi_of(s));
  if (!ssl) return std::nullopt;
  return peer_refusal(ssl, *trust_);
}

WriteStatus RigProtocol::write_next(RigSession& s) {
  lws* wsi = wsi_of(s);
  if (std::optional<Outgoing> out = core_->next_frame(s)) {
    if (out->kind == OutboundKind::ping) {
      // A non-empty payload on purpose: lws 4.1.6 drops zero-length PONGs before
      // LWS_CALLBACK_RECEIVE_PONG, so an empty PING's answer would never be seen.
      std::uint8_t stamp[sizeof out->ping_stamp];
      std::memcpy(stamp, &out->ping_stamp, sizeof stamp);
      if (s.authenticated) refresh_ticket_if_due(lws_get_ssl(wsi), tls_, std::time(nullptr));  // rides on this write
      if (write_with_pre(wsi, std::span<const std::uint8_t>(stamp, sizeof stamp), LWS_WRITE_PING) !=
          WriteStatus::written)
        return WriteStatus::failed;
    } else {
      encode_to(out->message, tx_.start());
      if (write_prepared(wsi, tx_, LWS_WRITE_BINARY) != WriteStatus::written) return WriteStatus::failed;
    }
    observer_.frame_written(s, out->kind);
  }
  if (core_->has_more_to_write(s)) lws_callback_on_writable(wsi);
  return WriteStatus::written;
}

void RigProtocol::write_soon(RigSession& s) { lws_callback_on_writable(wsi_of(s)); }

void RigProtocol::write_now(RigSession& s) {
  // The writeable callback is the single writer; a frame that finds nothing lws
  // still holds from a partial write is written at once instead: one send()
  // where arming POLLOUT would cost two epoll_ctl() and a turn of the loop.
  // write_next() takes the most urgent frame waiting, so the order on the wire
  // is the same either way; whatever else waits, or whatever the socket does
  // not take, goes out from the writeable callback as before.
  lws* wsi = wsi_of(s);
  if (s.phase != SessionPhase::live || lws_partial_buffered(wsi)) {
    lws_callback_on_writable(wsi);
    return;
  }
  observer_.written_directly();
  if (write_next(s) != WriteStatus::written) {
    // Possibly called from another connection's callback (or from this one's
    // receive, for a WELCOME), which cannot return -1 for it: lws is asked to
    // drop it asynchronously (what it had not acknowledged waits for its next
    // connection, as for any broken one).
    observer_.write_failed(s);
    lws_set_timeout(wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
  }
}

void RigProtocol::close(RigSession& s, CloseCode code, std::string_view reason) {
  close_politely(wsi_of(s), static_cast<std::uint16_t>(code), reason);
}

void RigProtocol::pause_reading(RigSession& s) {
  lws_rx_flow_control(wsi_of(s), 0);
  if (start_resume_timer_) start_resume_timer_();
}

void RigProtocol::resume_reading(RigSession& s) { lws_rx_flow_control(wsi_of(s), 1); }

void RigProtocol::stop_accepting() {
  if (gate_) gate_->close();
}

std::string RigProtocol::peer_address(const RigSession& s) const { return peer_of(wsi_of(s)); }

std::optional<CertIdentity> RigProtocol::peer_identity(const RigSession& s) const {
  return s.authenticated ? net::peer_identity(wsi_of(s)) : std::nullopt;
}

}  // namespace fleetlink::broker::net
