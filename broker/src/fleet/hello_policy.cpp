#include "fleet/hello_policy.hpp"

#include "fleetlink/limits.hpp"
#include "fleetlink/uuid.hpp"

namespace fleetlink::broker {

bool identity_matches(std::string_view rig_id, const CertIdentity& id) noexcept {
  if (rig_id.empty()) return false;
  if (id.common_name == rig_id) return true;
  for (const auto& san : id.dns_sans)
    if (san == rig_id) return true;
  return false;
}

std::optional<std::string> hello_problem(const msg::Hello& hello) {
  // The SDK's rules, the same the codec applied when the frame was decoded and the
  // agent's --check-config applies to the HELLO it would send (fleetlink/limits.hpp).
  if (auto problem = hello_field_problem(hello)) return std::move(problem->text);
  return std::nullopt;
}

HelloDecision decide_hello(const msg::Hello& hello, const std::optional<CertIdentity>& identity,
                           const std::optional<ExistingConnection>& existing) {
  if (auto problem = hello_problem(hello)) return {HelloVerdict::reject_malformed, *problem};
  if (identity && !identity_matches(hello.rig_id, *identity)) {
    std::string cn = identity->common_name.substr(0, 40);
    return {HelloVerdict::reject_identity,
            "rig_id " + hello.rig_id.substr(0, 40) + " is not the certificate's identity " + cn};
  }
  // A connection of the rig is already here. Whatever the boot_id says (a cloned
  // configuration on a second machine starts with a newer one), it keeps the rig
  // while it answers pings: it is probed, and the newcomer waits for the answer
  // (the pong: the newcomer is refused 4409; none within the pong timeout: the old
  // one is closed 4410 and the newcomer admitted). A real reboot is fast anyway:
  // the old socket's peer is gone, so the probe gets a reset and the old
  // connection closes at once. One that already missed a pong is not alive.
  if (!existing) return {HelloVerdict::accept, {}};
  if (existing->closing) return {HelloVerdict::accept, "previous connection already closing"};
  if (existing->missed_pongs > 0)
    return {HelloVerdict::supersede_existing, "previous connection missed pongs"};
  return {HelloVerdict::probe_existing, "the rig has a connection that may be alive: probing it first"};
}

CloseCode close_code_for(HelloVerdict v) noexcept {
  switch (v) {
    case HelloVerdict::reject_malformed: return CloseCode::malformed;
    case HelloVerdict::reject_identity: return CloseCode::identity_mismatch;
    case HelloVerdict::reject_duplicate: return CloseCode::duplicate_connection;
    case HelloVerdict::supersede_existing: return CloseCode::superseded;
    case HelloVerdict::probe_existing:
    case HelloVerdict::accept: break;
  }
  return CloseCode::normal;
}

const char* to_string(HelloVerdict v) noexcept {
  switch (v) {
    case HelloVerdict::accept: return "accepted";
    case HelloVerdict::supersede_existing: return "superseded_old";
    case HelloVerdict::probe_existing: return "probing_old";
    case HelloVerdict::reject_malformed: return "malformed";
    case HelloVerdict::reject_identity: return "identity_mismatch";
    case HelloVerdict::reject_duplicate: return "duplicate";
  }
  return "unknown";
}

}  // namespace fleetlink::broker
