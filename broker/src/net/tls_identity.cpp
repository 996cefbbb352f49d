#include "net/tls_identity.hpp"

#include <libwebsockets.h>
#include <openssl/x509v3.h>

#include <string>

#include "common/log.hpp"

namespace fleetlink::broker::net {

namespace {

std::string asn1_text(const ASN1_STRING* s) {
  if (!s) return {};
  const unsigned char* d = ASN1_STRING_get0_data(s);
  return std::string(reinterpret_cast<const char*>(d), static_cast<std::size_t>(ASN1_STRING_length(s)));
}

}  // namespace

std::optional<CertIdentity> identity_of_cert(X509* cert) {
  if (!cert) return std::nullopt;
  CertIdentity id;
  if (X509_NAME* subject = X509_get_subject_name(cert)) {
    char line[256] = {};
    X509_NAME_oneline(subject, line, sizeof line - 1);
    id.subject = line;
    const int idx = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
    if (idx >= 0) id.common_name = asn1_text(X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, idx)));
  }
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans) {
    const int n = sk_GENERAL_NAME_num(sans);
    for (int i = 0; i < n; ++i) {
      const GENERAL_NAME* gn = sk_GENERAL_NAME_value(sans, i);
      if (gn && gn->type == GEN_DNS) id.dns_sans.push_back(asn1_text(gn->d.dNSName));
    }
    GENERAL_NAMES_free(sans);
  }
  return id;
}

std::optional<CertIdentity> peer_identity(lws* wsi) {
  SSL* ssl = lws_get_ssl(wsi);
  if (!ssl) return std::nullopt;
  return identity_of_cert(SSL_get0_peer_certificate(ssl));
}

int verify_client_certificate(X509_STORE_CTX* store, int preverify_ok) {
  if (preverify_ok != 0) return 0;
  X509* cert = store ? X509_STORE_CTX_get_current_cert(store) : nullptr;
  char line[256] = "?";
  if (cert) X509_NAME_oneline(X509_get_subject_name(cert), line, sizeof line - 1);
  const int err = store ? X509_STORE_CTX_get_error(store) : 0;
  FL_WARN("client certificate refused: %s (%s)", line, X509_verify_cert_error_string(err));
  return 1;
}

}  // namespace fleetlink::broker::net
