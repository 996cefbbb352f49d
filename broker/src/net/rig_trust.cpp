#include "net/rig_trust.hpp"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509_vfy.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fleetlink::broker {

namespace {

namespace fs = std::filesystem;

// Files the broker reads here are certificates, keys and CRLs: a CRL of a large
// CA runs to megabytes, but anything past this is not what the option meant.
constexpr std::uintmax_t kMaxFileBytes = 64ULL * 1024 * 1024;

struct BioFree { void operator()(BIO* b) const { BIO_free(b); } };
struct X509Free { void operator()(X509* x) const { X509_free(x); } };
struct CrlFree { void operator()(X509_CRL* c) const { X509_CRL_free(c); } };
struct KeyFree { void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); } };
struct CtxFree { void operator()(SSL_CTX* c) const { SSL_CTX_free(c); } };
struct StoreCtxFree { void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); } };
using X509Ptr = std::unique_ptr<X509, X509Free>;
using CrlPtr = std::unique_ptr<X509_CRL, CrlFree>;

std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no PEM data found";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

// A PEM sequence ended where it should: only "no start line" is left on the error queue.
bool clean_end_of_pem() {
  const unsigned long e = ERR_peek_last_error();
  const bool clean = e == 0 || (ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE);
  if (clean) ERR_clear_error();
  return clean;
}

Expected<std::string> read_whole(const std::string& path, std::string_view what) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return make_error(Errc::io, std::string(what) + " '" + path + "' does not exist");
  if (!fs::is_regular_file(path, ec))
    return make_error(Errc::io, std::string(what) + " '" + path + "' is not a regular file");
  const std::uintmax_t size = fs::file_size(path, ec);
  if (!ec && size > kMaxFileBytes)
    return make_error(Errc::too_large, std::string(what) + " '" + path + "' is larger than 64 MiB");
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(Errc::io, std::string(what) + " '" + path + "' is not readable: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return make_error(Errc::io, std::string(what) + " '" + path + "' could not be read");
  return ss.str();
}

std::unique_ptr<BIO, BioFree> memory_bio(const std::string& bytes) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
}

// Every PEM certificate in `bytes` (at least one).
Expected<std::vector<X509Ptr>> read_certificates(const std::string& bytes, const std::string& path,
                                                 std::string_view what) {
  ERR_clear_error();
  auto bio = memory_bio(bytes);
  std::vector<X509Ptr> out;
  while (bio) {
    X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (!x) break;
    out.emplace_back(x);
  }
  if (out.empty() || !clean_end_of_pem())
    return make_error(Errc::malformed, std::string(what) + " '" + path + "' is not PEM certificate(s): " +
                                           openssl_error());
  return out;
}

Expected<std::vector<CrlPtr>> read_crls(const std::string& bytes, const std::string& path) {
  ERR_clear_error();
  auto bio = memory_bio(bytes);
  std::vector<CrlPtr> out;
  while (bio) {
    X509_CRL* c = PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr);
    if (!c) break;
    out.emplace_back(c);
  }
  if (out.empty() || !clean_end_of_pem())
    return make_error(Errc::malformed, "CRL file '" + path + "' is not PEM CRL(s) (-----BEGIN X509 CRL-----): " +
                                           openssl_error());
  return out;
}

std::string name_text(const X509_NAME* name) {
  if (!name) return "?";
  char line[256] = {};
  X509_NAME_oneline(name, line, sizeof line - 1);
  return line;
}

std::string time_text(const ASN1_TIME* t) {
  std::tm tm{};
  if (!t || ASN1_TIME_to_tm(t, &tm) != 1) return "?";
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string serial_text(const X509* x) {
  BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), nullptr);
  if (!bn) return "?";
  char* hex = BN_bn2hex(bn);
  std::string out = hex ? hex : "?";
  OPENSSL_free(hex);
  BN_free(bn);
  return out;
}

RigTrust::Digest sha256(std::string_view bytes) {
  RigTrust::Digest d{};
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), d.data(), &len, EVP_sha256(), nullptr);
  return d;
}

std::string der_of(X509_CRL* crl) {
  unsigned char* der = nullptr;
  const int n = i2d_X509_CRL(crl, &der);
  std::string out = n > 0 ? std::string(reinterpret_cast<const char*>(der), static_cast<std::size_t>(n)) : "";
  OPENSSL_free(der);
  return out;
}

RigTrust::Digest cert_digest(const X509* x) {
  RigTrust::Digest d{};
  unsigned int len = 0;
  X509_digest(x, EVP_sha256(), d.data(), &len);
  return d;
}

