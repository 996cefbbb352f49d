#pragma once
// The client's TLS 1.3 sessions, one per broker address, offered again at the next
// connect: a broker that issues session tickets (tls-ticket-key-file) then resumes
// the session after a restart instead of a full mutual-TLS handshake (no
// certificates exchanged, no signatures; far less CPU on both sides in a storm).
//
// libwebsockets 4.1.6 has no client session reuse of its own: the store hooks into
// its client SSL_CTX (LWS_CALLBACK_OPENSSL_LOAD_EXTRA_CLIENT_VERIFY_CERTS) with
// OpenSSL's new-session callback (to keep each ticket) and info callback (to offer
// the kept session when a handshake starts). With persist_to(), the sessions are
// also kept in a file (tls_session_file.hpp), so that they outlive the process.
// Loop thread only.
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include <openssl/ssl.h>

namespace fleetlink::detail {

class TlsSessionStore {
 public:
  using Log = std::function<void(int level, const std::string& line)>;

  TlsSessionStore() = default;
  TlsSessionStore(const TlsSessionStore&) = delete;
  TlsSessionStore& operator=(const TlsSessionStore&) = delete;
  ~TlsSessionStore();

  // Called once with libwebsockets' client SSL_CTX; the store must outlive it.
  void attach(SSL_CTX* ctx, Log log);
  // The broker ("host:port") the next connection goes to.
  void set_peer(std::string peer) { peer_ = std::move(peer); }
  // Keep the sessions in `file` too (written 0600, replaced atomically), and take
  // the still-usable ones made with this client certificate from it now. Call
  // before the first connection; a file that cannot be read or written is logged
  // and the sessions stay in memory.
  void persist_to(std::filesystem::path file, const std::string& client_cert_path);
  // Forget the session for a broker (e.g. it refused our certificate).
  void forget(const std::string& peer);
  bool has_session(const std::string& peer) const { return sessions_.count(peer) != 0; }

 private:
  static TlsSessionStore* of(const SSL* ssl);
  static int on_new_session(SSL* ssl, SSL_SESSION* session);
  static void on_info(const SSL* ssl, int where, int ret);
  void save();
  void log(int level, const std::string& line) const {
    if (log_) log_(level, line);
  }

  std::map<std::string, SSL_SESSION*> sessions_;  // our own copies
  std::string peer_;
  Log log_;
  std::filesystem::path file_;  // empty: memory only
  std::string cert_sha256_;     // of the client certificate the sessions belong to
  bool save_failed_ = false;    // logged once
};

}  // namespace fleetlink::detail
