#include "net/jwt_verifier.hpp"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/pem.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace fleetlink::broker::net {

namespace {

using nlohmann::json;

Error refused(std::string detail) { return Error{Errc::invalid_argument, std::move(detail)}; }

int b64url_value(char c) noexcept {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

// A JSON object from a base64url part, or why not.
Expected<json> json_part(std::string_view part, const char* what) {
  const std::optional<std::string> text = base64url_decode(part);
  if (!text) return refused(std::string(what) + ": not base64url");
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return refused(std::string(what) + ": not a JSON object");
  return j;
}

// A NumericDate (RFC 7519 §2): seconds, possibly with a fraction; nullopt when absent.
Expected<std::optional<std::int64_t>> date_claim(const json& claims, const char* name) {
  const auto it = claims.find(name);
  if (it == claims.end()) return std::optional<std::int64_t>{};
  if (!it->is_number()) return refused(std::string(name) + ": not a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < 0 || v > 1e13) return refused(std::string(name) + ": out of range");
  return std::optional<std::int64_t>{static_cast<std::int64_t>(v)};
}

bool kind_text_ok(const std::string& k) {
  if (k.empty() || k.size() > 64) return false;
  return std::all_of(k.begin(), k.end(), [](unsigned char c) { return c > 0x20 && c < 0x7f; });
}

// EVP_DigestVerify over the signing input; md null for Ed25519 (it hashes itself).
bool signature_holds(EVP_PKEY* pkey, const EVP_MD* md, std::string_view input, const std::string& sig) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, md, nullptr, pkey) != 1) return false;
  return EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                          reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1;
}

// JWS ES256 signatures are r || s, 32 bytes each (RFC 7518 §3.4); OpenSSL wants DER.
std::optional<std::string> es256_to_der(const std::string& raw) {
  if (raw.size() != 64) return std::nullopt;
  std::unique_ptr<ECDSA_SIG, decltype(&ECDSA_SIG_free)> sig(ECDSA_SIG_new(), ECDSA_SIG_free);
  BIGNUM* r = BN_bin2bn(reinterpret_cast<const unsigned char*>(raw.data()), 32, nullptr);
  BIGNUM* s = BN_bin2bn(reinterpret_cast<const unsigned char*>(raw.data()) + 32, 32, nullptr);
  if (!sig || !r || !s || ECDSA_SIG_set0(sig.get(), r, s) != 1) {
    BN_free(r);
    BN_free(s);
    return std::nullopt;
  }
  unsigned char* der = nullptr;
  const int n = i2d_ECDSA_SIG(sig.get(), &der);
  if (n <= 0) return std::nullopt;
  std::string out(reinterpret_cast<const char*>(der), static_cast<std::size_t>(n));
  OPENSSL_free(der);
  return out;
}

}  // namespace

std::optional<std::string> base64url_decode(std::string_view text) {
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() * 3 / 4);
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = b64url_value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFFu));
    }
  }
  // The unused low bits of the last character must be zero (one encoding per value).
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

Expected<JwtVerifier> JwtVerifier::load(const std::string& path, RigTokenRules rules) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(path, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec))
      if (e.path().extension() == ".pem" && e.is_regular_file(ec)) files.push_back(e.path());
    if (ec) return Error{Errc::io, "rig token keys " + path + ": " + ec.message()};
    std::sort(files.begin(), files.end());
  } else if (fs::is_regular_file(path, ec)) {
    files.emplace_back(path);
  } else {
    return Error{Errc::io, "rig token keys " + path + ": no such file or directory"};
  }
  if (files.empty()) return Error{Errc::invalid_argument, "rig token keys " + path + ": no *.pem file in it"};
  JwtVerifier v;
  v.rules_ = std::move(rules);
  for (const fs::path& f : files) {
    std::FILE* fp = std::fopen(f.c_str(), "r");
    if (!fp) return Error{Errc::io, "rig token key " + f.string() + ": cannot be read"};
    EVP_PKEY* raw = PEM_read_PUBKEY(fp, nullptr, nullptr, nullptr);
    std::fclose(fp);
    if (!raw) return Error{Errc::invalid_argument, "rig token key " + f.string() + ": not a PEM public key"};
    std::shared_ptr<EVP_PKEY> pkey(raw, EVP_PKEY_free);
    Key k{f.stem().string(), KeyType::ed25519, pkey};
    if (EVP_PKEY_get_base_id(raw) == EVP_PKEY_ED25519) {
      k.type = KeyType::ed25519;
    } else if (char group[64] = {}; EVP_PKEY_get_base_id(raw) == EVP_PKEY_EC &&
                                    EVP_PKEY_get_group_name(raw, group, sizeof group, nullptr) == 1 &&
                                    (std::string_view(group) == "prime256v1" || std::string_view(group) == "P-256")) {
      k.type = KeyType::p256;
    } else {
      return Error{Errc::invalid_argument,
                   "rig token key " + f.string() + ": only Ed25519 (EdDSA) and EC P-256 (ES256) keys are accepted"};
    }
    v.keys_.push_back(std::move(k));
  }
  return v;
}

const JwtVerifier::Key* JwtVerifier::key_for(const std::string& kid) const {
  if (kid.empty()) return keys_.size() == 1 ? &keys_.front() : nullptr;
  for (const Key& k : keys_)
    if (k.kid == kid) return &k;
  return nullptr;
}