// The CRL files --crl names: itself, or the CRL files of its directory.
Expected<std::vector<std::string>> crl_paths(const std::string& crl) {
  std::error_code ec;
  if (!fs::is_directory(crl, ec)) return std::vector<std::string>{crl};
  std::vector<std::string> names;
  for (fs::directory_iterator it(crl, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  if (ec) return make_error(Errc::io, "CRL directory '" + crl + "' cannot be listed: " + ec.message());
  CrlListing listing = crl_listing(std::move(names));
  if (listing.read.empty())
    return make_error(Errc::invalid_argument,
                      "CRL directory '" + crl +
                          "' holds no CRL file (*.pem, *.crl, or c_rehash's HASH.rN): with --crl set, a rig "
                          "certificate is accepted only when its CA's CRL is there");
  std::vector<std::string> out;
  for (const std::string& name : listing.read) out.push_back((fs::path(crl) / name).string());
  return out;
}

int no_passphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*u*/) { return 0; }

}  // namespace

CrlListing crl_listing(std::vector<std::string> names) {
  auto is_hash_link = [](std::string_view n) {
    // c_rehash / openssl rehash: 8 hex digits, ".r", decimal digits.
    if (n.size() < 11 || n.substr(8, 2) != ".r") return false;
    for (std::size_t i = 0; i < 8; ++i)
      if (!std::isxdigit(static_cast<unsigned char>(n[i]))) return false;
    for (std::size_t i = 10; i < n.size(); ++i)
      if (!std::isdigit(static_cast<unsigned char>(n[i]))) return false;
    return true;
  };
  auto ends_with = [](std::string_view n, std::string_view suffix) {
    return n.size() > suffix.size() && n.substr(n.size() - suffix.size()) == suffix;
  };
  std::sort(names.begin(), names.end());
  CrlListing out;
  for (std::string& n : names) {
    const bool wanted = !n.empty() && n.front() != '.' &&
                        (ends_with(n, ".pem") || ends_with(n, ".crl") || is_hash_link(n));
    (wanted ? out.read : out.skipped).push_back(std::move(n));
  }
  return out;
}

RigTrust::~RigTrust() {
  X509_STORE_free(store_);
  X509_free(cert_);
  EVP_PKEY_free(key_);
  sk_X509_pop_free(chain_, X509_free);
}

bool RigTrust::same_trust_as(const RigTrust& other) const noexcept {
  return session_context_ == other.session_context_;
}

bool RigTrust::same_key_type_as(const RigTrust& other) const noexcept {
  return EVP_PKEY_get_base_id(key_) == EVP_PKEY_get_base_id(other.key_);
}

