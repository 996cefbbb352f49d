#pragma once
// What to do with a HELLO, as pure logic (no sockets): unit-tested in
// tests/unit/broker/test_hello_policy.cpp. The broker gathers the facts
// (certificate identity, the rig's current connection if any) and acts on the verdict.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fleetlink/close_codes.hpp"
#include "fleetlink/messages.hpp"

namespace fleetlink::broker {

// Identities a client certificate vouches for: its subject CN and DNS SANs.
struct CertIdentity {
  std::string subject;                 // one-line subject, for logs
  std::string common_name;
  std::vector<std::string> dns_sans;
};

bool identity_matches(std::string_view rig_id, const CertIdentity& id) noexcept;

// The rig's existing connection on this broker, as the policy needs to see it.
struct ExistingConnection {
  std::string boot_id;
  bool closing = false;        // already being closed
  unsigned missed_pongs = 0;   // > 0: the connection already missed a pong: not alive
};

enum class HelloVerdict : std::uint8_t {
  accept,              // WELCOME, register
  supersede_existing,  // WELCOME, register, close the old connection 4410
  probe_existing,      // the old connection may be alive: ping it, the newcomer waits for
                       // the pong (-> reject_duplicate) or its absence (-> supersede_existing)
  reject_malformed,    // close 4400
  reject_identity,     // close 4401
  reject_duplicate,    // close 4409 (the existing connection is live and healthy)
};

struct HelloDecision {
  HelloVerdict verdict = HelloVerdict::accept;
  std::string reason;  // for the close frame and the log (<= 123 bytes)
};

// Field validation of a HELLO (rig id shape, boot_id a UUIDv7, bounded sizes): the
// SDK's hello_field_problem (fleetlink/limits.hpp), its sentence.
std::optional<std::string> hello_problem(const msg::Hello& hello);

// `identity` is empty when the listener does not authenticate (plain ws, bench/dev).
HelloDecision decide_hello(const msg::Hello& hello, const std::optional<CertIdentity>& identity,
                           const std::optional<ExistingConnection>& existing);

// UUIDv7 text sorts in creation order: a is older than b.
inline bool boot_id_older(std::string_view a, std::string_view b) noexcept { return a < b; }

CloseCode close_code_for(HelloVerdict v) noexcept;
const char* to_string(HelloVerdict v) noexcept;

}  // namespace fleetlink::broker
