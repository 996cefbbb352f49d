// Rig tokens (net/jwt_verifier.hpp): tokens are signed here with OpenSSL, the
// way an operator's minting script does, and verified as the broker does.
#include <doctest/doctest.h>

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "net/jwt_verifier.hpp"

using fleetlink::broker::net::base64url_decode;
using fleetlink::broker::net::JwtVerifier;
using fleetlink::broker::net::RigTokenRules;
using nlohmann::json;

namespace {

constexpr std::int64_t kNow = 1'800'000'000;

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/fleetlink-jwt-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

using Pkey = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

Pkey ed25519() { return Pkey(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"), EVP_PKEY_free); }
Pkey p256() { return Pkey(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"), EVP_PKEY_free); }

void write_public(EVP_PKEY* k, const std::string& file) {
  std::FILE* fp = std::fopen(file.c_str(), "w");
  REQUIRE(fp);
  REQUIRE(PEM_write_PUBKEY(fp, k) == 1);
  std::fclose(fp);
}

std::string b64url(std::string_view in) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : in) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(abc[(acc >> bits) & 63u]);
    }
  }
  if (bits > 0) out.push_back(abc[(acc << (6 - bits)) & 63u]);
  return out;
}

std::string sign_raw(EVP_PKEY* k, const std::string& input) {
  const bool ed = EVP_PKEY_get_base_id(k) == EVP_PKEY_ED25519;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  REQUIRE(EVP_DigestSignInit(ctx.get(), nullptr, ed ? nullptr : EVP_sha256(), nullptr, k) == 1);
  std::size_t n = 0;
  const auto* in = reinterpret_cast<const unsigned char*>(input.data());
  REQUIRE(EVP_DigestSign(ctx.get(), nullptr, &n, in, input.size()) == 1);
  std::string sig(n, '\0');
  REQUIRE(EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &n, in, input.size()) == 1);
  sig.resize(n);
  if (ed) return sig;
  // DER -> r || s (JWS)
  const auto* p = reinterpret_cast<const unsigned char*>(sig.data());
  ECDSA_SIG* es = d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(sig.size()));
  REQUIRE(es);
  std::string raw(64, '\0');
  BN_bn2binpad(ECDSA_SIG_get0_r(es), reinterpret_cast<unsigned char*>(raw.data()), 32);
  BN_bn2binpad(ECDSA_SIG_get0_s(es), reinterpret_cast<unsigned char*>(raw.data()) + 32, 32);
  ECDSA_SIG_free(es);
  return raw;
}

json good_claims() {
  return {{"sub", "rig-0414"}, {"iat", kNow - 60}, {"exp", kNow + 3600}, {"fleetlink_kinds", {"suite", "dmesg"}}};
}

std::string mint(EVP_PKEY* k, const json& header, const json& claims) {
  const std::string input = b64url(header.dump()) + "." + b64url(claims.dump());
  return input + "." + b64url(sign_raw(k, input));
}

struct Keys {
  TempDir dir;
  Pkey ed = ed25519();
  Pkey ec = p256();
  Pkey stranger = ed25519();
  Keys() {
    write_public(ed.get(), dir.path + "/lab-ed.pem");
    write_public(ec.get(), dir.path + "/lab-ec.pem");
  }
  JwtVerifier verifier(RigTokenRules rules = {}) const {
    auto v = JwtVerifier::load(dir.path, std::move(rules));
    REQUIRE(v);
    return *v;
  }
};

std::string refusal(const JwtVerifier& v, const std::string& token) {
  auto r = v.verify(token, kNow);
  REQUIRE_FALSE(r);
  return r.error().detail;
}

}  // namespace

