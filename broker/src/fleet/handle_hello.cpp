// HELLO: the first frame of every connection. Decides (hello_policy) whether the
// connection becomes the rig's, supersedes a stale one, or is refused; then
// claims the rig fleet-wide (RegistryBackend) and WELCOMEs it.
#include "fleet/fleet_core.hpp"

namespace fleetlink::broker {

void FleetCore::on_hello(RigSession& s, msg::Hello hello) {
  std::optional<CertIdentity> identity;
  if (s.authenticated) {
    identity = transport_.peer_identity(s);
    if (!identity) identity = CertIdentity{};  // TLS without a peer certificate: matches nothing
  }
  std::optional<ExistingConnection> existing;
  RigSession* old = registry_.find(hello.rig_id);
  if (old)
    existing = ExistingConnection{old->boot_id.to_string(), old->phase == SessionPhase::closing, old->keepalive.missed};
  HelloDecision d = decide_hello(hello, identity, existing);
  if (d.verdict == HelloVerdict::supersede_existing && old) {
    // The old connection goes first, so that its claim is released before the new one.
    observer_.superseding(*old, hello, d.reason);
    close_session(*old, CloseCode::superseded, "superseded by a newer connection");
  }
  if (d.verdict == HelloVerdict::accept || d.verdict == HelloVerdict::supersede_existing) {
    const ClaimOutcome claim =
        registry_.claim(hello, d.verdict == HelloVerdict::supersede_existing, clock_.wall_ms());
    if (claim == ClaimOutcome::lost) d = {HelloVerdict::reject_duplicate, "rig is live elsewhere with a newer boot"};
  }
  const std::string peer = transport_.peer_address(s);
  const std::string subject = identity ? identity->subject : "(plain)";
  observer_.hello(s, hello, d, peer, subject);
  if (d.verdict != HelloVerdict::accept && d.verdict != HelloVerdict::supersede_existing) {
    if (d.verdict == HelloVerdict::reject_duplicate && old && old->phase == SessionPhase::live && existing &&
        existing->boot_id == hello.boot_id && !old->outbound.ping) {
      // The same agent process says it reconnected: its old socket is probably
      // half-open. Probe it now instead of waiting for the next ping.
      observer_.probing(*old);
      old->outbound.ping = true;
      old->keepalive.ping_sent(clock_.mono_ms(), settings_.keepalive);
      transport_.write_soon(*old);
    }
    close_session(s, close_code_for(d.verdict), d.reason);
    return;
  }
  const std::string boot_id = hello.boot_id;
  registry_.add(s, std::move(hello));
  // The boot the rig had before (its superseded connection, or the inventory), if another.
  std::string previous = existing ? existing->boot_id : std::string();
  if (const auto seen = offline_.find(s.rig_id); previous.empty() && seen != offline_.end())
    previous = seen->second.boot_id;
  if (previous != boot_id) s.previous_boot_id = parse_uuid(previous).value_or(Uuid{});
  s.phase = SessionPhase::live;
  s.keepalive.start(clock_.mono_ms(), settings_.keepalive);
  s.outbound.welcome = true;
  transport_.write_soon(s);
  observer_.rig_registered(s);
  // The inventory: written when the rig is new or says something new about itself.
  RigRecord now_known = rig_record(s);
  if (const auto seen = offline_.find(s.rig_id); seen != offline_.end()) {
    const RigRecord& before = seen->second;
    now_known.first_seen_ms = before.first_seen_ms;
    if (before.boot_id != now_known.boot_id || before.agent_version != now_known.agent_version ||
        before.labels != now_known.labels || before.kinds != now_known.kinds || before.broker_id != now_known.broker_id)
      store_.put_rig(now_known);
    offline_.erase(seen);
  } else {
    store_.put_rig(now_known);
  }
  emit(EventType::rig_connected, s.rig_id, {}, boot_id);
  // WELCOME goes first (outbound.hpp), then what waits for the rig.
  deliver_open(s);
}

}  // namespace fleetlink::broker
