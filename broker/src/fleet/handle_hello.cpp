// HELLO: the first frame of every connection. Decides (hello_policy) whether the
// connection becomes the rig's, supersedes a stale one, or is refused; then
// claims the rig fleet-wide (RegistryBackend) and WELCOMEs it. The claim may be
// answered later (Redis): until then the session is `claiming`, and whatever
// happened meanwhile (it closed, another connection of the rig was admitted)
// is looked at again when the answer comes.
#include "fleet/fleet_core.hpp"

namespace fleetlink::broker {

// What a HELLO waiting for its claim carries to the answer.
struct FleetCore::PendingHello {
  msg::Hello hello;
  HelloDecision decision;
  std::string previous_boot;  // the boot of the connection it superseded here, if any
  std::string subject;
};

void FleetCore::on_hello(RigSession& s, msg::Hello hello) {
  if (s.claiming) {
    close_session(s, CloseCode::malformed, "a second HELLO before the WELCOME");
    return;
  }
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
  if (d.verdict == HelloVerdict::accept || d.verdict == HelloVerdict::supersede_existing)
    if (std::optional<std::string> token = token_problem(settings_.rig_token, s.grant(), hello.rig_id))
      d = {HelloVerdict::reject_identity, std::move(*token)};
  if (d.verdict == HelloVerdict::supersede_existing && old) {
    // The old connection goes first, so that its claim is released before the new one.
    observer_.superseding(*old, hello, d.reason);
    close_session(*old, CloseCode::superseded, "superseded by a newer connection");
  }
  auto pending = std::make_shared<PendingHello>(
      PendingHello{std::move(hello), std::move(d), existing ? existing->boot_id : std::string(),
                   identity ? identity->subject : "(plain)"});
  const HelloVerdict verdict = pending->decision.verdict;
  if (verdict == HelloVerdict::probe_existing && old) {
    wait_for_probe(s, *old, pending);
    return;
  }
  if (verdict != HelloVerdict::accept && verdict != HelloVerdict::supersede_existing) {
    refuse_hello(s, *pending);
    return;
  }
  s.claiming = true;
  claiming_.emplace(s.serial, &s);
  continue_hello(s, pending, verdict);
}

void FleetCore::continue_hello(RigSession& s, const std::shared_ptr<PendingHello>& pending, HelloVerdict verdict) {
  pending->decision.verdict = verdict;
  const std::uint32_t serial = s.serial;
  if (registry_.shared() && mesh_ != nullptr && verdict == HelloVerdict::accept) {
    // Several brokers: a connection of the rig on another one is asked about
    // first, whatever its boot (a cloned identity has a newer one): it keeps
    // the rig while it answers pings.
    registry_.lookup(pending->hello.rig_id, clock_.wall_ms(),
                     [this, serial, pending](Expected<std::optional<RegistryEntry>> owner) {
                       if (claiming_session(serial) == nullptr) return;
                       if (owner && *owner && (*owner)->broker_id != settings_.broker_id)
                         return ask_owner(serial, pending, **owner);
                       claim_rig(serial, pending, false);
                     });
    return;
  }
  claim_rig(serial, pending, verdict == HelloVerdict::supersede_existing);
}

// ---------------------------------------------------------------------------------
// a HELLO for a rig connected here: the old connection is probed, whatever the
// boot_id, and the newcomer waits at most the pong timeout for the verdict

void FleetCore::wait_for_probe(RigSession& s, RigSession& old, const std::shared_ptr<PendingHello>& p) {
  if (const auto it = probes_.find(old.serial); it != probes_.end()) {
    if (claiming_session(it->second.waiter) != nullptr) {
      // One newcomer at a time: another is already waiting for this probe.
      p->decision = {HelloVerdict::reject_duplicate, "rig already has a live connection (another takeover is being decided)"};
      refuse_hello(s, *p);
      return;
    }
    probes_.erase(it);  // its newcomer left meanwhile: this one waits instead
  }
  s.claiming = true;
  s.awaiting_probe = true;
  claiming_.emplace(s.serial, &s);
  probes_.insert_or_assign(old.serial, HelloProbe{&old, s.serial, p, clock_.mono_ms() + settings_.keepalive.pong_timeout_ms});
  observer_.probing(old);
  // A ping now, also when one is already queued or out: any pong from here on says alive.
  old.keepalive.ping_sent(clock_.mono_ms(), settings_.keepalive);
  if (!old.outbound.ping) {
    old.outbound.ping = true;
    transport_.write_soon(old);
  }
}

void FleetCore::probe_answered(RigSession& old) {
  const auto it = probes_.find(old.serial);
  if (it == probes_.end()) return;
  HelloProbe probe = std::move(it->second);
  probes_.erase(it);
  RigSession* waiter = claiming_session(probe.waiter);
  if (waiter == nullptr) return;  // the newcomer left meanwhile
  waiter->awaiting_probe = false;
  probe.pending->decision = {HelloVerdict::reject_duplicate, "rig already has a live connection (it answered a ping)"};
  refuse_hello(*waiter, *probe.pending);
}

void FleetCore::probed_connection_gone(const RigSession& old) {
  const auto it = probes_.find(old.serial);
  if (it == probes_.end()) return;
  HelloProbe probe = std::move(it->second);
  probes_.erase(it);
  RigSession* waiter = claiming_session(probe.waiter);
  if (waiter == nullptr) return;
  waiter->awaiting_probe = false;
  // The old connection is gone (closed by its peer, or superseded below): the
  // newcomer's HELLO goes on as if it had been alone; the rig's boot before it
  // is the old connection's (PendingHello::previous_boot).
  continue_hello(*waiter, probe.pending, old.close_code == static_cast<std::uint16_t>(CloseCode::superseded)
                                             ? HelloVerdict::supersede_existing
                                             : HelloVerdict::accept);
}

void FleetCore::expire_probes(std::uint32_t now) {
  std::vector<RigSession*> silent;
  for (const auto& [serial, probe] : probes_)
    if (static_cast<std::int32_t>(now - probe.deadline_ms) >= 0) silent.push_back(probe.old);
  for (RigSession* old : silent) {
    const auto it = probes_.find(old->serial);
    if (it == probes_.end()) continue;
    if (claiming_session(it->second.waiter) == nullptr) {
      probes_.erase(it);  // the newcomer left: nobody to make room for (the keepalive judges the old one)
      continue;
    }
    observer_.superseding(*old, it->second.pending->hello,
                          "no pong within " + std::to_string(settings_.keepalive.pong_timeout_ms) + " ms");
    // Closing it lands in probed_connection_gone(), which lets the newcomer in.
    close_session(*old, CloseCode::superseded, "superseded: no pong within " +
                                                   std::to_string(settings_.keepalive.pong_timeout_ms) +
                                                   " ms while another connection of the rig waited");
  }
}

void FleetCore::claim_rig(std::uint32_t serial, const std::shared_ptr<PendingHello>& p, bool force) {
  registry_.claim(p->hello, force, clock_.wall_ms(),
                  [this, serial, p, force](Expected<ClaimResult> r) { claim_answered(serial, p, std::move(r), force); });
}

void FleetCore::ask_owner(std::uint32_t serial, const std::shared_ptr<PendingHello>& p, const RegistryEntry& owner) {
  // Live on another broker: it is asked to probe that connection (no pong
  // closes it and frees the rig for the rig's next attempt). A broker nobody
  // listens for is gone: the rig is this one's at once.
  MeshNote note;
  note.kind = MeshKind::probe;
  note.from = settings_.broker_id;
  note.rig_id = p->hello.rig_id;
  note.boot_id = owner.boot_id;
  const std::string owner_id = owner.broker_id;
  mesh_->send(owner_id, note, [this, serial, p, owner_id](Expected<std::size_t> listeners) {
    RigSession* again = claiming_session(serial);
    if (again == nullptr) return;
    if (listeners && *listeners == 0) {
      observer_.owner_gone(p->hello.rig_id, owner_id);
      claim_rig(serial, p, true);
      return;
    }
    p->decision = {HelloVerdict::reject_duplicate, "rig is live on broker " + owner_id + " (asked to probe it)"};
    refuse_hello(*again, *p);
  });
}

void FleetCore::probe(RigSession& s) {  // asked by another broker (MeshKind::probe)
  if (s.phase != SessionPhase::live || s.outbound.ping) return;
  // Probe it now instead of waiting for the next ping: no pong in time closes it (4002).
  observer_.probing(s);
  s.outbound.ping = true;
  s.keepalive.ping_sent(clock_.mono_ms(), settings_.keepalive);
  transport_.write_soon(s);
}

RigSession* FleetCore::claiming_session(std::uint32_t serial) const {
  const auto it = claiming_.find(serial);
  // Closed meanwhile: gone, also while its close is still on its way.
  if (it == claiming_.end() || it->second->phase == SessionPhase::closing) return nullptr;
  return it->second;
}

void FleetCore::claim_answered(std::uint32_t serial, const std::shared_ptr<PendingHello>& p,
                               Expected<ClaimResult> r, bool forced) {
  RigSession* s = claiming_session(serial);
  const std::string& rig_id = p->hello.rig_id;
  if (s == nullptr) {
    // The connection went meanwhile: the entry it won is nobody's.
    if (r && r->outcome != ClaimOutcome::lost) registry_.release_stale(rig_id, p->hello.boot_id);
    return;
  }
  if (!r) {
    // The registry cannot be reached: the rig is served here, and its entry is
    // written when the registry is back (registry_recovered()).
    observer_.registry_unavailable(rig_id, r.error().detail);
    admit(*s, *p);
    return;
  }
  const std::optional<RegistryEntry>& other = r->before;
  const bool elsewhere = other && other->broker_id != settings_.broker_id;
  if (r->outcome == ClaimOutcome::lost) {
    if (!forced && other && !elsewhere && registry_.find(rig_id) == nullptr) {
      // This broker's own entry without a connection here: left by an earlier
      // process with the same broker id (its TTL has not run out). Take it.
      claim_rig(serial, p, true);
      return;
    }
    if (!forced && elsewhere && mesh_ != nullptr) return ask_owner(serial, p, *other);
    p->decision = {HelloVerdict::reject_duplicate,
                   elsewhere ? "rig is live on broker " + other->broker_id : "rig is live elsewhere with a newer boot"};
    refuse_hello(*s, *p);
    return;
  }
  if (r->outcome == ClaimOutcome::superseded && elsewhere && mesh_ != nullptr) {
    // Its broker would learn it at its next refresh; told now, it closes at once.
    MeshNote note;
    note.kind = MeshKind::superseded;
    note.from = settings_.broker_id;
    note.rig_id = rig_id;
    note.boot_id = other->boot_id;
    mesh_->send(other->broker_id, note, [](Expected<std::size_t>) {});
  }
  admit(*s, *p);
}

void FleetCore::refuse_hello(RigSession& s, PendingHello& p) {
  if (s.claiming) {
    s.claiming = false;
    claiming_.erase(s.serial);
  }
  observer_.hello(s, p.hello, p.decision, PeerAddress(transport_, s), p.subject);
  close_session(s, close_code_for(p.decision.verdict), p.decision.reason);
}

void FleetCore::admit(RigSession& s, PendingHello& p) {
  if (s.claiming) {
    s.claiming = false;
    claiming_.erase(s.serial);
  }
  if (RigSession* other = registry_.find(p.hello.rig_id); other != nullptr && other != &s) {
    // Another connection of the rig was admitted here while this one's claim was on its way.
    p.decision = {HelloVerdict::reject_duplicate, "rig is already connected"};
    refuse_hello(s, p);
    return;
  }
  observer_.hello(s, p.hello, p.decision, PeerAddress(transport_, s), p.subject);
  const std::string boot_id = p.hello.boot_id;
  registry_.add(s, std::move(p.hello));
  remote_.erase(s.rig_id);  // another broker's, until now
  // The boot the rig had before (its superseded connection, or the inventory), if another.
  std::string previous = p.previous_boot;
  if (const auto seen = offline_.find(s.rig_id); previous.empty() && seen != offline_.end())
    previous = seen->second.boot_id;
  if (previous != boot_id) {
    const Uuid before = parse_uuid(previous).value_or(Uuid{});
    if (before != Uuid{} || s.extras) s.set_previous_boot(before);  // none yet: zero is the default
  }
  s.phase = SessionPhase::live;
  s.keepalive.start(clock_.mono_ms(), settings_.keepalive);
  s.outbound.welcome = true;
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
  if (mesh_ != nullptr) announce(s);
  emit(EventType::rig_connected, s.rig_id, {}, boot_id);
  // WELCOME goes first (outbound.hpp), then what waits for the rig. It is written
  // at once (most HELLOs are answered within the connection's own receive
  // callback): arming POLLOUT for it cost two epoll_ctl() pairs and a turn of the
  // loop per connection, a tenth of the broker's CPU in a reconnect storm.
  deliver_open(s);
  transport_.write_now(s);
}

}  // namespace fleetlink::broker