TEST_CASE("base64url: the alphabet without padding, one encoding per value") {
  CHECK(base64url_decode("") == std::string());
  CHECK(base64url_decode("Zg") == std::string("f"));
  CHECK(base64url_decode("Zm8") == std::string("fo"));
  CHECK(base64url_decode("Zm9v") == std::string("foo"));
  CHECK(base64url_decode("-_8") == std::string("\xfb\xff"));
  CHECK_FALSE(base64url_decode("Zg=="));   // padding
  CHECK_FALSE(base64url_decode("Zm9v+"));  // base64, not base64url
  CHECK_FALSE(base64url_decode("Z"));      // 4n+1 characters
  CHECK_FALSE(base64url_decode("Zh"));     // non-zero unused bits
  for (const std::string& s : std::vector<std::string>{"a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)})
    CHECK(base64url_decode(b64url(s)) == s);
}

TEST_CASE("keys: a directory of PEM public keys named by kid; a bad one is an error naming it") {
  Keys k;
  JwtVerifier v = k.verifier();
  CHECK(v.key_count() == 2);
  {
    std::FILE* fp = std::fopen((k.dir.path + "/junk.pem").c_str(), "w");
    std::fputs("not a key\n", fp);
    std::fclose(fp);
    auto bad = JwtVerifier::load(k.dir.path, {});
    REQUIRE_FALSE(bad);
    CHECK(bad.error().detail.find("junk.pem") != std::string::npos);
  }
  Pkey rsa(EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", static_cast<std::size_t>(2048)), EVP_PKEY_free);
  TempDir other;
  write_public(rsa.get(), other.path + "/rsa.pem");
  auto refused = JwtVerifier::load(other.path + "/rsa.pem", {});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().detail.find("Ed25519") != std::string::npos);
  CHECK_FALSE(JwtVerifier::load(other.path + "/absent", {}));
}

TEST_CASE("a good token: EdDSA and ES256, kid chooses the key, kinds sorted") {
  Keys k;
  JwtVerifier v = k.verifier();
  auto ed = v.verify(mint(k.ed.get(), {{"alg", "EdDSA"}, {"kid", "lab-ed"}, {"typ", "JWT"}}, good_claims()), kNow);
  REQUIRE(ed);
  CHECK(ed->subject == "rig-0414");
  CHECK(ed->kinds == std::vector<std::string>{"dmesg", "suite"});
  CHECK(ed->expires_at_s == kNow + 3600);
  CHECK(ed->kid == "lab-ed");
  auto ec = v.verify(mint(k.ec.get(), {{"alg", "ES256"}, {"kid", "lab-ec"}}, good_claims()), kNow);
  REQUIRE(ec);
  CHECK(ec->kid == "lab-ec");
  // one key configured: kid may be left out
  JwtVerifier single = *JwtVerifier::load(k.dir.path + "/lab-ed.pem", {});
  CHECK(single.verify(mint(k.ed.get(), {{"alg", "EdDSA"}}, good_claims()), kNow));
  // several: it may not
  CHECK(refusal(v, mint(k.ed.get(), {{"alg", "EdDSA"}}, good_claims())).find("kid required") != std::string::npos);
}

TEST_CASE("signatures: a wrong key, a tampered payload, an alg that does not fit the key") {
  Keys k;
  JwtVerifier v = k.verifier();
  CHECK(refusal(v, mint(k.stranger.get(), {{"alg", "EdDSA"}, {"kid", "lab-ed"}}, good_claims())).find("bad signature") !=
        std::string::npos);
  std::string t = mint(k.ed.get(), {{"alg", "EdDSA"}, {"kid", "lab-ed"}}, good_claims());
  json more = good_claims();
  more["fleetlink_kinds"] = {"suite", "dmesg", "reboot"};
  const std::size_t d1 = t.find('.'), d2 = t.rfind('.');
  const std::string tampered = t.substr(0, d1 + 1) + b64url(more.dump()) + t.substr(d2);
  CHECK(refusal(v, tampered).find("bad signature") != std::string::npos);
  CHECK(refusal(v, mint(k.ec.get(), {{"alg", "ES256"}, {"kid", "lab-ed"}}, good_claims())).find("does not match") !=
        std::string::npos);
  CHECK(refusal(v, mint(k.ed.get(), {{"alg", "EdDSA"}, {"kid", "nope"}}, good_claims())).find("unknown kid") !=
        std::string::npos);
  // An ES256 signature of the wrong length
  const std::string es = mint(k.ec.get(), {{"alg", "ES256"}, {"kid", "lab-ec"}}, good_claims());
  CHECK(refusal(v, es.substr(0, es.rfind('.') + 1) + b64url(std::string(63, 'x'))).find("bad signature") !=
        std::string::npos);
}

TEST_CASE("alg none and HMAC are refused whatever else the token says") {
  Keys k;
  JwtVerifier v = k.verifier();
  const std::string body = b64url(good_claims().dump());
  CHECK(refusal(v, b64url(json{{"alg", "none"}}.dump()) + "." + body + ".").find("alg none") != std::string::npos);
  CHECK(refusal(v, b64url(json{{"alg", "HS256"}, {"kid", "lab-ed"}}.dump()) + "." + body + "." + b64url("mac"))
            .find("HS256 is refused") != std::string::npos);
  CHECK(refusal(v, b64url(json{{"alg", "RS256"}}.dump()) + "." + body + "." + b64url("sig")).find("not supported") !=
        std::string::npos);
}

TEST_CASE("time: expired, not yet valid, issued in the future, too long-lived; the leeway") {
  Keys k;
  RigTokenRules rules;
  rules.max_lifetime_s = 86400;
  rules.leeway_s = 60;
  JwtVerifier v = k.verifier(rules);
  const json h{{"alg", "EdDSA"}, {"kid", "lab-ed"}};
  auto with = [&](const char* claim, json value) {
    json c = good_claims();
    if (value.is_null())
      c.erase(claim);
    else
      c[claim] = std::move(value);
    return mint(k.ed.get(), h, c);
  };
  CHECK(refusal(v, with("exp", kNow - 61)).find("expired") != std::string::npos);
  CHECK(v.verify(with("exp", kNow - 30), kNow));  // within the leeway
  CHECK(refusal(v, with("nbf", kNow + 600)).find("nbf") != std::string::npos);
  CHECK(v.verify(with("nbf", kNow - 10), kNow));
  CHECK(refusal(v, with("iat", kNow + 600)).find("future") != std::string::npos);
  json long_lived = good_claims();
  long_lived["iat"] = kNow - 10;
  long_lived["exp"] = kNow - 10 + 86401;
  CHECK(refusal(v, mint(k.ed.get(), h, long_lived)).find("longer than the 86400 s") != std::string::npos);
  CHECK(refusal(v, with("exp", nullptr)).find("no exp") != std::string::npos);
  CHECK(refusal(v, with("iat", nullptr)).find("no iat") != std::string::npos);
  CHECK(refusal(v, with("exp", "soon")).find("exp: not a number") != std::string::npos);
}

TEST_CASE("claims: sub, aud, fleetlink_kinds") {
  Keys k;
  const json h{{"alg", "EdDSA"}, {"kid", "lab-ed"}};
  JwtVerifier v = k.verifier();
  json c = good_claims();
  c.erase("sub");
  CHECK(refusal(v, mint(k.ed.get(), h, c)).find("no sub") != std::string::npos);
  c = good_claims();
  c.erase("fleetlink_kinds");
  CHECK(refusal(v, mint(k.ed.get(), h, c)).find("fleetlink_kinds") != std::string::npos);
  c = good_claims();
  c["fleetlink_kinds"] = {"dmesg", 7};
  CHECK(refusal(v, mint(k.ed.get(), h, c)).find("fleetlink_kinds") != std::string::npos);
  c = good_claims();
  c["fleetlink_kinds"] = json::array();
  auto none = v.verify(mint(k.ed.get(), h, c), kNow);
  REQUIRE(none);  // a token may grant nothing
  CHECK(none->kinds.empty());

  RigTokenRules with_aud;
  with_aud.audience = "lab-a";
  JwtVerifier va = k.verifier(with_aud);
  CHECK(refusal(va, mint(k.ed.get(), h, good_claims())).find("aud") != std::string::npos);
  c = good_claims();
  c["aud"] = "lab-b";
  CHECK(refusal(va, mint(k.ed.get(), h, c)).find("aud") != std::string::npos);
  c["aud"] = "lab-a";
  CHECK(va.verify(mint(k.ed.get(), h, c), kNow));
  c["aud"] = {"lab-b", "lab-a"};
  CHECK(va.verify(mint(k.ed.get(), h, c), kNow));
}

TEST_CASE("malformed tokens: parts, base64url, JSON") {
  Keys k;
  JwtVerifier v = k.verifier();
  CHECK(refusal(v, "").find("empty") != std::string::npos);
  CHECK(refusal(v, "abc").find("compact") != std::string::npos);
  CHECK(refusal(v, "a.b.c.d").find("compact") != std::string::npos);
  CHECK(refusal(v, "!!.e30.").find("header: not base64url") != std::string::npos);
  CHECK(refusal(v, b64url("{\"alg\":") + ".e30.").find("header: not a JSON object") != std::string::npos);
  CHECK(refusal(v, b64url("[1]") + ".e30.").find("not a JSON object") != std::string::npos);
  CHECK(refusal(v, std::string(5000, 'a')).find("longer than") != std::string::npos);
  // A signature that holds over a payload that is not JSON
  const std::string input = b64url(json{{"alg", "EdDSA"}, {"kid", "lab-ed"}}.dump()) + "." + b64url("not json");
  CHECK(refusal(v, input + "." + b64url(sign_raw(k.ed.get(), input))).find("payload: not a JSON object") !=
        std::string::npos);
  const std::string good = mint(k.ed.get(), {{"alg", "EdDSA"}, {"kid", "lab-ed"}}, good_claims());
  CHECK(refusal(v, good + "=").find("signature: not base64url") != std::string::npos);
}
