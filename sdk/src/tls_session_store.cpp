#include "tls_session_store.hpp"

namespace fleetlink::detail {

namespace {

// Our slot in the SSL_CTX's ex_data (libwebsockets uses its own).
int store_index() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

}  // namespace

TlsSessionStore::~TlsSessionStore() {
  for (auto& [peer, session] : sessions_) SSL_SESSION_free(session);
}

void TlsSessionStore::attach(SSL_CTX* ctx, Log log) {
  if (ctx == nullptr || store_index() < 0) return;
  log_ = std::move(log);
  SSL_CTX_set_ex_data(ctx, store_index(), this);
  // Client-side caching only through on_new_session: OpenSSL's internal store is
  // never consulted by a client anyway.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx, &TlsSessionStore::on_new_session);
  SSL_CTX_set_info_callback(ctx, &TlsSessionStore::on_info);
}

void TlsSessionStore::forget(const std::string& peer) {
  auto it = sessions_.find(peer);
  if (it == sessions_.end()) return;
  SSL_SESSION_free(it->second);
  sessions_.erase(it);
}

TlsSessionStore* TlsSessionStore::of(const SSL* ssl) {
  SSL_CTX* ctx = ssl ? SSL_get_SSL_CTX(ssl) : nullptr;
  return ctx ? static_cast<TlsSessionStore*>(SSL_CTX_get_ex_data(ctx, store_index())) : nullptr;
}

int TlsSessionStore::on_new_session(SSL* ssl, SSL_SESSION* session) {
  TlsSessionStore* self = of(ssl);
  if (self == nullptr || self->peer_.empty()) return 0;
  // A copy: OpenSSL marks the connection's own session unusable when that connection
  // ends in an error, which is exactly how a connection to a killed broker ends.
  SSL_SESSION* copy = SSL_SESSION_dup(session);
  if (copy == nullptr) return 0;
  SSL_SESSION*& kept = self->sessions_[self->peer_];
  SSL_SESSION_free(kept);
  kept = copy;
  return 0;  // OpenSSL keeps its own reference
}

void TlsSessionStore::on_info(const SSL* cssl, int where, int /*ret*/) {
  TlsSessionStore* self = of(cssl);
  if (self == nullptr) return;
  // OpenSSL hands the callback a const SSL; the handshake has not written its
  // ClientHello yet at HANDSHAKE_START, which is when a session may still be set.
  SSL* ssl = const_cast<SSL*>(cssl);
  if ((where & SSL_CB_HANDSHAKE_START) != 0 && SSL_is_server(ssl) == 0 && SSL_in_before(ssl) != 0) {
    auto it = self->sessions_.find(self->peer_);
    if (it == self->sessions_.end()) return;
    // Offer a copy again: OpenSSL 3.0 marks a TLS 1.3 session it resumed as not
    // resumable, while the broker lets a rig reuse a ticket until it renews it.
    SSL_SESSION* offer = SSL_SESSION_dup(it->second);
    if (offer == nullptr) return;
    if (SSL_SESSION_is_resumable(offer) == 1) SSL_set_session(ssl, offer);
    SSL_SESSION_free(offer);
  } else if ((where & SSL_CB_HANDSHAKE_DONE) != 0 && SSL_is_server(ssl) == 0 && self->log_) {
    self->log_(7, SSL_session_reused(ssl) == 1 ? "tls session resumed with " + self->peer_
                                               : "tls full handshake with " + self->peer_);
  }
}

}  // namespace fleetlink::detail