Expected<RigTokenClaims> JwtVerifier::verify(std::string_view token, std::int64_t now_s) const {
  if (token.empty()) return refused("empty token");
  if (token.size() > kMaxTokenBytes) return refused("token longer than " + std::to_string(kMaxTokenBytes) + " bytes");
  const std::size_t dot1 = token.find('.');
  const std::size_t dot2 = dot1 == std::string_view::npos ? dot1 : token.find('.', dot1 + 1);
  if (dot2 == std::string_view::npos || token.find('.', dot2 + 1) != std::string_view::npos)
    return refused("not a JWS compact token (header.payload.signature)");
  const std::string_view signing_input = token.substr(0, dot2);

  Expected<json> header = json_part(token.substr(0, dot1), "header");
  if (!header) return header.error();
  const auto alg_it = header->find("alg");
  if (alg_it == header->end() || !alg_it->is_string()) return refused("header: no alg");
  const std::string alg = alg_it->get<std::string>();
  if (alg == "none" || alg == "None" || alg == "NONE") return refused("alg none is refused (unsigned token)");
  if (alg.rfind("HS", 0) == 0) return refused("alg " + alg + " is refused (shared secrets: use EdDSA or ES256)");
  if (alg != "EdDSA" && alg != "ES256") return refused("alg " + alg + " is not supported (EdDSA, ES256)");
  if (header->contains("crit")) return refused("header: crit extensions are not supported");
  std::string kid;
  if (const auto k = header->find("kid"); k != header->end()) {
    if (!k->is_string()) return refused("header: kid is not a string");
    kid = k->get<std::string>();
  }
  const Key* key = key_for(kid);
  if (!key) return refused(kid.empty() ? "header: kid required (several keys are configured)" : "unknown kid '" + kid + "'");
  if ((alg == "EdDSA") != (key->type == KeyType::ed25519))
    return refused("alg " + alg + " does not match key '" + key->kid + "'");

  const std::optional<std::string> sig = base64url_decode(token.substr(dot2 + 1));
  if (!sig) return refused("signature: not base64url");
  bool holds = false;
  if (key->type == KeyType::ed25519) {
    holds = sig->size() == 64 && signature_holds(key->pkey.get(), nullptr, signing_input, *sig);
  } else {
    const std::optional<std::string> der = es256_to_der(*sig);
    holds = der && signature_holds(key->pkey.get(), EVP_sha256(), signing_input, *der);
  }
  if (!holds) return refused("bad signature (key '" + key->kid + "')");

  // Signed by a key the operator trusts: now what it says.
  Expected<json> claims = json_part(token.substr(dot1 + 1, dot2 - dot1 - 1), "payload");
  if (!claims) return claims.error();
  Expected<std::optional<std::int64_t>> exp = date_claim(*claims, "exp");
  Expected<std::optional<std::int64_t>> iat = date_claim(*claims, "iat");
  Expected<std::optional<std::int64_t>> nbf = date_claim(*claims, "nbf");
  if (!exp) return exp.error();
  if (!iat) return iat.error();
  if (!nbf) return nbf.error();
  if (!*exp) return refused("no exp: rig tokens must expire");
  if (!*iat) return refused("no iat: its lifetime cannot be checked");
  const std::int64_t leeway = rules_.leeway_s;
  if (now_s >= **exp + leeway) return refused("expired " + std::to_string(now_s - **exp) + " s ago");
  if (*nbf && **nbf > now_s + leeway) return refused("not valid before " + std::to_string(**nbf) + " (nbf)");
  if (**iat > now_s + leeway) return refused("issued in the future (iat)");
  if (**exp <= **iat) return refused("exp is not after iat");
  if (**exp - **iat > rules_.max_lifetime_s)
    return refused("lives " + std::to_string(**exp - **iat) + " s, longer than the " +
                   std::to_string(rules_.max_lifetime_s) + " s allowed");
  RigTokenClaims out;
  out.expires_at_s = **exp;
  out.kid = key->kid;
  const auto sub = claims->find("sub");
  if (sub == claims->end() || !sub->is_string() || sub->get<std::string>().empty()) return refused("no sub");
  out.subject = sub->get<std::string>();
  if (!rules_.audience.empty()) {
    const auto aud = claims->find("aud");
    bool named = false;
    if (aud != claims->end() && aud->is_string()) named = aud->get<std::string>() == rules_.audience;
    if (aud != claims->end() && aud->is_array())
      for (const json& a : *aud) named = named || (a.is_string() && a.get<std::string>() == rules_.audience);
    if (!named) return refused("aud does not name '" + rules_.audience + "'");
  }
  const auto kinds = claims->find("fleetlink_kinds");
  if (kinds == claims->end() || !kinds->is_array()) return refused("no fleetlink_kinds array");
  if (kinds->size() > 64) return refused("fleetlink_kinds: more than 64 entries");
  for (const json& k : *kinds) {
    if (!k.is_string() || !kind_text_ok(k.get<std::string>()))
      return refused("fleetlink_kinds: entries must be kind names (1..64 printable characters)");
    out.kinds.push_back(k.get<std::string>());
  }
  std::sort(out.kinds.begin(), out.kinds.end());
  out.kinds.erase(std::unique(out.kinds.begin(), out.kinds.end()), out.kinds.end());
  return out;
}

}  // namespace fleetlink::broker::net