Expected<std::shared_ptr<const RigTrust>> load_rig_trust(const RigTlsFiles& files, std::time_t now) {
  std::shared_ptr<RigTrust> t(new RigTrust());
  RigTrust::Summary& sum = t->summary_;

  // The CA bundle.
  auto ca_bytes = read_whole(files.ca, "--ca");
  if (!ca_bytes) return ca_bytes.error();
  auto cas = read_certificates(*ca_bytes, files.ca, "--ca");
  if (!cas) return cas.error();
  sum.ca_certificates = cas->size();
  sum.ca_digest = sha256(*ca_bytes);

  // The CRLs, each signed by a CA of the bundle and current.
  std::vector<CrlPtr> crls;
  std::string crl_material;
  std::vector<bool> ca_has_crl(cas->size(), false);
  if (!files.crl.empty()) {
    auto paths = crl_paths(files.crl);
    if (!paths) return paths.error();
    for (const std::string& path : *paths) {
      auto bytes = read_whole(path, "CRL file");
      if (!bytes) return bytes.error();
      auto got = read_crls(*bytes, path);
      if (!got) return got.error();
      for (CrlPtr& crl : *got) {
        const std::string issuer = name_text(X509_CRL_get_issuer(crl.get()));
        bool named = false;
        bool signed_by_ca = false;
        for (std::size_t i = 0; i < cas->size(); ++i) {
          X509* ca = (*cas)[i].get();
          if (X509_NAME_cmp(X509_get_subject_name(ca), X509_CRL_get_issuer(crl.get())) != 0) continue;
          named = true;
          if (X509_CRL_verify(crl.get(), X509_get0_pubkey(ca)) == 1) {
            signed_by_ca = true;
            ca_has_crl[i] = true;
          }
        }
        ERR_clear_error();
        if (!named)
          return make_error(Errc::invalid_argument, "CRL in '" + path + "' is issued by " + issuer +
                                                        ", which is not a CA of --ca " + files.ca);
        if (!signed_by_ca)
          return make_error(Errc::invalid_argument, "CRL in '" + path + "' (issuer " + issuer +
                                                        ") does not verify with that CA's key in --ca " + files.ca);
        const ASN1_TIME* last = X509_CRL_get0_lastUpdate(crl.get());
        const ASN1_TIME* next = X509_CRL_get0_nextUpdate(crl.get());
        if (last && X509_cmp_time(last, &now) > 0)
          return make_error(Errc::invalid_argument, "CRL in '" + path + "' (issuer " + issuer +
                                                        ") is not valid before " + time_text(last) +
                                                        " (its lastUpdate): is this host's clock right?");
        if (next && X509_cmp_time(next, &now) < 0)
          return make_error(Errc::invalid_argument,
                            "CRL in '" + path + "' (issuer " + issuer + ") expired at " + time_text(next) +
                                " (its nextUpdate): every rig of that CA would be refused; publish a new one");
        const STACK_OF(X509_REVOKED)* revoked = X509_CRL_get_REVOKED(crl.get());
        sum.revoked += revoked ? static_cast<std::size_t>(sk_X509_REVOKED_num(revoked)) : 0;
        crl_material += der_of(crl.get());
        crls.push_back(std::move(crl));
      }
    }
    sum.crls = crls.size();
    sum.crl_digest = sha256(crl_material);
    sum.crl_check_all = std::all_of(ca_has_crl.begin(), ca_has_crl.end(), [](bool b) { return b; });
    for (std::size_t i = 0; i < cas->size(); ++i) {
      if (ca_has_crl[i]) continue;
      t->warnings_.push_back("no CRL from CA " + name_text(X509_get_subject_name((*cas)[i].get())) + " in --crl " +
                             files.crl + ": rig certificates it issued are refused (unable to get certificate CRL)");
    }
  }

  // The store new handshakes verify against.
  t->store_ = X509_STORE_new();
  if (!t->store_) return make_error(Errc::io, "X509_STORE_new failed");
  for (const X509Ptr& ca : *cas)
    if (X509_STORE_add_cert(t->store_, ca.get()) != 1)
      return make_error(Errc::io, "cannot add a CA of " + files.ca + ": " + openssl_error());
  for (const CrlPtr& crl : crls)
    if (X509_STORE_add_crl(t->store_, crl.get()) != 1)
      return make_error(Errc::io, "cannot add a CRL of " + files.crl + ": " + openssl_error());
  if (!crls.empty())
    X509_STORE_set_flags(t->store_, X509_V_FLAG_CRL_CHECK | (sum.crl_check_all ? X509_V_FLAG_CRL_CHECK_ALL : 0));

  std::string context = "fleetlink rig session v1\n" + *ca_bytes;
  if (!crls.empty()) context += "\ncrl\n" + crl_material;
  t->session_context_ = sha256(context);

  // The broker's certificate (and the chain after it) and its key.
  auto cert_bytes = read_whole(files.cert, "--cert");
  if (!cert_bytes) return cert_bytes.error();
  auto certs = read_certificates(*cert_bytes, files.cert, "--cert");
  if (!certs) return certs.error();
  auto key_bytes = read_whole(files.key, "--key");
  if (!key_bytes) return key_bytes.error();
  ERR_clear_error();
  auto key_bio = memory_bio(*key_bytes);
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      key_bio ? PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_passphrase, nullptr) : nullptr);
  if (!key)
    return make_error(Errc::malformed, "--key '" + files.key + "' is not a PEM private key (or needs a passphrase): " +
                                           openssl_error());
  X509* leaf = (*certs)[0].get();
  if (X509_check_private_key(leaf, key.get()) != 1) {
    ERR_clear_error();
    return make_error(Errc::invalid_argument,
                      "--key '" + files.key + "' is not the private key of --cert '" + files.cert + "'");
  }
  {
    // What the live SSL_CTX will be asked to take, tried on a scratch one first
    // (a key OpenSSL's security level refuses, say, fails here and not halfway).
    std::unique_ptr<SSL_CTX, CtxFree> scratch(SSL_CTX_new(TLS_server_method()));
    if (!scratch || SSL_CTX_use_certificate(scratch.get(), leaf) != 1 ||
        SSL_CTX_use_PrivateKey(scratch.get(), key.get()) != 1 || SSL_CTX_check_private_key(scratch.get()) != 1)
      return make_error(Errc::invalid_argument, "--cert '" + files.cert + "' / --key '" + files.key +
                                                    "' are refused by TLS: " + openssl_error());
  }
  if (X509_cmp_time(X509_get0_notAfter(leaf), &now) < 0)
    t->warnings_.push_back("--cert " + files.cert + " expired at " + time_text(X509_get0_notAfter(leaf)) +
                           ": rigs will refuse the broker");
  sum.cert_subject = name_text(X509_get_subject_name(leaf));
  sum.cert_serial = serial_text(leaf);
  sum.cert_not_after = time_text(X509_get0_notAfter(leaf));
  sum.cert_digest = cert_digest(leaf);
  t->cert_ = (*certs)[0].release();
  t->key_ = key.release();
  if (certs->size() > 1) {
    t->chain_ = sk_X509_new_null();
    if (!t->chain_) return make_error(Errc::io, "sk_X509_new_null failed");
    for (std::size_t i = 1; i < certs->size(); ++i) {
      if (sk_X509_push(t->chain_, (*certs)[i].get()) <= 0) return make_error(Errc::io, "sk_X509_push failed");
      (void)(*certs)[i].release();
    }
  }
  return std::shared_ptr<const RigTrust>(std::move(t));
}

