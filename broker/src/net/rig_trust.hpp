#pragma once
// What the rig listener trusts and shows, loaded as one piece: the CA bundle
// (--ca), the optional revocation lists (--crl: a PEM file, or a directory of
// them), the broker's certificate and key (--cert, --key). The broker loads it at
// start-up and again at every reload (SIGHUP, POST /v1/admin/reload); a load
// either yields a whole, checked RigTrust or an error that names the file, and
// nothing of a failed load is ever installed (docs/OPERATIONS.md 2.1).
//
// Installed into the rig vhost's SSL_CTX it governs new handshakes only: the
// X509_STORE (CAs, CRLs and the CRL-check flags) is swapped as a whole, the
// certificate and key are replaced together, and the session id context (which
// binds TLS session tickets, net/tls_tickets.hpp) becomes a digest of the CA
// bundle and the CRLs, so a ticket issued under other trust is never resumed:
// after a revocation a rig does a full handshake, and its certificate is checked.
// Connections already open are checked again with peer_refusal().
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <array>
#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fleetlink/expected.hpp"

namespace fleetlink::broker {

struct RigTlsFiles {
  std::string cert;
  std::string key;
  std::string ca;
  std::string crl;  // empty: no revocation lists
};

// Which entries of a --crl directory are read (pure, unit-tested): names ending
// in .pem or .crl, and c_rehash's hash links (8 hex digits, ".r", a number);
// hidden files and anything else (README, *.bak, editor backups) are skipped.
// Both lists come back sorted, so the order the CRLs are read in is stable.
struct CrlListing {
  std::vector<std::string> read;
  std::vector<std::string> skipped;
};
CrlListing crl_listing(std::vector<std::string> names);

// One loaded set. Immutable once made; shared by the SSL_CTX's store and by
// whoever still checks connections against it.
class RigTrust {
 public:
  using Digest = std::array<unsigned char, 32>;

  struct Summary {  // for the "what changed" log line and the reload's answer
    std::size_t ca_certificates = 0;
    Digest ca_digest{};            // SHA-256 of the CA file's bytes
    std::size_t crls = 0;
    std::size_t revoked = 0;       // serials listed by all CRLs together
    Digest crl_digest{};           // SHA-256 over every CRL (DER), in reading order; zero without CRLs
    bool crl_check_all = false;    // every CA of the bundle has a CRL: the whole chain is checked
    std::string cert_subject;
    std::string cert_serial;       // hex
    std::string cert_not_after;    // "2027-03-08T16:48:53Z"
    Digest cert_digest{};          // SHA-256 of the certificate (DER)
  };

  ~RigTrust();
  RigTrust(const RigTrust&) = delete;
  RigTrust& operator=(const RigTrust&) = delete;

  X509_STORE* store() const noexcept { return store_; }
  const Summary& summary() const noexcept { return summary_; }
  // Problems that do not stop a load: a CA of the bundle without a CRL (its rigs
  // are refused while CRLs are checked), a broker certificate past its notAfter.
  const std::vector<std::string>& warnings() const noexcept { return warnings_; }
  // The session id context: tickets are resumed only under the same CA bundle and CRLs.
  const Digest& session_context() const noexcept { return session_context_; }
  // Same CAs and CRLs (a reload that changed only the certificate or nothing).
  bool same_trust_as(const RigTrust& other) const noexcept;
  // Same kind of key (EC, RSA, ...): OpenSSL keeps one certificate per kind in an
  // SSL_CTX, so a reload cannot swap an EC certificate for an RSA one (restart).
  bool same_key_type_as(const RigTrust& other) const noexcept;

 private:
  friend Expected<std::shared_ptr<const RigTrust>> load_rig_trust(const RigTlsFiles&, std::time_t);
  friend Expected<void> install_rig_trust(SSL_CTX*, const RigTrust&);
  RigTrust() = default;

  X509_STORE* store_ = nullptr;
  X509* cert_ = nullptr;
  EVP_PKEY* key_ = nullptr;
  STACK_OF(X509)* chain_ = nullptr;  // the certificates after the first in --cert
  Summary summary_;
  std::vector<std::string> warnings_;
  Digest session_context_{};
};

// Reads and checks everything: the CA bundle holds at least one PEM certificate;
// each CRL is PEM, signed by a CA of the bundle, and current at `now` (not
// before its lastUpdate, not past its nextUpdate); the certificate and key are
// PEM, the key is the certificate's, and an SSL_CTX accepts both (a scratch one:
// the live one is not touched). With CRLs the store checks revocation
// (X509_V_FLAG_CRL_CHECK; X509_V_FLAG_CRL_CHECK_ALL too when every CA of the
// bundle has a CRL, so an intermediate CA's revocation counts as well).
Expected<std::shared_ptr<const RigTrust>> load_rig_trust(const RigTlsFiles& files, std::time_t now);

// Makes `trust` the SSL_CTX's for new handshakes: its store, certificate, key and
// chain, and its session id context. On an error the SSL_CTX may hold part of it:
// install the previous trust again.
Expected<void> install_rig_trust(SSL_CTX* ctx, const RigTrust& trust);

// A connection's client certificate against `trust`, now: nullopt while it still
// verifies (same purpose and parameters as the handshake), else why not
// ("certificate revoked", "unable to get local issuer certificate", ...).
std::optional<std::string> peer_refusal(SSL* ssl, const RigTrust& trust);

// The lines of a reload's "what changed" (empty: nothing did). `before` null: the first load.
std::vector<std::string> trust_changes(const RigTrust* before, const RigTrust& after, const RigTlsFiles& files);

// "ab12cd34" (the first 4 bytes of a digest, hex), for log lines.
std::string short_hex(const RigTrust::Digest& d);

}  // namespace fleetlink::broker
