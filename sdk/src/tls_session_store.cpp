#include "tls_session_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>
#include <vector>

#include <openssl/evp.h>

#include "tls_session_file.hpp"

namespace fleetlink::detail {

namespace {

// Small files only (a certificate, the session file): nullopt when unreadable.
std::optional<std::string> read_small_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string bytes;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || bytes.size() > (1u << 20)) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return bytes;
}

std::string sha256_hex_of_file(const std::string& path) {
  const auto file = read_small_file(path);
  if (!file) return {};
  const std::string& bytes = *file;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr) != 1) return {};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

bool still_usable(const SSL_SESSION* s, std::time_t now) {
  return SSL_SESSION_is_resumable(s) == 1 &&
         static_cast<std::time_t>(SSL_SESSION_get_time(s)) + static_cast<std::time_t>(SSL_SESSION_get_timeout(s)) > now;
}

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

void TlsSessionStore::persist_to(std::filesystem::path file, const std::string& client_cert_path) {
  cert_sha256_ = sha256_hex_of_file(client_cert_path);
  if (cert_sha256_.empty()) {
    log(4, "tls sessions kept in memory only: cannot read " + client_cert_path);
    return;
  }
  file_ = std::move(file);
  const auto contents = read_small_file(file_.string());
  if (!contents) return;  // none yet
  const std::string& text = *contents;
  std::size_t skipped = 0;
  const std::time_t now = std::time(nullptr);
  std::size_t kept = 0;
  for (const StoredSession& stored : parse_session_file(text, cert_sha256_, &skipped)) {
    const unsigned char* p = stored.der.data();
    SSL_SESSION* session = d2i_SSL_SESSION(nullptr, &p, static_cast<long>(stored.der.size()));
    if (session == nullptr || !still_usable(session, now)) {
      SSL_SESSION_free(session);
      ++skipped;
      continue;
    }
    SSL_SESSION*& slot = sessions_[stored.peer];
    SSL_SESSION_free(slot);
    slot = session;
    ++kept;
  }
  log(7, "tls sessions from " + file_.string() + ": " + std::to_string(kept) + " kept, " +
             std::to_string(skipped) + " dropped (expired, another certificate, or unreadable)");
}

void TlsSessionStore::save() {
  if (file_.empty()) return;
  std::vector<StoredSession> out;
  const std::time_t now = std::time(nullptr);
  for (const auto& [peer, session] : sessions_) {
    if (!still_usable(session, now)) continue;
    const int n = i2d_SSL_SESSION(session, nullptr);
    if (n <= 0) continue;
    StoredSession s{peer, std::vector<unsigned char>(static_cast<std::size_t>(n))};
    unsigned char* p = s.der.data();
    if (i2d_SSL_SESSION(session, &p) != n) continue;
    out.push_back(std::move(s));
  }
  const std::string text = format_session_file(out, cert_sha256_);
  // The sessions' secrets resume a connection as this rig: owner-only, and replaced
  // in one rename so that a crash never leaves half a file.
  const std::filesystem::path tmp = file_.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  bool ok = fd >= 0 && ::fchmod(fd, 0600) == 0;  // a leftover .tmp keeps its old mode otherwise
  std::string why = ok ? "" : std::strerror(errno);
  for (std::size_t done = 0; ok && done < text.size();) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      ok = false;
      why = std::strerror(errno);
      break;
    }
    done += static_cast<std::size_t>(w);
  }
  if (fd >= 0 && ::close(fd) != 0 && ok) {
    ok = false;
    why = std::strerror(errno);
  }
  if (ok && std::rename(tmp.c_str(), file_.c_str()) != 0) {
    ok = false;
    why = std::strerror(errno);
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    if (!save_failed_) log(4, "cannot keep tls sessions in " + file_.string() + ": " + why);
    save_failed_ = true;
    return;
  }
  save_failed_ = false;
}

void TlsSessionStore::forget(const std::string& peer) {
  auto it = sessions_.find(peer);
  if (it == sessions_.end()) return;
  SSL_SESSION_free(it->second);
  sessions_.erase(it);
  save();
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
  self->save();
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
