#pragma once
// A running sha256 with a lower-case hex digest: what an artifact is named by
// (docs/PROTOCOL.md section 10). The agent computes it before an upload, the
// broker as the bytes arrive, fleetctl as it downloads. Header-only, so that
// each keeps its own OpenSSL link and fleetlink_common needs none.
#include <openssl/evp.h>

#include <memory>
#include <string>
#include <string_view>

namespace fleetlink {

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    ok_ = ctx_ && EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) == 1;
  }
  bool ok() const noexcept { return ok_; }
  void update(std::string_view bytes) {
    if (ok_ && !bytes.empty()) ok_ = EVP_DigestUpdate(ctx_.get(), bytes.data(), bytes.size()) == 1;
  }
  // Ends the digest: call once.
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    if (!ok_ || EVP_DigestFinal_ex(ctx_.get(), md, &n) != 1) return {};
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out;
    out.reserve(2 * n);
    for (unsigned i = 0; i < n; ++i) {
      out.push_back(kDigits[md[i] >> 4]);
      out.push_back(kDigits[md[i] & 15]);
    }
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
  bool ok_ = false;
};

}  // namespace fleetlink
