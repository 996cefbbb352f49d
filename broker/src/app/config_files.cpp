// check_files(): what the broker would trip over at start-up in the files its
// configuration names, found before anything is opened (app/config.hpp).
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "app/config.hpp"
#include "app/operators.hpp"
#include "net/jwt_verifier.hpp"
#include "net/rig_trust.hpp"
#include "net/tls_tickets.hpp"

namespace fleetlink::broker {

namespace {

namespace fs = std::filesystem;

struct BioFree { void operator()(BIO* b) const { BIO_free(b); } };
struct X509Free { void operator()(X509* x) const { X509_free(x); } };
struct KeyFree { void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); } };
struct StoreFree { void operator()(X509_STORE* s) const { X509_STORE_free(s); } };

std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no PEM data found";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

// "" when `path` is a regular file this process can read.
std::string readable(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return "'" + path + "' does not exist";
  if (!fs::is_regular_file(path, ec)) return "'" + path + "' is not a regular file";
  if (::access(path.c_str(), R_OK) != 0) return "'" + path + "' is not readable: " + std::strerror(errno);
  return {};
}

// "" when `dir` is a directory this process can make files in, or can be made.
std::string usable_directory(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) return "'" + dir + "' is not a directory";
    if (::access(dir.c_str(), W_OK | X_OK) != 0) return "'" + dir + "' is not writable: " + std::strerror(errno);
    return {};
  }
  fs::path p = fs::absolute(dir, ec).parent_path();
  while (!p.empty() && p != p.root_path() && !fs::exists(p, ec)) p = p.parent_path();
  if (p.empty()) p = "/";
  if (!fs::is_directory(p, ec)) return "'" + dir + "' cannot be made: '" + p.string() + "' is not a directory";
  if (::access(p.c_str(), W_OK | X_OK) != 0)
    return "'" + dir + "' does not exist and cannot be made in '" + p.string() + "': " + std::strerror(errno);
  return {};
}

void check_tls(const BrokerConfig& cfg, ConfigReport& r) {
  auto err = [&](std::string_view key, const std::string& text) {
    r.errors.push_back(config_origin(cfg, key) + ": " + text);
  };
  ERR_clear_error();
  std::unique_ptr<X509, X509Free> cert;
  if (!cfg.cert.empty()) {
    if (auto e = readable(cfg.cert); !e.empty()) {
      err("cert", e);
    } else {
      std::unique_ptr<BIO, BioFree> b(BIO_new_file(cfg.cert.c_str(), "r"));
      cert.reset(b ? PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr) : nullptr);
      if (!cert) err("cert", "'" + cfg.cert + "' is not a PEM certificate: " + openssl_error());
    }
  }
  if (!cfg.key.empty()) {
    if (auto e = readable(cfg.key); !e.empty()) {
      err("key", e);
    } else {
      std::unique_ptr<BIO, BioFree> b(BIO_new_file(cfg.key.c_str(), "r"));
      std::unique_ptr<EVP_PKEY, KeyFree> key(b ? PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr)
                                               : nullptr);
      if (!key) {
        err("key", "'" + cfg.key + "' is not a PEM private key (or needs a passphrase): " + openssl_error());
      } else if (cert && X509_check_private_key(cert.get(), key.get()) != 1) {
        ERR_clear_error();
        err("key", "'" + cfg.key + "' is not the private key of '" + cfg.cert + "'");
      }
    }
  }
  if (!cfg.ca.empty()) {
    if (auto e = readable(cfg.ca); !e.empty()) {
      err("ca", e);
    } else {
      std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
      if (!store || X509_STORE_load_file(store.get(), cfg.ca.c_str()) != 1)
        err("ca", "'" + cfg.ca + "' is not a PEM CA certificate: " + openssl_error());
    }
  }
  ERR_clear_error();
}

// The revocation lists: loaded as the broker would (each PEM, signed by a CA of
// --ca, current), once the certificates themselves are fine.
void check_crl(const BrokerConfig& cfg, ConfigReport& r, bool tls_ok) {
  const std::string origin = config_origin(cfg, "crl");
  std::error_code ec;
  if (!fs::exists(cfg.crl, ec)) {
    r.errors.push_back(origin + ": '" + cfg.crl + "' does not exist");
    return;
  }
  if (!tls_ok) return;
  auto trust = load_rig_trust(RigTlsFiles{cfg.cert, cfg.key, cfg.ca, cfg.crl}, std::time(nullptr));
  if (!trust) {
    r.errors.push_back(origin + ": " + trust.error().detail);
    return;
  }
  for (const std::string& w : (*trust)->warnings()) r.warnings.push_back(origin + ": " + w);
}

