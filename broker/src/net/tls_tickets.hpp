#pragma once
// TLS settings of the rig listener's SSL_CTX, apart from libwebsockets' own:
// TLS 1.3 session tickets whose key survives a broker restart, so that after a
// restart (a reconnect storm) rigs resume their sessions instead of running a
// full mutual-TLS handshake (certificate parsing and verification, two
// signatures). See docs/OPERATIONS.md, "Session tickets".
//
// The key file holds exactly kTicketKeyBytes random bytes (16 key name, 32 HMAC
// secret, 32 AES key: OpenSSL's SSL_CTRL_SET_TLSEXT_TICKET_KEYS layout). It is
// created 0600 with fresh random bytes when missing, and refused when other
// users may read it: whoever has it can forge tickets, i.e. rig identities.
#include <array>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include <openssl/ssl.h>

#include "fleetlink/expected.hpp"

namespace fleetlink::broker {

inline constexpr std::size_t kTicketKeyBytes = 80;
using TicketKey = std::array<unsigned char, kTicketKeyBytes>;

// The key from a file's contents (pure; exactly kTicketKeyBytes bytes).
Expected<TicketKey> parse_ticket_key(std::string_view contents, const std::string& path);

// Reads `path`, or creates it (mode 0600, O_EXCL) with random bytes when it does
// not exist. Refuses a file of the wrong size or one readable by group/others.
Expected<TicketKey> load_or_create_ticket_key(const std::string& path);

// Whether a ticket issued at `issued` (seconds since the epoch) may still be used
// at `now`, and whether the client certificate it carries is still valid then
// (`cert_not_after` 0: no certificate in the ticket, never resumable).
bool ticket_usable(std::time_t issued, std::time_t now, std::uint32_t lifetime_s, std::time_t cert_not_after);

// Whether a resumed session gets a new ticket: only once its ticket is half its
// lifetime old. Until then the rig keeps offering the ticket it has (TLS 1.3 allows
// reuse without 0-RTT data, which the broker does not accept).
bool ticket_needs_renewal(std::time_t issued, std::time_t now, std::uint32_t lifetime_s);

struct RigTlsSettings {
  std::optional<TicketKey> ticket_key;      // none: no tickets, every connection is a full handshake
  std::uint32_t ticket_lifetime_s = 86400;
};

// Called before the broker writes a ping on an established rig connection: once the
// ticket the rig holds is half its lifetime old, a fresh one goes out with that write
// (SSL_new_session_ticket), so a rig connected for days still resumes after the next
// restart. True when a ticket was scheduled. No-op without a ticket key or below TLS 1.3.
bool refresh_ticket_if_due(SSL* ssl, const RigTlsSettings& settings, std::time_t now);

// Applies the settings to the rig vhost's SSL_CTX (called from
// LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS). `settings` must outlive the
// SSL_CTX: the ticket callback reads the lifetime from it.
Expected<void> configure_rig_ssl_ctx(SSL_CTX* ctx, const RigTlsSettings& settings);

}  // namespace fleetlink::broker