Expected<void> install_rig_trust(SSL_CTX* ctx, const RigTrust& trust) {
  if (!ctx) return make_error(Errc::io, "the rig listener has no TLS context");
  ERR_clear_error();
  // The certificate first: it is the step that can fail, and until it has
  // succeeded nothing else of the new trust is in the SSL_CTX.
  if (SSL_CTX_use_cert_and_key(ctx, trust.cert_, trust.key_, trust.chain_, 1) != 1)
    return make_error(Errc::io, "the TLS context refused the certificate and key: " + openssl_error());
  X509_STORE_up_ref(trust.store_);
  SSL_CTX_set_cert_store(ctx, trust.store_);  // takes that reference, frees the previous store
  if (SSL_CTX_set_session_id_context(ctx, trust.session_context_.data(),
                                     static_cast<unsigned int>(trust.session_context_.size())) != 1)
    return make_error(Errc::io, "SSL_CTX_set_session_id_context failed");
  return {};
}

std::optional<std::string> peer_refusal(SSL* ssl, const RigTrust& trust) {
  X509* leaf = ssl ? SSL_get0_peer_certificate(ssl) : nullptr;
  if (!leaf) return std::string("no client certificate");
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> vctx(X509_STORE_CTX_new());
  // Server side: the chain the rig sent, without its own certificate (a resumed
  // session has none: the rig's CA must then be in the bundle, as it is in a lab).
  STACK_OF(X509)* sent = SSL_get_peer_cert_chain(ssl);
  if (!vctx || X509_STORE_CTX_init(vctx.get(), trust.store(), leaf, sent) != 1) {
    ERR_clear_error();
    return std::nullopt;  // cannot check now: not a verdict against the rig
  }
  // As the handshake does (OpenSSL's ssl_verify_cert_chain on a server).
  X509_STORE_CTX_set_default(vctx.get(), "ssl_client");
  X509_VERIFY_PARAM_set1(X509_STORE_CTX_get0_param(vctx.get()), SSL_get0_param(ssl));
  const int ok = X509_verify_cert(vctx.get());
  const int err = X509_STORE_CTX_get_error(vctx.get());
  ERR_clear_error();
  if (ok == 1) return std::nullopt;
  return std::string(X509_verify_cert_error_string(err));
}

std::string short_hex(const RigTrust::Digest& d) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < 4; ++i) {
    out += digits[d[i] >> 4];
    out += digits[d[i] & 15];
  }
  return out;
}

std::vector<std::string> trust_changes(const RigTrust* before, const RigTrust& after, const RigTlsFiles& files) {
  std::vector<std::string> out;
  if (!before) return out;
  const RigTrust::Summary& a = after.summary();
  const RigTrust::Summary& b = before->summary();
  if (a.ca_digest != b.ca_digest)
    out.push_back("CA bundle " + files.ca + ": " + std::to_string(a.ca_certificates) + " certificate(s), sha256 " +
                  short_hex(a.ca_digest) + " (was " + std::to_string(b.ca_certificates) + ", " +
                  short_hex(b.ca_digest) + ")");
  if (a.crl_digest != b.crl_digest || a.crls != b.crls) {
    if (a.crls == 0) {
      out.push_back("CRLs: none, revocation not checked (was " + std::to_string(b.crls) + ")");
    } else {
      out.push_back("CRLs from " + files.crl + ": " + std::to_string(a.crls) + " listing " +
                    std::to_string(a.revoked) + " revoked serial(s), checked for " +
                    (a.crl_check_all ? "every certificate of a chain" : "rig certificates") + " (was " +
                    std::to_string(b.crls) + " listing " + std::to_string(b.revoked) + ")");
    }
  }
  if (a.cert_digest != b.cert_digest)
    out.push_back("broker certificate " + files.cert + ": " + a.cert_subject + " serial " + a.cert_serial +
                  " valid until " + a.cert_not_after + " (was serial " + b.cert_serial + ")");
  return out;
}

}  // namespace fleetlink::broker
