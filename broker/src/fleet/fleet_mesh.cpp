// Several brokers, one fleet: what this broker asks of the others and answers
// them (fleet/broker_mesh.hpp). Every ask has a deadline (mesh_answer_ms) and
// an answer for when none comes; the store and the registry stay the record.
#include <algorithm>

#include "fleet/fleet_core.hpp"

namespace fleetlink::broker {

namespace {

constexpr std::uint64_t kRemoteRigStaleFactor = 3;  // inventory passes without news: a remote rig is forgotten

EnqueueFailure route_failure(EnqueueError e, const std::string& rig_id, std::string detail, std::string cmd_id = {}) {
  EnqueueFailure f;
  f.error = e;
  f.rig_id = rig_id;
  f.detail = std::move(detail);
  f.cmd_id = std::move(cmd_id);
  return f;
}

}  // namespace

// ---------------------------------------------------------------------------------
// asks and their answers

std::uint64_t FleetCore::start_ask(MeshKind answer, std::function<void(const MeshNote*)> done) {
  const std::uint64_t id = ++next_ask_;
  asks_.emplace(id, MeshAsk{answer, clock_.wall_ms() + settings_.mesh_answer_ms, 1, 0, std::move(done)});
  return id;
}

void FleetCore::settle_ask(std::uint64_t ask, const MeshNote* answer) {
  const auto it = asks_.find(ask);
  if (it == asks_.end()) return;
  std::function<void(const MeshNote*)> done = std::move(it->second.done);
  asks_.erase(it);
  if (done) done(answer);
}

void FleetCore::expire_asks() {
  const std::uint64_t now = clock_.wall_ms();
  std::vector<std::uint64_t> due;
  for (const auto& [id, a] : asks_)
    if (now >= a.deadline_ms) due.push_back(id);
  for (std::uint64_t id : due) settle_ask(id, nullptr);
}

void FleetCore::broadcast_ask(std::uint64_t ask, MeshNote note) {
  asks_.at(ask).answers_due = 0;  // known once PUBLISH answers how many listened
  note.from = settings_.broker_id;
  note.ask = ask;
  mesh_->broadcast(note, [this, ask](Expected<std::size_t> listeners) {
    const auto it = asks_.find(ask);
    if (it == asks_.end()) return;
    const std::size_t others = listeners && *listeners > 0 ? *listeners - 1 : 0;  // itself among them
    it->second.answers_due = others;
    if (it->second.answers_seen >= others) settle_ask(ask, nullptr);  // every other broker said "not mine" already
  });
}

void FleetCore::answer_note(const MeshNote& asked, MeshNote answer) {
  answer.from = settings_.broker_id;
  answer.ask = asked.ask;
  if (mesh_ != nullptr) mesh_->send(asked.from, answer, [](Expected<std::size_t>) {});
}

// ---------------------------------------------------------------------------------
// what the control plane routes

bool FleetCore::routes_elsewhere(std::string_view rig_id) const {
  return mesh_ != nullptr && registry_.shared() && registry_.find(rig_id) == nullptr;
}

bool FleetCore::cancel_routes_elsewhere(std::string_view cmd_id) const {
  const CommandView* v = commands_.find(cmd_id);
  if (v == nullptr && !store_.answers_at_once()) return true;  // read from the store first (cancel_routed)
  if (mesh_ == nullptr || !registry_.shared()) return false;
  // Known here and its rig here (or already over): this broker's to answer.
  return v == nullptr || (!is_final(v->state) && registry_.find(v->rig_id) == nullptr);
}

void FleetCore::enqueue_here(CommandRequest request, std::function<void(RoutedOutcome)> done) {
  const bool named = !request.cmd_id.empty() || !request.idempotency_key.empty();
  if (store_.answers_at_once() || !named || (!request.cmd_id.empty() && commands_.find(request.cmd_id)) ||
      (!request.idempotency_key.empty() && commands_.find_by_key(request.idempotency_key)))
    return Fleet::enqueue_routed(std::move(request), std::move(done));
  // A command the client named, and a store that answers later (Redis): the
  // store is asked first whether it exists (a retry through any broker finds it).
  auto req = std::make_shared<CommandRequest>(std::move(request));
  auto go = [this, req, done = std::move(done)](std::optional<CommandView> found) mutable {
    if (found && commands_.find(found->cmd_id) == nullptr) adopt(std::move(*found));
    Fleet::enqueue_routed(std::move(*req), std::move(done));
  };
  if (!req->cmd_id.empty()) store_.find(req->cmd_id, std::move(go));
  else store_.find_by_key(req->idempotency_key, std::move(go));
}

void FleetCore::enqueue_routed(CommandRequest request, std::function<void(RoutedOutcome)> done) {
  if (!routes_elsewhere(request.rig_id)) return enqueue_here(std::move(request), std::move(done));
  const std::string rig_id = request.rig_id;
  registry_.lookup(rig_id, clock_.wall_ms(),
                   [this, request = std::move(request), done = std::move(done)](
                       Expected<std::optional<RegistryEntry>> owner) mutable {
    if (!owner) {
      // Nobody can say where the rig is: refused rather than held where it may never come.
      done(RoutedOutcome{route_failure(EnqueueError::registry_unavailable, request.rig_id,
                                       "the rig is not connected to this broker and the registry cannot be "
                                       "reached (" + owner.error().detail + ")"),
                         std::nullopt, settings_.broker_id});
      return;
    }
    if (!*owner || (*owner)->broker_id == settings_.broker_id || mesh_ == nullptr || !mesh_->up())
      return enqueue_here(std::move(request), std::move(done));  // offline (held here), or here after all
    // Its owner takes it. The command's id is fixed now, so that an answer lost
    // on the way can be asked after (GET /v1/commands/{id}) or retried as the same command.
    if (request.cmd_id.empty()) request.cmd_id = uuid_v7_at(clock_.wall_ms()).to_string();
    const std::string owner_id = (*owner)->broker_id;
    const std::string cmd_id = request.cmd_id;
    auto finish = std::make_shared<std::function<void(RoutedOutcome)>>(std::move(done));
    const std::uint64_t ask = start_ask(MeshKind::command_answer, [this, finish, owner_id, cmd_id,
                                                                 rig_id = request.rig_id](const MeshNote* a) {
      if (a != nullptr && a->outcome) {
        // Its owner's answer, or this broker's own when it held the command itself.
        RoutedOutcome out{*a->outcome, std::nullopt, a->from.empty() ? owner_id : a->from};
        if (!a->unrecorded.empty()) out.unrecorded = make_error(Errc::io, a->unrecorded);
        (*finish)(std::move(out));
        return;
      }
      (*finish)(RoutedOutcome{route_failure(EnqueueError::route_timeout, rig_id,
                                            "broker " + owner_id + " holds the rig and did not answer within " +
                                                std::to_string(settings_.mesh_answer_ms) +
                                                " ms: it may have the command; ask for it, or send it again "
                                                "with the same cmd_id",
                                            cmd_id),
                              std::nullopt, owner_id});
    });
    MeshNote note;
    note.kind = MeshKind::command;
    note.from = settings_.broker_id;
    note.ask = ask;
    note.rig_id = request.rig_id;
    note.command = request;
    mesh_->send(owner_id, note,
                [this, ask, owner_id, request = std::move(request)](Expected<std::size_t> listeners) mutable {
                  if (listeners && *listeners > 0) return;  // its answer settles the ask
                  const auto it = asks_.find(ask);
                  if (it == asks_.end()) return;
                  auto settle = std::move(it->second.done);
                  asks_.erase(it);
                  if (!listeners && listeners.error().code == Errc::too_large) {
                    MeshNote refused;
                    refused.from = settings_.broker_id;
                    refused.outcome = route_failure(EnqueueError::bad_request, request.rig_id,
                                                    "too large to hand to broker " + owner_id + ", which holds the "
                                                    "rig: " + listeners.error().detail + "; send it through that "
                                                    "broker");
                    if (settle) settle(&refused);
                    return;
                  }
                  // Its broker is gone (or the mesh is): held here for the rig's next connection.
                  request.hold = true;
                  enqueue_here(std::move(request), [settle = std::move(settle)](RoutedOutcome out) {
                    MeshNote local;
                    local.from = out.broker_id;
                    local.outcome = std::move(out.outcome);
                    if (out.unrecorded) local.unrecorded = out.unrecorded->detail;
                    if (settle) settle(&local);
                  });
                });
  });
}

void FleetCore::cancel_here(const std::string& cmd_id, std::function<void(CancelOutcome)> done) {
  if (store_.answers_at_once() || commands_.find(cmd_id) != nullptr) return done(cancel(cmd_id));
  store_.find(cmd_id, [this, cmd_id, done = std::move(done)](std::optional<CommandView> v) {
    if (v && commands_.find(cmd_id) == nullptr) adopt(std::move(*v));
    done(cancel(cmd_id));
  });
}

void FleetCore::cancel_routed(std::string_view cmd_id, std::function<void(CancelOutcome)> done) {
  const std::string id(cmd_id);
  if (mesh_ == nullptr || !registry_.shared() || !cancel_routes_elsewhere(cmd_id))
    return cancel_here(id, std::move(done));
  // Whoever holds it cancels it; each broker answers whether it does.
  const std::uint64_t ask = start_ask(MeshKind::cancel_answer, [this, id, done](const MeshNote* a) {
    if (a != nullptr) return done(a->cancel);
    cancel_here(id, done);  // nobody holds it: this broker's own answer
  });
  MeshNote note;
  note.kind = MeshKind::cancel;
  note.cmd_id = id;
  broadcast_ask(ask, std::move(note));
}

void FleetCore::force_reconnect_routed(std::string_view rig_id, std::function<void(bool closed, bool known)> done) {
  if (!routes_elsewhere(rig_id)) return Fleet::force_reconnect_routed(rig_id, std::move(done));
  const std::string id(rig_id);
  const std::uint64_t ask = start_ask(MeshKind::reconnect_answer, [this, id, done](const MeshNote* a) {
    if (a != nullptr) return done(true, true);
    done(false, rig(id).has_value());
  });
  MeshNote note;
  note.kind = MeshKind::reconnect;
  note.rig_id = id;
  broadcast_ask(ask, std::move(note));
}

// ---------------------------------------------------------------------------------
// who drives a fan-out job

bool FleetCore::shares_jobs() const { return mesh_ != nullptr && registry_.shared(); }

void FleetCore::hold_job(std::string_view job_id, bool take, std::function<void(JobHold)> done) {
  if (!shares_jobs()) return Fleet::hold_job(job_id, take, std::move(done));
  const std::string id(job_id);
  const std::string& me = settings_.broker_id;
  RegistryBackend& backend = registry_.backend();
  if (!take) {
    backend.refresh_job(id, me, clock_.wall_ms(), [me, done = std::move(done)](Expected<RefreshResult> r) {
      if (!r) return done(JobHold{false, {}, r.error()});
      if (r->outcome != RefreshOutcome::superseded) return done(JobHold{true, me, std::nullopt});
      done(JobHold{false, r->owner ? r->owner->broker_id : std::string(), std::nullopt});
    });
    return;
  }
  backend.claim_job(id, me, false, clock_.wall_ms(), [this, id, me, done = std::move(done)](Expected<ClaimResult> r) {
    if (!r) return done(JobHold{false, {}, r.error()});
    if (r->outcome != ClaimOutcome::lost) return done(JobHold{true, me, std::nullopt});
    const std::string holder = r->before ? r->before->broker_id : std::string();
    if (holder.empty() || mesh_ == nullptr || !mesh_->up()) return done(JobHold{false, holder, std::nullopt});
    // Held elsewhere: taken over at once if nobody listens on its holder's
    // channel (that broker is gone), instead of when its hold runs out.
    MeshNote ping;
    ping.kind = MeshKind::ping;
    ping.from = me;
    mesh_->send(holder, ping, [this, id, me, holder, done](Expected<std::size_t> listeners) {
      if (!listeners || *listeners > 0 || mesh_ == nullptr) return done(JobHold{false, holder, std::nullopt});
      registry_.backend().claim_job(id, me, true, clock_.wall_ms(), [me, holder, done](Expected<ClaimResult> again) {
        if (!again) return done(JobHold{false, holder, again.error()});
        if (again->outcome == ClaimOutcome::lost) return done(JobHold{false, holder, std::nullopt});
        done(JobHold{true, me, std::nullopt});
      });
    });
  });
}

// ---------------------------------------------------------------------------------
// what other brokers say

void FleetCore::on_mesh(const MeshNote& note) {
  if (note.from == settings_.broker_id) return;  // its own broadcast
  observer_.mesh_note(to_string(note.kind), note.from);
  switch (note.kind) {
    case MeshKind::probe: {
      RigSession* s = registry_.find(note.rig_id);
      if (s != nullptr && s->boot_id.to_string() == note.boot_id) probe(*s);
      else registry_.release_stale(note.rig_id, note.boot_id);  // an entry of this broker's without a connection
      return;
    }
    case MeshKind::superseded: {
      RigSession* s = registry_.find(note.rig_id);
      if (s != nullptr && s->boot_id.to_string() == note.boot_id) {
        observer_.superseded_elsewhere(*s, note.from);
        close_session(*s, CloseCode::superseded, "superseded by a newer boot on broker " + note.from);
      }
      return;
    }
    case MeshKind::command: {
      if (!note.command) return;
      enqueue_here(*note.command, [this, note](RoutedOutcome out) {
        // Its state now, not at its enqueue: the rig may have acknowledged it while
        // its record was written, and the asker cannot read it here.
        if (auto* ok = std::get_if<EnqueueOk>(&out.outcome))
          if (const CommandView* v = commands_.find(ok->cmd_id)) ok->state = v->state;
        MeshNote answer;
        answer.kind = MeshKind::command_answer;
        answer.rig_id = note.rig_id;
        answer.outcome = std::move(out.outcome);
        if (out.unrecorded) answer.unrecorded = out.unrecorded->detail;
        answer_note(note, std::move(answer));
      });
      return;
    }
    case MeshKind::cancel: {
      MeshNote answer;
      answer.kind = MeshKind::cancel_answer;
      answer.cmd_id = note.cmd_id;
      const CommandView* v = commands_.find(note.cmd_id);
      // Held here: known, and its rig connected here (or the command over here).
      if (v != nullptr && (registry_.find(v->rig_id) != nullptr || is_final(v->state))) {
        answer.held = true;
        answer.cancel = cancel(note.cmd_id);
      }
      answer_note(note, std::move(answer));
      return;
    }
    case MeshKind::reconnect: {
      MeshNote answer;
      answer.kind = MeshKind::reconnect_answer;
      answer.rig_id = note.rig_id;
      answer.held = force_reconnect(note.rig_id);
      answer_note(note, std::move(answer));
      return;
    }
    case MeshKind::command_answer:
      settle_ask(note.ask, &note);
      return;
    case MeshKind::cancel_answer:
    case MeshKind::reconnect_answer: {
      const auto it = asks_.find(note.ask);
      if (it == asks_.end()) return;
      if (note.held) return settle_ask(note.ask, &note);
      ++it->second.answers_seen;
      // Every other broker said it is not theirs (their count comes with PUBLISH's answer).
      if (it->second.answers_due != 0 && it->second.answers_seen >= it->second.answers_due) settle_ask(note.ask, nullptr);
      return;
    }
    case MeshKind::event:
      if (!note.event) return;
      heard_of(note);
      if (note.event->type == EventType::command_output) remote_outputs_.add(*note.event);
      else if (note.event->type == EventType::command_done) remote_outputs_.forget(note.event->cmd_id);
      bus_.emit(*note.event);
      return;
    case MeshKind::rig_seen:
      heard_of(note);
      return;
    case MeshKind::ping:
      return;  // PUBLISH's count of listeners was the answer
  }
}

void FleetCore::relay(const FleetEvent& event) {
  MeshNote note;
  note.kind = MeshKind::event;
  note.from = settings_.broker_id;
  note.event = event;
  mesh_->broadcast(note, [](Expected<std::size_t>) {});
}

void FleetCore::announce(const RigSession& s) {
  if (mesh_ == nullptr || !mesh_->up()) return;
  MeshNote note;
  note.kind = MeshKind::rig_seen;
  note.from = settings_.broker_id;
  note.rig_id = s.rig_id;
  note.rig = rig_record(s);
  mesh_->broadcast(note, [](Expected<std::size_t>) {});
}

void FleetCore::heard_of(const MeshNote& note) {
  const std::uint64_t now = clock_.wall_ms();
  if (note.kind == MeshKind::rig_seen && note.rig) {
    if (registry_.find(note.rig->rig_id) != nullptr) return;  // connected here: this broker knows better
    remote_.insert_or_assign(note.rig->rig_id, RemoteRig{*note.rig, now});
  } else if (note.event && note.event->type == EventType::rig_disconnected) {
    const auto it = remote_.find(note.event->rig_id);
    if (it == remote_.end() || it->second.record.broker_id != note.from) return;
    RigRecord r = std::move(it->second.record);
    remote_.erase(it);
    if (registry_.find(r.rig_id) != nullptr) return;  // it is here now
    r.last_seen_ms = note.event->at_ms;
    r.broker_id = note.from;
    offline_.insert_or_assign(r.rig_id, std::move(r));
  }
  // Remote rigs not announced again for a while: their broker is gone, or they are.
  const std::uint64_t stale = kRemoteRigStaleFactor * settings_.inventory_refresh_ms;
  if (remote_.size() > 0 && (now / 1000) % 10 == 0) {
    for (auto it = remote_.begin(); it != remote_.end();) {
      if (now - it->second.heard_ms > stale) {
        offline_.insert_or_assign(it->first, it->second.record);
        it = remote_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

RigView FleetCore::remote_view(const RigRecord& r) const {
  RigView v = view_of(r);
  v.state = "connected";
  v.connected = true;
  v.broker_id = r.broker_id;
  v.connected_at_ms = r.first_seen_ms;
  return v;
}

void FleetCore::registry_recovered() {
  const std::uint64_t now = clock_.wall_ms();
  for (RigSession* s = head_; s != nullptr; s = s->next) {
    if (s->phase != SessionPhase::live || !s->registered) continue;
    registry_.refresh(*s, now, [this, rig = s->rig_id, serial = s->serial](Expected<RefreshResult> r) {
      refreshed(rig, serial, r);
    });
  }
}

void FleetCore::refreshed(const std::string& rig_id, std::uint32_t serial, const Expected<RefreshResult>& r) {
  if (!r || r->outcome != RefreshOutcome::superseded) return;  // unreachable: tried again next pass / on recovery
  RigSession* s = registry_.find(rig_id);
  if (s == nullptr || s->serial != serial || s->phase != SessionPhase::live) return;
  const std::string owner = r->owner ? r->owner->broker_id : std::string("?");
  observer_.superseded_elsewhere(*s, owner);
  close_session(*s, CloseCode::superseded, "the registry names another owner (broker " + owner + ")");
}

}  // namespace fleetlink::broker
