#pragma once
// Who a rig's client certificate says it is (its subject CN and DNS SANs: the
// HELLO's rig_id must be one of them), and the log line for a certificate
// OpenSSL refused during the handshake.
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <optional>

#include "fleet/hello_policy.hpp"

struct lws;

namespace fleetlink::broker::net {

std::optional<CertIdentity> identity_of_cert(X509* cert);
// The peer certificate of a TLS connection; nullopt without TLS or certificate.
std::optional<CertIdentity> peer_identity(lws* wsi);

// LWS_CALLBACK_OPENSSL_PERFORM_CLIENT_CERT_VERIFICATION: keeps OpenSSL's own
// verdict (lws would turn a 0 into "accept") and says why a certificate was
// refused. Returns the callback's answer (0 accept, 1 refuse).
int verify_client_certificate(X509_STORE_CTX* store, int preverify_ok);

}  // namespace fleetlink::broker::net
