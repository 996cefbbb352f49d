#include "rig_certs.hpp"

#include <cstdio>

#include <openssl/ec.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

namespace fleetlink::bench {

namespace {
struct FileClose {
  void operator()(FILE* f) const noexcept { std::fclose(f); }
};
using FilePtr = std::unique_ptr<FILE, FileClose>;

Error ssl_error(const std::string& what) { return make_error(Errc::io, what); }

bool add_ext(X509* cert, X509V3_CTX* ctx, int nid, const char* value) {
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, ctx, nid, value);
  if (ext == nullptr) return false;
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return ok == 1;
}
}  // namespace

Expected<X509Ptr> load_cert_file(const std::string& path) {
  FilePtr f(std::fopen(path.c_str(), "r"));
  if (!f) return ssl_error("cannot open " + path);
  X509* x = PEM_read_X509(f.get(), nullptr, nullptr, nullptr);
  if (x == nullptr) return ssl_error("not a PEM certificate: " + path);
  return X509Ptr(x);
}

Expected<PkeyPtr> load_key_file(const std::string& path) {
  FilePtr f(std::fopen(path.c_str(), "r"));
  if (!f) return ssl_error("cannot open " + path);
  EVP_PKEY* k = PEM_read_PrivateKey(f.get(), nullptr, nullptr, nullptr);
  if (k == nullptr) return ssl_error("not a PEM private key: " + path);
  return PkeyPtr(k);
}

Expected<RigCertIssuer> RigCertIssuer::open(const std::string& ca_dir) {
  RigCertIssuer issuer;
  auto cert = load_cert_file(ca_dir + "/ca.crt");
  if (!cert) return cert.error();
  auto key = load_key_file(ca_dir + "/ca.key");
  if (!key) return key.error();
  issuer.ca_cert_ = std::move(*cert);
  issuer.ca_key_ = std::move(*key);
  EVP_PKEY* rig_key = EVP_EC_gen("P-256");
  if (rig_key == nullptr) return ssl_error("EC key generation failed");
  issuer.rig_key_.reset(rig_key);
  return issuer;
}

Expected<X509Ptr> RigCertIssuer::issue(const std::string& rig_id, long serial) const {
  X509Ptr cert(X509_new());
  if (!cert) return ssl_error("X509_new");
  X509* c = cert.get();
  X509_set_version(c, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(c), serial);
  X509_gmtime_adj(X509_getm_notBefore(c), -3600);
  X509_gmtime_adj(X509_getm_notAfter(c), 30L * 24 * 3600);
  X509_set_pubkey(c, rig_key_.get());
  X509_NAME* name = X509_get_subject_name(c);
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("fleetlink"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(rig_id.c_str()), -1, -1, 0);
  X509_set_issuer_name(c, X509_get_subject_name(ca_cert_.get()));
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, ca_cert_.get(), c, nullptr, nullptr, 0);
  const std::string san = "DNS:" + rig_id;
  if (!add_ext(c, &ctx, NID_basic_constraints, "critical,CA:FALSE") ||
      !add_ext(c, &ctx, NID_key_usage, "critical,digitalSignature,keyEncipherment") ||
      !add_ext(c, &ctx, NID_ext_key_usage, "clientAuth") ||
      !add_ext(c, &ctx, NID_subject_alt_name, san.c_str()) ||
      !add_ext(c, &ctx, NID_subject_key_identifier, "hash") ||
      !add_ext(c, &ctx, NID_authority_key_identifier, "keyid")) {
    return ssl_error("adding certificate extensions failed");
  }
  if (X509_sign(c, ca_key_.get(), EVP_sha256()) == 0) return ssl_error("X509_sign failed");
  return cert;
}

}  // namespace fleetlink::bench
