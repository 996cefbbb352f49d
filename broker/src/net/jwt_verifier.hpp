#pragma once
// Rig tokens (--rig-token): a short-lived JWT a rig presents on its WebSocket
// upgrade (Authorization: Bearer), verified here against the operator's public
// keys, whose `fleetlink_kinds` claim limits the command kinds the broker sends
// to that rig. Only asymmetric signatures are accepted (EdDSA with Ed25519,
// ES256): the broker holds public keys only, so it can check tokens but never
// mint one. `alg: none` and HMAC (HS*) are refused, whatever the key.
//
// The fleet core never sees a token: it gets what one granted (fleet/rig_grant.hpp).
#include <openssl/evp.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fleetlink/expected.hpp"

namespace fleetlink::broker::net {

// RFC 4648 §5 without padding (JWS compact serialisation, RFC 7515 §2); a '=',
// a character outside the alphabet or an impossible length (4n+1) is refused.
std::optional<std::string> base64url_decode(std::string_view text);

struct RigTokenRules {
  // A token whose exp - iat is longer than this is refused: "short-lived" is enforced, not hoped for.
  std::int64_t max_lifetime_s = 86400;
  // Clock skew tolerated for exp, nbf and iat.
  std::int64_t leeway_s = 60;
  // When set, the token's aud (a string or an array) must name it.
  std::string audience;
};

// What a verified token says.
struct RigTokenClaims {
  std::string subject;             // sub: the rig it was issued for
  std::vector<std::string> kinds;  // fleetlink_kinds, sorted and unique
  std::int64_t expires_at_s = 0;   // exp
  std::string kid;                 // the key that signed it
};

class JwtVerifier {
 public:
  // path: one PEM public key file, or a directory of them (every *.pem in it).
  // A key's id (the token header's kid) is its file name without ".pem". Only
  // Ed25519 and EC P-256 keys; any other file named *.pem is an error.
  static Expected<JwtVerifier> load(const std::string& path, RigTokenRules rules);

  Expected<RigTokenClaims> verify(std::string_view token, std::int64_t now_s) const;

  std::size_t key_count() const noexcept { return keys_.size(); }
  const RigTokenRules& rules() const noexcept { return rules_; }

  // Longest token accepted (the upgrade's header is bounded by lws anyway).
  static constexpr std::size_t kMaxTokenBytes = 4096;

 private:
  enum class KeyType : std::uint8_t { ed25519, p256 };
  struct Key {
    std::string kid;
    KeyType type;
    std::shared_ptr<EVP_PKEY> pkey;
  };
  const Key* key_for(const std::string& kid) const;

  std::vector<Key> keys_;
  RigTokenRules rules_;
};

}  // namespace fleetlink::broker::net
