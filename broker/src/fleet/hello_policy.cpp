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
  // The rule of the design: a live, healthy connection is kept and the newcomer
  // refused (4409: a cloned config, or the same agent whose old socket is half-open
  // and not yet detected -- the broker then probes that socket at once, so the
  // agent's retry wins after one pong timeout); a stale one (older boot_id, or a
  // connection that already missed a pong) is superseded (4410 to the old socket).
  if (!existing) return {HelloVerdict::accept, {}};
  if (existing->closing) return {HelloVerdict::accept, "previous connection already closing"};
  if (boot_id_older(existing->boot_id, hello.boot_id))
    return {HelloVerdict::supersede_existing, "newer boot_id"};
  if (existing->missed_pongs > 0)
    return {HelloVerdict::supersede_existing, "previous connection missed pongs"};
  return {HelloVerdict::reject_duplicate, "rig already has a live connection"};
}

CloseCode close_code_for(HelloVerdict v) noexcept {
  switch (v) {
    case HelloVerdict::reject_malformed: return CloseCode::malformed;
    case HelloVerdict::reject_identity: return CloseCode::identity_mismatch;
    case HelloVerdict::reject_duplicate: return CloseCode::duplicate_connection;
    case HelloVerdict::supersede_existing: return CloseCode::superseded;
    case HelloVerdict::accept: break;
  }
  return CloseCode::normal;
}

const char* to_string(HelloVerdict v) noexcept {
  switch (v) {
    case HelloVerdict::accept: return "accepted";
    case HelloVerdict::supersede_existing: return "superseded_old";
    case HelloVerdict::reject_malformed: return "malformed";
    case HelloVerdict::reject_identity: return "identity_mismatch";
    case HelloVerdict::reject_duplicate: return "duplicate";
  }
  return "unknown";
}

}  // namespace fleetlink::broker