// The control listener's certificate and key: readable PEM, the key the certificate's.
void check_control_tls(const BrokerConfig& cfg, ConfigReport& r) {
  auto err = [&](std::string_view key, const std::string& text) {
    r.errors.push_back(config_origin(cfg, key) + ": " + text);
  };
  ERR_clear_error();
  std::unique_ptr<X509, X509Free> cert;
  if (auto e = readable(cfg.control_cert); !e.empty()) {
    err("control-cert", e);
  } else {
    std::unique_ptr<BIO, BioFree> b(BIO_new_file(cfg.control_cert.c_str(), "r"));
    cert.reset(b ? PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr) : nullptr);
    if (!cert) err("control-cert", "'" + cfg.control_cert + "' is not a PEM certificate: " + openssl_error());
  }
  if (auto e = readable(cfg.control_key); !e.empty()) {
    err("control-key", e);
  } else {
    std::unique_ptr<BIO, BioFree> b(BIO_new_file(cfg.control_key.c_str(), "r"));
    std::unique_ptr<EVP_PKEY, KeyFree> key(b ? PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr) : nullptr);
    if (!key) {
      err("control-key",
          "'" + cfg.control_key + "' is not a PEM private key (or needs a passphrase): " + openssl_error());
    } else if (cert && X509_check_private_key(cert.get(), key.get()) != 1) {
      ERR_clear_error();
      err("control-key", "'" + cfg.control_key + "' is not the private key of '" + cfg.control_cert + "'");
    }
  }
  ERR_clear_error();
}

// The audit log: a file this process can append to, or one it can make.
void check_audit_log(const BrokerConfig& cfg, ConfigReport& r) {
  const std::string& path = cfg.audit_log;
  auto err = [&](const std::string& text) { r.errors.push_back(config_origin(cfg, "audit-log") + ": " + text); };
  std::error_code ec;
  if (fs::exists(path, ec)) {
    if (!fs::is_regular_file(path, ec)) return err("'" + path + "' is not a regular file");
    if (::access(path.c_str(), W_OK) != 0) return err("'" + path + "' is not writable: " + std::strerror(errno));
    return;
  }
  const fs::path dir = fs::absolute(path, ec).parent_path();
  if (!fs::is_directory(dir, ec))
    return err("'" + path + "' does not exist and cannot be made: '" + dir.string() + "' is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    err("'" + path + "' does not exist and cannot be made in '" + dir.string() + "': " + std::strerror(errno));
}

void check_ticket_key(const BrokerConfig& cfg, ConfigReport& r) {
  const std::string& path = cfg.tls_ticket_key_file;
  auto err = [&](const std::string& text) {
    r.errors.push_back(config_origin(cfg, "tls-ticket-key-file") + ": " + text);
  };
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    // The broker makes it at start-up: its directory must take a new file.
    const fs::path dir = fs::absolute(path, ec).parent_path();
    if (!fs::is_directory(dir, ec))
      err("'" + path + "' does not exist and cannot be made: '" + dir.string() + "' is not a directory");
    else if (::access(dir.c_str(), W_OK | X_OK) != 0)
      err("'" + path + "' does not exist and cannot be made in '" + dir.string() + "': " + std::strerror(errno));
    return;
  }
  if (auto e = readable(path); !e.empty()) return err(e);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    return err("'" + path + "' is accessible to other users (anyone who reads it can forge rig sessions): chmod 600 it");
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (auto key = parse_ticket_key(ss.str(), path); !key) err(key.error().detail);
}

}  // namespace

void check_files(const BrokerConfig& cfg, ConfigReport& r) {
  const std::size_t errors_before = r.errors.size();
  check_tls(cfg, r);
  if (!cfg.crl.empty())
    check_crl(cfg, r, r.errors.size() == errors_before && !cfg.cert.empty() && !cfg.key.empty() && !cfg.ca.empty());
  if (!cfg.control_token_file.empty()) {
    if (auto e = readable(cfg.control_token_file); !e.empty())
      r.errors.push_back(config_origin(cfg, "control-token-file") + ": " + e);
    else if (cfg.control_token.empty())
      r.errors.push_back(config_origin(cfg, "control-token-file") + ": '" + cfg.control_token_file +
                         "' is empty: the control API would take requests without a token");
  }
  if (!cfg.operators_file.empty()) {
    if (auto e = readable(cfg.operators_file); !e.empty()) {
      r.errors.push_back(config_origin(cfg, "operators-file") + ": " + e);
    } else {
      // The old token too: its operator "token" must not clash with the file's.
      const OperatorsParse ops = broker_operators(cfg.operators_file, cfg.control_token);
      for (const std::string& problem : ops.errors) r.errors.push_back(config_origin(cfg, "operators-file") + ": " + problem);
    }
  }
  if (!cfg.control_cert.empty() && !cfg.control_key.empty()) check_control_tls(cfg, r);
  if (!cfg.audit_log.empty()) check_audit_log(cfg, r);
  if (!cfg.tls_ticket_key_file.empty()) check_ticket_key(cfg, r);
  if (!cfg.rig_token_keys.empty()) {
    if (auto keys = net::JwtVerifier::load(cfg.rig_token_keys, {}); !keys)
      r.errors.push_back(config_origin(cfg, "rig-token-keys") + ": " + keys.error().detail);
  }
  if (!cfg.artifact_s3_endpoint.empty()) {
    for (const char* key : {"artifact-s3-access-key-file", "artifact-s3-secret-key-file"}) {
      const std::string& path = std::string_view(key) == "artifact-s3-access-key-file" ? cfg.artifact_s3_access_key_file
                                                                                       : cfg.artifact_s3_secret_key_file;
      if (path.empty()) continue;  // said by check_values
      if (auto e = readable(path); !e.empty()) r.errors.push_back(config_origin(cfg, key) + ": " + e);
    }
  }
  if (cfg.store == "sqlite") {
    if (auto e = usable_directory(cfg.state_dir); !e.empty())
      r.errors.push_back(config_origin(cfg, "state-dir") + ": " + e + " (the sqlite command store lives there)");
  }
}

}  // namespace fleetlink::broker
