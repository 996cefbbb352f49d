#include "fleet/fleet_core.hpp"

#include <algorithm>

#include "fleet/frame_errors.hpp"
#include "fleet/lifecycle.hpp"
#include "fleetlink/uuid.hpp"

namespace fleetlink::broker {

FleetCore::FleetCore(FleetSettings settings, RigTransport& transport, FleetObserver& observer, const Clock& clock,
                     RegistryBackend& registry, CommandStore& store, std::uint64_t seed)
    : settings_(std::move(settings)), transport_(transport), observer_(observer), clock_(clock),
      registry_(registry, settings_.broker_id), store_(store), commands_(settings_.command_history), rng_(seed) {
  // The sweep walks every session once per pass, a slice of them per tick: at
  // 20,000 rigs a whole walk at once stalled the loop (and queued ~1,000 pings in
  // one burst) every second.
  const std::uint32_t pass_ms = settings_.keepalive.sweep_interval_ms(settings_.hello_timeout_ms);
  sweep_slice_ms_ = std::max<std::uint32_t>(1, std::min(pass_ms, settings_.sweep_slice_ms));
  sweep_slices_ = std::max<std::uint32_t>(1, pass_ms / sweep_slice_ms_);
  last_inventory_ms_ = clock_.mono_ms();
}

bool FleetCore::ready() const {
  return transport_ready_ && registry_.backend_up() && store_.up() && !drain_.active &&
         (mesh_ == nullptr || mesh_->up());
}

std::vector<std::string> FleetCore::not_ready_because() const {
  std::vector<std::string> why;
  if (!transport_ready_) why.emplace_back("starting");
  if (!registry_.backend_up())
    why.emplace_back("registry_unavailable: the " + std::string(registry_.backend_name()) +
                     " registry cannot be reached (rigs connected here are still served)");
  else if (mesh_ != nullptr && !mesh_->up())
    why.emplace_back("registry_unavailable: not listening to the other brokers yet");
  if (!store_.up()) why.emplace_back("store_unavailable: the " + std::string(store_.name()) + " store is not usable");
  if (drain_.active) why.emplace_back("draining");
  return why;
}

// ---------------------------------------------------------------------------------
// the connection lifecycle

void FleetCore::on_open(RigSession& s) {
  s.serial = ++next_serial_;
  s.next = head_;
  if (head_) head_->prev = &s;
  head_ = &s;
  ++connection_count_;
  observer_.session_opened(s);
  if (drain_.active) close_session(s, CloseCode::going_away, "broker draining");
}

void FleetCore::on_data(RigSession& s, std::span<const std::uint8_t> data, std::size_t remaining, bool final) {
  if (s.phase == SessionPhase::closing) return;  // already leaving; input is ignored
  FrameAssembler::Piece piece = s.assembler.add(data, remaining, final, settings_.max_frame_bytes);
  if (piece.status == FrameAssembler::Status::too_large) {
    refuse_frame(s, oversized_fault(settings_.max_frame_bytes), {});
  } else if (piece.status == FrameAssembler::Status::complete) {
    on_frame(s, piece.frame);
  }
}

void FleetCore::on_pong(RigSession& s) {
  s.keepalive.pong(clock_.mono_ms(), settings_.keepalive);
  s.last_seen_wall_ms = clock_.wall_ms();
  if (!probes_.empty()) probe_answered(s);  // alive: a newcomer waiting for it is refused 4409
}

void FleetCore::on_peer_close(RigSession& s, std::uint16_t code) { s.peer_close_code = code; }

void FleetCore::on_closed(RigSession& s) {
  // Closes by code: ours were reported when asked for; the rig's own code here,
  // 1006 (abnormal, RFC 6455) when the socket simply went away.
  const std::uint16_t peer_code =
      s.phase == SessionPhase::closing ? 0 : (s.peer_close_code ? s.peer_close_code : std::uint16_t{1006});
  unregister(s, "connection closed");
  if (s.claiming) {
    s.claiming = false;
    claiming_.erase(s.serial);
  }
  if (s.outbound.cancels) {
    // Not written: an open command's cancel is asked again by deliver_open; an
    // ended one's (timed out) is owed to the rig's next connection.
    if (const auto it = pending_cancels_.find(&s); it != pending_cancels_.end()) {
      for (const std::string& id : it->second) {
        const CommandView* v = commands_.find(id);
        if (!v || is_final(v->state)) owe_cancel(s.rig_id, id);
      }
      pending_cancels_.erase(it);
    }
  }
  if (s.rx_paused) std::erase(paused_, &s);
  registry_.release_interned(s);
  if (sweep_cursor_ == &s) sweep_cursor_ = s.next;
  if (recheck_cursor_ == &s) recheck_cursor_ = s.next;
  if (s.prev) s.prev->next = s.next;
  else head_ = s.next;
  if (s.next) s.next->prev = s.prev;
  s.prev = s.next = nullptr;
  --connection_count_;
  observer_.session_closed(s, peer_code);
  if (!probes_.empty()) probed_connection_gone(s);  // went away by itself: a newcomer waiting for it goes on
  if (drain_.active) check_drain_done();
}

void FleetCore::close_session(RigSession& s, CloseCode code, std::string reason) {
  if (s.phase == SessionPhase::closing) return;
  s.phase = SessionPhase::closing;
  s.close_code = static_cast<std::uint16_t>(code);
  if (reason.size() > 123) reason.resize(123);
  observer_.closing(s, PeerAddress(transport_, s), code, reason);
  unregister(s, reason);
  transport_.close(s, code, reason);
  if (!probes_.empty()) probed_connection_gone(s);  // a newcomer waiting for this one goes on
}

void FleetCore::unregister(RigSession& s, std::string_view why) {
  if (registry_.remove(s)) {
    observer_.rig_unregistered(s);
    emit(EventType::rig_disconnected, s.rig_id, {}, std::string(why));
    // The rig is known, not connected here: its inventory entry says when it left.
    RigRecord r = rig_record(s);
    r.last_seen_ms = clock_.wall_ms();
    if (const auto seen = offline_.find(s.rig_id); seen != offline_.end()) r.first_seen_ms = seen->second.first_seen_ms;
    store_.put_rig(r);
    offline_.insert_or_assign(r.rig_id, std::move(r));
  }
  // What this connection did not get acknowledged waits for the rig's next one
  // (same cmd_id, a new seq): never lost because a socket closed.
  s.drop_backlog();
  if (s.outbox.size() == 0) return;
  for (OutboxEntry& e : s.outbox.take_all()) {
    if (CommandView* v = e.view ? e.view : commands_.find(e.cmd_id)) lifecycle::unsent(*v);
    observer_.command_unacked(s, e);
  }
}

void FleetCore::refuse_frame(RigSession& s, const FrameFault& fault, std::string_view detail) {
  observer_.frame_refused(s, fault, detail);
  if (fault.close) close_session(s, fault.code, fault.reason);
}

std::string FleetCore::subject_of(const RigSession& s) const {
  if (!s.authenticated) return "(none)";
  const std::optional<CertIdentity> id = transport_.peer_identity(s);
  return id ? id->subject : "(none)";
}

// ---------------------------------------------------------------------------------
// inbound frames: decode, rate, dispatch to handle_*.cpp

void FleetCore::on_frame(RigSession& s, std::span<const std::uint8_t> frame) {
  observer_.frame_received(s);
  s.last_seen_wall_ms = clock_.wall_ms();
  const bool over_rate = !s.rate_limit.try_take(clock_.mono_ms(), settings_.rig_rate, settings_.rig_burst);
  Expected<Message> decoded = decode(frame, DecodeOptions{settings_.max_frame_bytes});
  if (over_rate) {
    if (!decoded || !answers_a_command(*decoded) || s.phase != SessionPhase::live) {
      refuse_frame(s, flood_fault(), {});
      return;
    }
    pause_reading(s);
  }
  const bool live = s.phase == SessionPhase::live;
  if (!decoded) {
    const Error& e = decoded.error();
    const FrameFault fault = decode_fault(e, live, settings_.strictness);
    if (!live) observer_.hello_unusable(transport_.peer_address(s), subject_of(s), fault, e.detail);
    refuse_frame(s, fault, e.detail);
    return;
  }
  Message& m = *decoded;
  if (!live) {
    if (auto* hello = std::get_if<msg::Hello>(&m)) {
      on_hello(s, std::move(*hello));
    } else {
      const FrameFault fault = not_hello_fault();
      observer_.hello_unusable(transport_.peer_address(s), subject_of(s), fault, type_name(m));
      close_session(s, fault.code, fault.reason);
    }
    return;
  }
  if (auto* ack = std::get_if<msg::Ack>(&m)) on_ack(s, *ack);
  else if (auto* nack = std::get_if<msg::Nack>(&m)) on_nack(s, *nack);
  else if (auto* result = std::get_if<msg::Result>(&m)) on_result(s, std::move(*result));
  else if (auto* chunk = std::get_if<msg::OutputChunk>(&m)) on_output(s, *chunk);
  else if (auto* ev = std::get_if<msg::Event>(&m)) on_event(s, *ev);
  else refuse_frame(s, unexpected_fault(m), type_name(m));
}

void FleetCore::pause_reading(RigSession& s) {
  if (s.rx_paused) return;
  s.rx_paused = true;
  paused_.push_back(&s);
  transport_.pause_reading(s);
}

std::size_t FleetCore::resume_paused() {
  const std::uint32_t now = clock_.mono_ms();
  std::size_t resumed = 0;
  for (std::size_t i = 0; i < paused_.size();) {
    RigSession* s = paused_[i];
    if (s->rate_limit.available(now, settings_.rig_rate, settings_.rig_burst) >= 1.0) {
      s->rx_paused = false;
      transport_.resume_reading(*s);
      paused_[i] = paused_.back();
      paused_.pop_back();
      ++resumed;
    } else {
      ++i;
    }
  }
  return resumed;
}

// ---------------------------------------------------------------------------------
// the single writer

namespace {

// The oldest unsent command may go once its creation is in the store's hands
// (persist), and, for one that waits for its record, once that is durable.
bool command_ready(const RigSession& s) noexcept {
  const OutboxEntry* e = s.outbox.next_unsent();
  return e != nullptr && (e->view == nullptr || (e->view->recorded && e->view->waits_for_batch == 0));
}

}  // namespace

bool FleetCore::has_more_to_write(const RigSession& s) const noexcept {
  if (s.phase == SessionPhase::closing) return false;
  return next_outbound(s.outbound, command_ready(s)) != OutboundKind::none;
}

std::optional<Outgoing> FleetCore::next_frame(RigSession& s) {
  if (s.phase == SessionPhase::closing) return std::nullopt;  // the transport sends the close frame
  Outgoing out;
  out.kind = next_outbound(s.outbound, command_ready(s));
  switch (out.kind) {
    case OutboundKind::none:
      return std::nullopt;
    case OutboundKind::ping:
      s.outbound.ping = false;
      out.ping_stamp = clock_.mono_ms();
      return out;
    case OutboundKind::welcome: {
      s.outbound.welcome = false;
      msg::Welcome w;
      w.broker_id = settings_.broker_id;
      w.session_id = uuid_v7().to_string();
      w.ping_interval_ms = settings_.keepalive.ping_interval_ms;
      w.max_frame_bytes = settings_.max_frame_bytes;
      out.message = std::move(w);
      return out;
    }
    case OutboundKind::cancel: {
      msg::Cancel cancel;
      const auto it = pending_cancels_.find(&s);
      if (it != pending_cancels_.end() && !it->second.empty()) {
        cancel.cmd_id = std::move(it->second.front());
        it->second.erase(it->second.begin());
      }
      if (it == pending_cancels_.end() || it->second.empty()) {
        if (it != pending_cancels_.end()) pending_cancels_.erase(it);
        s.outbound.cancels = false;
      }
      if (cancel.cmd_id.empty()) return next_frame(s);
      out.message = std::move(cancel);
      return out;
    }
    case OutboundKind::command: {
      const OutboxEntry* e = s.outbox.next_unsent();
      const std::uint64_t now = clock_.wall_ms();
      const std::uint64_t seq = e->seq;
      CommandView* v = e->view ? e->view : commands_.find(e->cmd_id);
      s.outbox.mark_sent(seq, now);
      if (!v) return next_frame(s);
      msg::Command cmd;
      cmd.seq = seq;
      cmd.cmd_id = v->cmd_id;
      cmd.kind = v->kind;
      cmd.args = v->args;
      cmd.issued_at_ms = v->enqueued_at_ms;
      // Not written to the store for this step alone: the next one (its ACK) carries
      // it, and a command the store still has as queued is sent again just the same.
      lifecycle::sent(*v, seq, now);
      out.message = std::move(cmd);
      return out;
    }
    case OutboundKind::goaway:
      s.outbound.goaway = false;
      out.message = msg::Goaway{"broker draining", s.goaway_after_ms};
      return out;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------
// timers

void FleetCore::sweep() {
  const std::uint32_t now = clock_.mono_ms();
  if (sweep_cursor_ == nullptr) {  // a new pass
    sweep_cursor_ = head_;
    refresh_pass_ = now - last_refresh_ms_ >= settings_.registry_refresh_ms;
    if (refresh_pass_) last_refresh_ms_ = now;
    inventory_pass_ = now - last_inventory_ms_ >= settings_.inventory_refresh_ms;
    if (inventory_pass_) last_inventory_ms_ = now;
  }
  expire_deadlines();
  if (!asks_.empty()) expire_asks();
  if (!probes_.empty()) expire_probes(now);
  std::size_t budget = (connection_count_ + sweep_slices_ - 1) / sweep_slices_;
  while (sweep_cursor_ != nullptr && budget-- > 0) {
    RigSession* s = sweep_cursor_;
    sweep_cursor_ = s->next;
    sweep_one(*s, now, refresh_pass_);
  }
  if (drain_.active) check_drain_done();
}

void FleetCore::sweep_one(RigSession& s, std::uint32_t now, bool refresh) {
  if (s.phase == SessionPhase::awaiting_hello) {
    // A HELLO waiting for a probe arrived in time; the probe's own deadline bounds it.
    if (!s.awaiting_probe && now - s.established_mono_ms >= settings_.hello_timeout_ms)
      close_session(s, CloseCode::hello_timeout,
                    "no hello within " + std::to_string(settings_.hello_timeout_ms) + " ms");
    return;
  }
  if (s.phase != SessionPhase::live) return;
  if (const RigGrant* g = s.grant(); g && g->expires_at_ms != 0 && clock_.wall_ms() >= g->expires_at_ms) {
    // Its grant ends with its token: the rig comes back with its renewed one.
    close_session(s, CloseCode::identity_mismatch, "rig token expired: reconnect with a renewed one");
    return;
  }
  if (refresh)
    registry_.refresh(s, clock_.wall_ms(), [this, rig = s.rig_id, serial = s.serial](Expected<RefreshResult> r) {
      refreshed(rig, serial, r);
    });
  if (inventory_pass_ && s.registered) {
    RigRecord r = rig_record(s);
    r.last_seen_ms = s.last_seen_wall_ms ? s.last_seen_wall_ms : s.connected_at_ms;
    store_.put_rig(r);
    if (mesh_ != nullptr) announce(s);
  }
  const unsigned before = s.keepalive.missed;
  const KeepaliveAction a = s.keepalive.tick(now, settings_.keepalive);
  if (s.keepalive.missed > before) observer_.pong_missed(s, s.keepalive.missed, settings_.keepalive.max_missed);
  if (a == KeepaliveAction::dead) {
    close_session(s, CloseCode::keepalive_timeout, std::to_string(s.keepalive.missed) + " pongs missed");
  } else if (a == KeepaliveAction::send_ping) {
    // The pong clock starts now, whether or not the socket lets the ping out:
    // a rig that stopped reading is as dead as one that stopped answering.
    s.keepalive.ping_sent(now, settings_.keepalive);
    s.outbound.ping = true;
    transport_.write_now(s);
  }
}

// ---------------------------------------------------------------------------------
// drain

void FleetCore::start_drain(std::chrono::milliseconds window) {
  if (drain_.active) return;
  const auto window_ms = static_cast<std::uint32_t>(std::max<std::int64_t>(0, window.count()));
  drain_.active = true;
  drain_.started_ms = clock_.mono_ms();
  drain_.window_ms = window_ms;
  drain_.deadline_ms = drain_deadline(settings_.drain_deadline_ms, window_ms);
  transport_.stop_accepting();
  std::vector<RigSession*> live;
  for (RigSession* s = head_; s; s = s->next) {
    if (s->phase == SessionPhase::live) live.push_back(s);
    else if (s->phase == SessionPhase::awaiting_hello) close_session(*s, CloseCode::going_away, "broker draining");
  }
  const std::vector<std::uint32_t> delays = drain_spread(live.size(), window_ms, rng_);
  for (std::size_t i = 0; i < live.size(); ++i) {
    live[i]->outbound.goaway = true;
    live[i]->goaway_after_ms = delays[i];
    transport_.write_soon(*live[i]);
  }
  observer_.drain_started(live.size(), window_ms, drain_.deadline_ms);
  emit(EventType::drain_started, {}, {}, std::to_string(window_ms));
  check_drain_done();
}

void FleetCore::check_drain_done() {
  if (!drain_.active || drained_) return;
  const std::uint64_t now = clock_.mono_ms();
  if (connection_count_ != 0) {
    if (!drain_.past_deadline(now)) return;
    if (!drain_.closed_at_deadline) {
      // Rigs still here at the deadline get a real close frame (1001), not a
      // vanished socket (1006); the exit waits a moment for those to go out.
      drain_.closed_at_deadline = true;
      drain_.left_at_deadline = connection_count_;
      drain_.flush_until_ms = now + kDrainCloseFlushMs;
      for (RigSession* s = head_; s; s = s->next) close_session(*s, CloseCode::going_away, "broker draining: deadline reached");
      return;  // each close comes back through on_closed, which looks again
    }
    if (now < drain_.flush_until_ms) return;
  }
  drained_ = true;
  observer_.drain_finished(drain_.left_at_deadline);
  if (on_drained_) on_drained_();
}

// ---------------------------------------------------------------------------------
// events

void FleetCore::emit(EventType type, std::string_view rig_id, std::string_view cmd_id, std::string detail,
                     std::uint64_t offset) {
  const bool relayed = mesh_ != nullptr && mesh_->up();  // every broker's event stream shows it
  if (!relayed && !bus_.wants(type, cmd_id)) return;     // nobody listens: build nothing
  FleetEvent event{type, std::string(rig_id), std::string(cmd_id), std::move(detail), clock_.wall_ms(), offset};
  if (relayed) relay(event);
  bus_.emit(event);
}

// ---------------------------------------------------------------------------------
// Fleet

RigView FleetCore::view_of(const RigSession& s) const {
  RigView r;
  r.rig_id = s.rig_id;
  const std::uint64_t now = clock_.wall_ms();
  const std::uint64_t oldest_ms = s.outbox.entries().empty() ? now : s.outbox.entries().front().enqueued_ms;
  const std::uint64_t oldest_age = now > oldest_ms ? now - oldest_ms : 0;
  r.state = "connected";
  if (s.keepalive.missed > 0) {
    r.state = "unresponsive";
    r.unresponsive_because = std::to_string(s.keepalive.missed) + " pong" + (s.keepalive.missed > 1 ? "s" : "") +
                             " missed in a row";
  } else if (oldest_age > settings_.unresponsive_after_ms) {
    r.state = "unresponsive";
    r.unresponsive_because = "its oldest unacknowledged command has waited " + std::to_string(oldest_age / 1000) +
                             " s (unresponsive after " + std::to_string(settings_.unresponsive_after_ms / 1000) +
                             " s)";
  }
  if (drain_.active) r.state = "draining";
  r.connected = true;
  r.broker_id = settings_.broker_id;
  r.boot_id = s.boot_id.to_string();
  if (s.agent_version) r.agent_version = *s.agent_version;
  if (s.labels) r.labels = StringMap(s.labels->begin(), s.labels->end());
  if (s.kinds) r.kinds = *s.kinds;
  r.peer = transport_.peer_address(s);
  r.connected_at_ms = s.connected_at_ms;
  r.last_seen_ms = s.last_seen_wall_ms ? s.last_seen_wall_ms : s.connected_at_ms;
  r.last_ack_seq = s.outbox.last_ack_seq();
  r.last_ack_at_ms = s.outbox.last_ack_at_ms();
  r.next_seq = s.outbox.next_seq();
  r.held = s.backlog() ? s.backlog()->size() : 0;
  r.outbox_depth = s.outbox.size() + r.held;
  r.unsent = s.outbox.unsent();
  r.outbox_capacity = settings_.outbox_capacity;
  r.missed_pongs = s.keepalive.missed;
  for (const OutboxEntry& e : s.outbox.entries()) {
    UnackedCommand u;
    u.cmd_id = e.cmd_id;
    u.seq = e.seq;
    if (const CommandView* v = e.view ? e.view : commands_.find(e.cmd_id)) u.kind = v->kind;
    u.age_ms = now > e.enqueued_ms ? now - e.enqueued_ms : 0;
    u.sent = e.sent_ms != 0;
    r.unacked.push_back(std::move(u));
  }
  return r;
}

RigView FleetCore::view_of(const RigRecord& r) const {
  RigView v;
  v.rig_id = r.rig_id;
  v.state = "offline";
  v.connected = false;
  v.boot_id = r.boot_id;
  v.agent_version = r.agent_version;
  v.labels = r.labels;
  v.kinds = r.kinds;
  v.first_seen_ms = r.first_seen_ms;
  v.last_seen_ms = r.last_seen_ms;
  v.outbox_capacity = settings_.outbox_capacity;
  for (const CommandView* c : commands_.open_of(r.rig_id))
    if (c->state == CommandState::queued || c->state == CommandState::sent) ++v.held;
  return v;
}

std::vector<RigView> FleetCore::rigs() const {
  std::vector<RigView> out;
  out.reserve(registry_.size() + offline_.size());
  registry_.for_each([&](const RigSession& s) { out.push_back(view_of(s)); });
  for (const auto& [id, r] : remote_)
    if (!registry_.find(id)) out.push_back(remote_view(r.record));
  for (const auto& [id, r] : offline_)
    if (!remote_.contains(id)) out.push_back(view_of(r));
  std::sort(out.begin(), out.end(), [](const RigView& a, const RigView& b) { return a.rig_id < b.rig_id; });
  return out;
}

void FleetCore::visit_rig_labels(const RigLabelsVisitor& visit) const {
  static const LabelList kNoLabels;
  registry_.for_each([&](const RigSession& s) { visit(s.rig_id, s.labels ? *s.labels : kNoLabels); });
  for (const auto& [id, r] : remote_)
    if (!registry_.find(id)) visit(id, LabelList(r.record.labels.begin(), r.record.labels.end()));
  for (const auto& [id, r] : offline_)
    if (!remote_.contains(id)) visit(id, LabelList(r.labels.begin(), r.labels.end()));
}

std::optional<RigView> FleetCore::rig(std::string_view rig_id) const {
  if (const RigSession* s = registry_.find(rig_id)) return view_of(*s);
  if (const auto it = remote_.find(rig_id); it != remote_.end()) return remote_view(it->second.record);
  if (const auto it = offline_.find(rig_id); it != offline_.end()) return view_of(it->second);
  return std::nullopt;
}

void FleetCore::distrust(RigSession& s, std::string_view why) {
  if (s.phase == SessionPhase::closing) return;
  observer_.certificate_distrusted(s, why);
  close_session(s, CloseCode::identity_mismatch, "certificate no longer trusted: " + std::string(why));
}

void FleetCore::start_recheck(TrustCheck check) {
  recheck_ = std::move(check);
  recheck_cursor_ = recheck_ ? head_ : nullptr;
}

bool FleetCore::recheck_slice(std::size_t max) {
  for (std::size_t n = 0; recheck_cursor_ != nullptr && n < max; ++n) {
    RigSession& s = *recheck_cursor_;
    // Moved on first: a close only marks the session (it leaves the list in on_closed).
    recheck_cursor_ = s.next;
    if (s.phase == SessionPhase::closing || !s.authenticated) continue;
    if (std::optional<std::string> why = recheck_(s)) distrust(s, *why);
  }
  if (recheck_cursor_ == nullptr) recheck_ = nullptr;
  return recheck_cursor_ != nullptr;
}

bool FleetCore::force_reconnect(std::string_view rig_id) {
  RigSession* s = registry_.find(rig_id);
  if (!s) return false;
  close_session(*s, CloseCode::forced_reconnect, "operator asked for a reconnect");
  return true;
}

RigRecord FleetCore::rig_record(const RigSession& s) const {
  RigRecord r;
  r.rig_id = s.rig_id;
  r.boot_id = s.boot_id.to_string();
  if (s.agent_version) r.agent_version = *s.agent_version;
  if (s.labels) r.labels = StringMap(s.labels->begin(), s.labels->end());
  if (s.kinds) r.kinds = *s.kinds;
  r.broker_id = settings_.broker_id;
  r.first_seen_ms = s.connected_at_ms;
  r.last_seen_ms = s.last_seen_wall_ms ? s.last_seen_wall_ms : s.connected_at_ms;
  return r;
}

}  // namespace fleetlink::broker
