#include "net/tls_tickets.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <openssl/asn1.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

namespace fleetlink::broker {

namespace {

std::string errno_text() { return std::strerror(errno); }

// A certificate's notAfter in seconds since the epoch (0 when unreadable).
std::time_t not_after_of(const X509* cert) {
  if (cert == nullptr) return 0;
  std::tm tm{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) != 1) return 0;
  return timegm(&tm);
}

// OpenSSL calls this with every ticket a client offers, already decrypted with our
// key (status SUCCESS*), or when it could not (EMPTY, NO_DECRYPT). A usable ticket
// is resumed (the session, with the rig's certificate, comes back from it); any
// other falls back to a full handshake, which issues a new ticket.
SSL_TICKET_RETURN on_ticket_decrypted(SSL* /*ssl*/, SSL_SESSION* session, const unsigned char* /*keyname*/,
                                      std::size_t /*keyname_len*/, SSL_TICKET_STATUS status, void* arg) {
  const auto* settings = static_cast<const RigTlsSettings*>(arg);
  switch (status) {
    case SSL_TICKET_SUCCESS:
    case SSL_TICKET_SUCCESS_RENEW: {
      if (session == nullptr || settings == nullptr) return SSL_TICKET_RETURN_IGNORE_RENEW;
      const std::time_t issued = static_cast<std::time_t>(SSL_SESSION_get_time(session));
      const std::time_t now = std::time(nullptr);
      if (!ticket_usable(issued, now, settings->ticket_lifetime_s, not_after_of(SSL_SESSION_get0_peer(session))))
        return SSL_TICKET_RETURN_IGNORE_RENEW;
      // A new ticket costs OpenSSL 3.0 a decode of the whole session (certificate
      // included): ~0.1-0.15 ms, a third of a resumption. A young ticket is kept.
      return ticket_needs_renewal(issued, now, settings->ticket_lifetime_s) ? SSL_TICKET_RETURN_USE_RENEW
                                                                             : SSL_TICKET_RETURN_USE;
    }
    case SSL_TICKET_FATAL_ERR_MALLOC:
    case SSL_TICKET_FATAL_ERR_OTHER:
      return SSL_TICKET_RETURN_ABORT;
    default:
      return SSL_TICKET_RETURN_IGNORE_RENEW;
  }
}

int on_ticket_generate(SSL* /*ssl*/, void* /*arg*/) { return 1; }

}  // namespace

Expected<TicketKey> parse_ticket_key(std::string_view contents, const std::string& path) {
  if (contents.size() != kTicketKeyBytes)
    return make_error(Errc::bad_field, "TLS ticket key file " + path + " holds " + std::to_string(contents.size()) +
                                           " bytes, expected exactly " + std::to_string(kTicketKeyBytes) +
                                           " (remove it to have a new one made)");
  TicketKey key{};
  std::memcpy(key.data(), contents.data(), key.size());
  return key;
}

Expected<TicketKey> load_or_create_ticket_key(const std::string& path) {
  // O_EXCL: of two brokers starting together on one file, only one writes it.
  const int created = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (created >= 0) {
    TicketKey key{};
    bool ok = RAND_bytes(key.data(), static_cast<int>(key.size())) == 1;
    ok = ok && ::write(created, key.data(), key.size()) == static_cast<ssize_t>(key.size());
    ok = ok && ::fsync(created) == 0;
    ::close(created);
    if (!ok) {
      ::unlink(path.c_str());
      return make_error(Errc::io, "cannot write a new TLS ticket key to " + path);
    }
    return key;
  }
  if (errno != EEXIST) return make_error(Errc::io, "cannot create the TLS ticket key file " + path + ": " + errno_text());

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(Errc::io, "cannot read the TLS ticket key file " + path + ": " + errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return make_error(Errc::io, "cannot stat " + path + ": " + errno_text());
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    ::close(fd);
    return make_error(Errc::invalid_argument, "TLS ticket key file " + path +
                                                  " is accessible to other users (anyone who reads it can forge "
                                                  "rig sessions): chmod 600 it");
  }
  std::string contents(kTicketKeyBytes + 1, '\0');
  std::size_t got = 0;
  while (got < contents.size()) {
    const ssize_t n = ::read(fd, contents.data() + got, contents.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  contents.resize(got);
  return parse_ticket_key(contents, path);
}

bool ticket_usable(std::time_t issued, std::time_t now, std::uint32_t lifetime_s, std::time_t cert_not_after) {
  if (cert_not_after == 0 || now >= cert_not_after) return false;  // no certificate, or it has expired
  if (issued > now + 60) return false;                               // from the future (clock stepped back)
  return now - issued <= static_cast<std::time_t>(lifetime_s);
}

bool ticket_needs_renewal(std::time_t issued, std::time_t now, std::uint32_t lifetime_s) {
  return now - issued >= static_cast<std::time_t>(lifetime_s / 2);
}

bool refresh_ticket_if_due(SSL* ssl, const RigTlsSettings& settings, std::time_t now) {
  if (ssl == nullptr || !settings.ticket_key || SSL_version(ssl) != TLS1_3_VERSION) return false;
  // The connection's session carries the time of the ticket the rig holds: set when a
  // ticket is issued, or restored from the ticket a resumption used without renewal.
  const SSL_SESSION* session = SSL_get0_session(ssl);
  if (session == nullptr) return false;
  const std::time_t issued = static_cast<std::time_t>(SSL_SESSION_get_time(session));
  if (!ticket_needs_renewal(issued, now, settings.ticket_lifetime_s)) return false;
  return SSL_new_session_ticket(ssl) == 1;
}

Expected<void> configure_rig_ssl_ctx(SSL_CTX* ctx, const RigTlsSettings& settings) {
  // No server-side session cache either way: tickets are stateless.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  if (!settings.ticket_key) {
    // No tickets: every connection is a full handshake, and no session memory is kept for it.
    SSL_CTX_set_num_tickets(ctx, 0);
    return {};
  }
  // The session id context, which binds a ticket to the CA bundle and CRLs it was
  // issued under, is the trust's (install_rig_trust, net/rig_trust.hpp).
  TicketKey key = *settings.ticket_key;
  if (SSL_CTX_set_tlsext_ticket_keys(ctx, key.data(), static_cast<long>(key.size())) != 1)
    return make_error(Errc::io, "SSL_CTX_set_tlsext_ticket_keys failed");
  OPENSSL_cleanse(key.data(), key.size());
  // One ticket per connection: a rig only ever needs its latest one.
  SSL_CTX_set_num_tickets(ctx, 1);
  // The lifetime hint in each ticket; on_ticket_decrypted enforces it.
  SSL_CTX_set_timeout(ctx, static_cast<long>(settings.ticket_lifetime_s));
  if (SSL_CTX_set_session_ticket_cb(ctx, on_ticket_generate, on_ticket_decrypted,
                                    const_cast<RigTlsSettings*>(&settings)) != 1)
    return make_error(Errc::io, "SSL_CTX_set_session_ticket_cb failed");
  return {};
}

}  // namespace fleetlink::broker
