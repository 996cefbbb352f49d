#pragma once
// The on-disk form of the client's TLS sessions (TlsSessionStore), so that an agent
// that restarts (a package upgrade, a rig reboot) resumes its session instead of a
// full mutual-TLS handshake. One line per broker:
//
//   fleetlink-tls-session v1 <host:port> <certificate sha-256, hex> <session DER, hex>
//
// A session is tied to the client certificate it was made with: after the rig's
// certificate is replaced, the old sessions are dropped, not offered with the new
// identity. Pure text in, text out; the file handling is in TlsSessionStore.
#include <string>
#include <string_view>
#include <vector>

namespace fleetlink::detail {

struct StoredSession {
  std::string peer;                // "host:port" of the broker
  std::vector<unsigned char> der;  // i2d_SSL_SESSION
};

std::string format_session_file(const std::vector<StoredSession>& sessions, std::string_view cert_sha256);

// The sessions in `text` made with the certificate `cert_sha256`. Lines that are not
// well formed, of another version or of another certificate are skipped and counted
// in *skipped; a later line for the same peer replaces an earlier one.
std::vector<StoredSession> parse_session_file(std::string_view text, std::string_view cert_sha256,
                                              std::size_t* skipped = nullptr);

}  // namespace fleetlink::detail
