#pragma once
// Client certificates for thousands of simulated rigs. The broker checks that a
// certificate's identity equals HELLO's rig_id, so every rig needs its own
// certificate. Running fleetlink-lab-ca 19,900 times costs minutes of openssl
// processes; issuing in memory from the lab CA takes well under a second per
// thousand. All simulated rigs share ONE P-256 key (the broker's cost per handshake
// is the same; only the identities must differ).
#include <memory>
#include <string>

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "fleetlink/expected.hpp"

namespace fleetlink::bench {

struct X509Free {
  void operator()(X509* x) const noexcept { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const noexcept { EVP_PKEY_free(k); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// Issues rig certificates (CN = SAN DNS = rig id, EKU clientAuth) from a CA on disk,
// laid out as packaging/fleetlink-lab-ca makes it (DIR/ca.crt, DIR/ca.key).
class RigCertIssuer {
 public:
  static Expected<RigCertIssuer> open(const std::string& ca_dir);
  Expected<X509Ptr> issue(const std::string& rig_id, long serial) const;
  EVP_PKEY* rig_key() const noexcept { return rig_key_.get(); }

 private:
  X509Ptr ca_cert_;
  PkeyPtr ca_key_;
  PkeyPtr rig_key_;
};

// A rig's certificate and key from files (DIR/RIG.crt, DIR/RIG.key), as the lab-CA helper writes them.
Expected<X509Ptr> load_cert_file(const std::string& path);
Expected<PkeyPtr> load_key_file(const std::string& path);

}  // namespace fleetlink::bench
