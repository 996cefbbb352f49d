// The command record's side of the fleet core: creating commands (record first,
// then send), delivering a rig's open commands on each new connection (at least
// once, under one cmd_id), the deadlines, cancel, and the store behind it all.
#include <algorithm>
#include <cctype>

#include "fleet/command_defaults.hpp"
#include "fleet/fleet_core.hpp"
#include "fleet/lifecycle.hpp"
#include "fleetlink/codec.hpp"
#include "fleetlink/uuid.hpp"

namespace fleetlink::broker {

namespace {

constexpr std::size_t kMaxIdempotencyKeyBytes = 128;
constexpr std::size_t kMaxCancelsPerSession = 64;
// How far a client's UUIDv7 cmd_id may be from the broker's clock.
constexpr std::uint64_t kClientIdAheadMs = 3600ULL * 1000;
constexpr std::uint64_t kClientIdBehindMs = 24ULL * 3600 * 1000;
constexpr std::size_t kMaxOwedCancelsPerRig = 1024;  // what an outbox and its held queue can have timed out, and more
// Rows the store may have in hand, not yet durable, before new commands are
// refused (store_unavailable): what a stalled disk may cost in memory (~1 KiB
// each) instead of growing without bound.
constexpr std::size_t kMaxStoreBacklog = 200'000;

bool printable_key(std::string_view key) noexcept {
  return !key.empty() && key.size() <= kMaxIdempotencyKeyBytes &&
         std::all_of(key.begin(), key.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

std::string seconds(std::uint32_t s) { return std::to_string(s) + " s"; }

}  // namespace

// ---------------------------------------------------------------------------------
// the store

Expected<std::vector<JobRecord>> FleetCore::load() {
  Expected<StoreSnapshot> snapshot = store_.load();
  if (!snapshot) return snapshot.error();
  const std::uint64_t now = clock_.wall_ms();
  for (CommandView& v : snapshot->open_commands) {
    v.recorded = true;
    v.in_outbox = false;
    CommandView* placed = commands_.insert(std::move(v));
    if (placed && placed->cancel_requested_at_ms) placed->cancel_by_ms = now + settings_.cancel_grace_ms;
  }
  for (RigRecord& r : snapshot->rigs) {
    std::string id = r.rig_id;
    offline_.insert_or_assign(std::move(id), std::move(r));
  }
  foreign_seen_ = store_.foreign_writes();
  return std::move(snapshot->open_jobs);
}

namespace {

// A client named it by key (a retry after a crash must find the key, so the
// key is durable before anything runs), or a job sent it (a job is not
// half-sent unrecorded): it goes to its rig once its batch is durable.
bool waits_for_its_record(const CommandView& v) noexcept { return !v.idempotency_key.empty() || !v.job_id.empty(); }

void kick_each(std::vector<RigSession*>& kick, RigTransport& transport) {
  std::sort(kick.begin(), kick.end());  // a fan-out names every rig once; a stream one rig many times
  kick.erase(std::unique(kick.begin(), kick.end()), kick.end());
  for (RigSession* s : kick) transport.write_now(*s);
}

}  // namespace

std::uint64_t FleetCore::persist() {
  std::vector<CmdKey> created;
  created.swap(uncommitted_);
  std::vector<RigSession*> kick;
  std::vector<CmdKey> waiting;
  auto go = [&](CommandView& v) {
    if (!v.in_outbox) return;
    if (RigSession* s = registry_.find(v.rig_id)) kick.push_back(s);
  };
  // The commands free to go are written to their rigs before the batch is
  // submitted: a store may commit a small batch right here, on the loop, and
  // the rig's work should not wait for that.
  for (const CmdKey& id : created) {
    CommandView* v = commands_.find(id.view());
    if (!v || v->recorded) continue;
    if (waits_for_its_record(*v)) {  // not sendable while not recorded (FleetCore::sendable)
      waiting.push_back(id);
      continue;
    }
    v->recorded = true;  // its later steps wait for the interval commit
    go(*v);
  }
  kick_each(kick, transport_);
  kick.clear();
  const std::uint64_t batch = store_.submit();
  const std::optional<Expected<void>> known = batch_state(batch);  // committed here, or a store without a thread
  HeldBatch held{batch, {}};
  for (const CmdKey& id : waiting) {
    CommandView* v = commands_.find(id.view());
    if (!v || v->recorded) continue;
    v->recorded = true;
    if (!(known && *known)) {
      v->waits_for_batch = batch;
      held.commands.push_back(id);
      continue;
    }
    go(*v);
  }
  if (!held.commands.empty()) held_.push_back(std::move(held));
  kick_each(kick, transport_);
  on_store_progress();
  return batch;
}

std::optional<Expected<void>> FleetCore::batch_state(std::uint64_t batch) const {
  if (batch <= store_.durable_through()) return Expected<void>{};
  if (batch > reported_through_) return std::nullopt;
  for (const auto& [failed, error] : failed_)
    if (failed == batch) return Expected<void>{error};
  return Expected<void>{make_error(Errc::io, "the command store could not record it")};
}

void FleetCore::when_recorded(std::uint64_t batch, std::function<void(const Expected<void>&)> then) {
  if (const std::optional<Expected<void>> known = batch_state(batch)) {
    then(*known);
    return;
  }
  waiters_.emplace(batch, std::move(then));
}

void FleetCore::on_store_progress() {
  for (BatchOutcome& o : store_.take_outcomes()) {
    reported_through_ = std::max(reported_through_, o.batch);
    // Tried again and durable since: a success after all.
    Expected<void> result = o.batch <= store_.durable_through() ? Expected<void>{} : std::move(o.result);
    if (!result) {
      observer_.store_failed(result.error());
      failed_.emplace_back(o.batch, result.error());
      if (failed_.size() > 64) failed_.pop_front();
    }
    release_held(o.batch, result);
    while (!waiters_.empty() && waiters_.begin()->first <= o.batch) {
      auto then = std::move(waiters_.begin()->second);
      waiters_.erase(waiters_.begin());
      then(result);
    }
  }
  while (!failed_.empty() && failed_.front().first <= store_.durable_through()) failed_.pop_front();
}

void FleetCore::release_held(std::uint64_t batch, const Expected<void>& result) {
  std::vector<RigSession*> kick;
  while (!held_.empty() && held_.front().batch <= batch) {
    const HeldBatch h = std::move(held_.front());
    held_.pop_front();
    for (const CmdKey& id : h.commands) {
      CommandView* v = commands_.find(id.view());
      if (!v || v->waits_for_batch != h.batch) continue;
      v->waits_for_batch = 0;
      if (!result) {
        // Not recorded, so never sent: withdrawn, and said so (its caller answers
        // store_unavailable). The store tries the batch again, and then records
        // this end too.
        withdraw(*v);
        end(*v, CommandState::undeliverable,
            "the command store could not record it (" + result.error().detail + "): it was never sent");
        continue;
      }
      if (!v->in_outbox) continue;
      if (RigSession* s = registry_.find(v->rig_id)) kick.push_back(s);
    }
  }
  kick_each(kick, transport_);
}

bool FleetCore::commit_if_due() {
  const std::size_t slice = store_.interval_slice_rows();
  return commit_steps(slice > 0 && unsaved_.size() <= slice * kIntervalSlices ? slice : SIZE_MAX);
}

bool FleetCore::commit_more() {
  const std::size_t slice = store_.interval_slice_rows();
  return commit_steps(slice > 0 ? slice : SIZE_MAX);
}

bool FleetCore::commit_steps(std::size_t limit) {
  if (!uncommitted_.empty()) (void)persist();  // a caller that did not persist its commands: they go now
  save_unsaved(limit);
  if (store_.pending()) (void)(limit == SIZE_MAX ? store_.submit() : store_.submit_piece());
  on_store_progress();
  return !unsaved_.empty();
}

void FleetCore::flush_store() {
  if (!uncommitted_.empty()) (void)persist();
  save_unsaved();
  if (Expected<void> r = store_.commit(); !r) observer_.store_failed(r.error());
  on_store_progress();
}

void FleetCore::record(CommandView& v, bool with_result) {
  if (!v.recorded) {  // its creation (or its end before it was recorded): with this turn's persist()
    store_.put_command(v, with_result);
    return;
  }
  v.unsaved_result = v.unsaved_result || with_result;
  if (v.unsaved) return;
  const std::optional<CmdKey> key = CmdKey::of(v.cmd_id);
  if (!key) return;  // never: the table holds UUIDs only
  v.unsaved = true;
  unsaved_.push_back(*key);
}

void FleetCore::save_now(CommandView& v) {
  store_.put_command(v, v.unsaved_result);
  v.unsaved = false;
  v.unsaved_result = false;
}

void FleetCore::save_unsaved(std::size_t limit) {
  std::size_t next = 0;
  for (std::size_t saved = 0; next < unsaved_.size() && saved < limit; ++next) {
    CommandView* v = commands_.find(unsaved_[next].view());
    if (!v || !v->unsaved) continue;
    save_now(*v);
    ++saved;
  }
  unsaved_.erase(unsaved_.begin(), unsaved_.begin() + static_cast<std::ptrdiff_t>(next));
}

// ---------------------------------------------------------------------------------
// finding commands

CommandView* FleetCore::adopt(CommandView record) {
  record.recorded = true;
  record.in_outbox = false;
  if (CommandView* mine = commands_.find(record.cmd_id)) {
    // Another broker wrote it since: its later step wins, this broker's hands stay.
    if (lifecycle::rank(record.state) <= lifecycle::rank(mine->state)) return mine;
    const bool in_outbox = mine->in_outbox;
    const bool unsaved = mine->unsaved, unsaved_result = mine->unsaved_result;
    const CommandState later = record.state;
    record.state = mine->state;  // finish() below moves it out of the open list
    *mine = std::move(record);
    mine->in_outbox = in_outbox;
    mine->unsaved = unsaved;  // still listed in unsaved_: the store's guard keeps its later step
    mine->unsaved_result = unsaved_result;
    if (is_final(later)) commands_.finish(*mine, later);
    else mine->state = later;
    return mine;
  }
  return commands_.insert(std::move(record));
}

CommandView* FleetCore::find_command(std::string_view cmd_id) {
  if (CommandView* v = commands_.find(cmd_id)) return v;
  if (!store_.answers_at_once()) return nullptr;  // read with fetch_then / command_then
  std::optional<CommandView> found;
  store_.find(cmd_id, [&](std::optional<CommandView> v) { found = std::move(v); });
  return found ? adopt(std::move(*found)) : nullptr;
}

std::optional<CommandView> FleetCore::command(std::string_view cmd_id) const {
  if (const CommandView* v = commands_.find(cmd_id)) {
    if (remote_outputs_.size() == 0) return *v;
    CommandView copy = *v;
    remote_outputs_.overlay(copy);  // known here, running elsewhere
    return copy;
  }
  if (!store_.answers_at_once()) return std::nullopt;  // command_then reads it
  std::optional<CommandView> found;
  store_.find(cmd_id, [&](std::optional<CommandView> v) { found = std::move(v); });
  if (found) remote_outputs_.overlay(*found);  // running on another broker: what was relayed of its output
  return found;
}

bool FleetCore::read_command(std::string_view cmd_id, const std::function<void(const CommandView&)>& read) const {
  if (const CommandView* v = commands_.find(cmd_id)) {
    read(*v);
    return true;
  }
  const std::optional<CommandView> v = command(cmd_id);
  if (v) read(*v);
  return v.has_value();
}

bool FleetCore::reads_later() const { return !store_.answers_at_once(); }

void FleetCore::command_then(std::string_view cmd_id, std::function<void(std::optional<CommandView>)> done) const {
  if (const CommandView* v = commands_.find(cmd_id)) {
    CommandView copy = *v;
    remote_outputs_.overlay(copy);
    return done(std::move(copy));
  }
  store_.find(cmd_id, [this, done = std::move(done)](std::optional<CommandView> v) {
    if (v) remote_outputs_.overlay(*v);
    done(std::move(v));
  });
}

void FleetCore::list_commands_then(const CommandQuery& query, std::function<void(std::vector<CommandView>)> done) const {
  if (store_.answers_at_once() || !store_.durable()) return done(list_commands(query));
  for (const CmdKey& key : unsaved_)
    if (const CommandView* v = commands_.find(key.view()); v && v->unsaved) store_.put_command(*v, v->unsaved_result);
  const std::optional<CommandState> state = query.state;
  store_.list_commands(query, [this, state, done = std::move(done)](std::vector<CommandView> out) {
    for (CommandView& v : out)  // memory knows the steps not committed yet
      if (const CommandView* mine = commands_.find(v.cmd_id)) v = *mine;
    if (state) std::erase_if(out, [&](const CommandView& v) { return v.state != *state; });
    done(std::move(out));
  });
}

bool FleetCore::fetch_then(RigSession& s, std::string_view cmd_id, std::function<void(RigSession&)> again) {
  if (store_.answers_at_once() || commands_.find(cmd_id) != nullptr) return false;
  // Not in memory and the store answers later (Redis): read it, then go on
  // with the frame if the connection is still there.
  store_.find(cmd_id, [this, rig = s.rig_id, serial = s.serial, again = std::move(again)](std::optional<CommandView> v) {
    if (v && commands_.find(v->cmd_id) == nullptr) adopt(std::move(*v));
    RigSession* now = registry_.find(rig);
    if (now != nullptr && now->serial == serial && now->phase == SessionPhase::live) again(*now);
  });
  return true;
}

std::vector<CommandView> FleetCore::list_commands(const CommandQuery& query) const {
  std::vector<CommandView> out;
  if (store_.durable() && store_.answers_at_once()) {
    // Steps of the current interval into the store's buffer first, so that a
    // filter on state sees them (they are written there again at the interval).
    for (const CmdKey& key : unsaved_)
      if (const CommandView* v = commands_.find(key.view()); v && v->unsaved) store_.put_command(*v, v->unsaved_result);
    store_.list_commands(query, [&](std::vector<CommandView> found) { out = std::move(found); });
    for (CommandView& v : out)  // memory knows the steps not committed yet
      if (const CommandView* mine = commands_.find(v.cmd_id)) v = *mine;
    if (!query.state) return out;
    std::erase_if(out, [&](const CommandView& v) { return v.state != *query.state; });
    return out;
  }
  // Nothing is stored: what memory holds is the history.
  commands_.for_each([&](const CommandView& v) {
    if (!query.rig_id.empty() && v.rig_id != query.rig_id) return;
    if (query.state && v.state != *query.state) return;
    if (!query.job_id.empty() && v.job_id != query.job_id) return;
    if (v.enqueued_at_ms < query.since_ms) return;
    if (!query.before_cmd_id.empty() && v.cmd_id >= query.before_cmd_id) return;
    out.push_back(v);
  });
  std::sort(out.begin(), out.end(), [](const CommandView& a, const CommandView& b) { return a.cmd_id > b.cmd_id; });
  if (out.size() > query.limit) out.resize(query.limit);
  return out;
}

// ---------------------------------------------------------------------------------
// creating a command

std::optional<EnqueueFailure> FleetCore::refuse_existing(const CommandView& existing, const CommandRequest& r) const {
  if (existing.rig_id == r.rig_id && existing.kind == r.kind && existing.args == r.args) return std::nullopt;
  EnqueueFailure f;
  f.error = EnqueueError::conflict;
  f.rig_id = r.rig_id;
  f.cmd_id = existing.cmd_id;
  f.detail = "command " + existing.cmd_id + " (" + existing.kind + " for " + existing.rig_id +
             ") already has this " + (r.cmd_id.empty() ? "idempotency_key" : "cmd_id");
  return f;
}

EnqueueOutcome FleetCore::enqueue(CommandRequest req) {
  auto fail = [&](EnqueueError e, std::string detail) -> EnqueueOutcome {
    EnqueueFailure f;
    f.error = e;
    f.rig_id = req.rig_id;
    f.detail = std::move(detail);
    observer_.enqueue_refused(f);
    return f;
  };
  if (drain_.active) return fail(EnqueueError::draining, "broker " + settings_.broker_id + " is draining");
  if (!store_.up()) return fail(EnqueueError::store_unavailable, "the command store is not available");
  if (store_.backlog() > kMaxStoreBacklog)
    return fail(EnqueueError::store_unavailable, "the command store is " + std::to_string(store_.backlog()) +
                                                     " writes behind (the disk is slower than the commands)");
  // The SDK's own rules for a COMMAND (kind, args), so that what the broker accepts
  // is exactly what a rig can decode; then the frame must fit the rig's limit.
  const std::string cmd_id = req.cmd_id.empty() ? uuid_v7().to_string() : req.cmd_id;
  Message command{msg::Command{1, cmd_id, req.kind, req.args, 0}};
  if (Expected<void> valid = validate(command); !valid) return fail(EnqueueError::bad_request, valid.error().detail);
  if (!req.cmd_id.empty()) {
    const std::optional<Uuid> id = parse_uuid(req.cmd_id);
    if (!id || id->to_string() != req.cmd_id) return fail(EnqueueError::bad_request, "cmd_id: must be a UUID in lower case");
    // History order, since= and retention by age read the creation time from its
    // first 48 bits: another version's random bits would have a command pruned at
    // once, or never.
    if (id->version() != 7) return fail(EnqueueError::bad_request, "cmd_id: must be a UUIDv7 (RFC 9562), not version " +
                                                                      std::to_string(id->version()));
    const std::uint64_t now = clock_.wall_ms(), at = id->unix_ms();
    if (at > now + kClientIdAheadMs || at + kClientIdBehindMs < now)
      return fail(EnqueueError::bad_request,
                  "cmd_id: its time (" + std::to_string(at) + " ms) is more than an hour ahead of or a day behind the "
                  "broker's clock (" + std::to_string(now) + " ms): make it now");
  }
  std::size_t arg_bytes = 0;
  for (const auto& [k, v] : req.args) arg_bytes += k.size() + v.size();
  if (arg_bytes + req.kind.size() + 256 > settings_.max_frame_bytes)
    return fail(EnqueueError::bad_request,
                "args larger than the rigs' frame limit (" + std::to_string(settings_.max_frame_bytes) + " bytes)");
  if (!req.idempotency_key.empty() && !printable_key(req.idempotency_key))
    return fail(EnqueueError::bad_request, "idempotency_key: 1.." + std::to_string(kMaxIdempotencyKeyBytes) +
                                               " printable ASCII characters");
  const CommandDeadlines defaults = default_deadlines(req.kind);
  const std::uint32_t deliver_within_s = req.deliver_within_s.value_or(defaults.deliver_within_s);
  const std::uint32_t timeout_s = req.timeout_s.value_or(defaults.timeout_s);
  if (deliver_within_s == 0 || deliver_within_s > kMaxDeadlineS || timeout_s == 0 || timeout_s > kMaxDeadlineS)
    return fail(EnqueueError::bad_request,
                "deliver_within_s and timeout_s: 1.." + std::to_string(kMaxDeadlineS) + " seconds");

  // A command the client already named: that one, never a second.
  const CommandView* existing = nullptr;
  if (!req.cmd_id.empty()) existing = find_command(req.cmd_id);
  if (!existing && !req.idempotency_key.empty()) {
    existing = commands_.find_by_key(req.idempotency_key);
    // A store that answers later (Redis): memory's, and the store keeps the first command's key.
    if (!existing && store_.answers_at_once()) {
      std::optional<CommandView> stored;
      store_.find_by_key(req.idempotency_key, [&](std::optional<CommandView> v) { stored = std::move(v); });
      if (stored) existing = adopt(std::move(*stored));
    }
  }
  if (existing) {
    if (auto conflict = refuse_existing(*existing, req)) {
      observer_.enqueue_refused(*conflict);
      return *conflict;
    }
    return EnqueueOk{existing->cmd_id, existing->rig_id, existing->seq,      existing->state,
                     true,             !registry_.find(existing->rig_id), existing->deliver_by_ms};
  }

  RigSession* s = registry_.find(req.rig_id);
  const auto offline = offline_.find(req.rig_id);
  const bool known = s != nullptr || offline != offline_.end();
  if (!known && !req.hold)
    return fail(EnqueueError::unknown_rig, "rig " + req.rig_id + " has never connected (\"hold\": true holds the "
                                           "command until it does, up to deliver_within_s)");
  const std::vector<std::string>* kinds = s ? s->kinds : known ? &offline->second.kinds : nullptr;
  if (kinds && !kinds->empty() && std::find(kinds->begin(), kinds->end(), req.kind) == kinds->end())
    return fail(EnqueueError::unsupported_kind, "rig " + req.rig_id + " does not run '" + req.kind + "'");
  if (s && !kind_granted(s->grant(), req.kind))
    return fail(EnqueueError::kind_not_allowed,
                "rig " + req.rig_id + "'s token does not allow '" + req.kind + "' (its fleetlink_kinds)");
  const std::uint64_t now = clock_.wall_ms();
  if (s) {
    const std::size_t waiting = s->outbox.size() + (s->backlog() ? s->backlog()->size() : 0);
    if (waiting >= settings_.outbox_capacity) {
      EnqueueFailure f;
      f.error = EnqueueError::rig_unresponsive;
      f.rig_id = s->rig_id;
      const std::uint64_t oldest = s->outbox.entries().empty() ? now : s->outbox.entries().front().enqueued_ms;
      f.detail = outbox_full_detail(waiting, settings_.outbox_capacity, now > oldest ? now - oldest : 0);
      f.last_ack_seq = s->outbox.last_ack_seq();
      f.last_ack_at_ms = s->outbox.last_ack_at_ms();
      f.suggested_action = "force_reconnect";
      observer_.enqueue_refused(f);
      return f;
    }
  } else {
    std::size_t held = 0;
    for (const CommandView* c : commands_.open_of(req.rig_id))
      if (c->state == CommandState::queued || c->state == CommandState::sent) ++held;
    if (held >= settings_.outbox_capacity)
      return fail(EnqueueError::rig_unresponsive, "rig " + req.rig_id + " is not connected and already has " +
                                                      std::to_string(held) + " commands held for it");
  }

  CommandView v;
  v.cmd_id = cmd_id;
  v.rig_id = req.rig_id;
  v.kind = std::move(req.kind);
  v.args = std::move(req.args);
  v.idempotency_key = std::move(req.idempotency_key);
  v.job_id = std::move(req.job_id);
  v.operator_name = std::move(req.operator_name);
  v.state = CommandState::queued;
  v.enqueued_at_ms = now;
  v.deliver_by_ms = now + std::uint64_t{deliver_within_s} * 1000;
  v.timeout_s = timeout_s;
  CommandView* placed = commands_.insert(std::move(v));
  if (!placed) return fail(EnqueueError::bad_request, "cmd_id: not a UUID");
  record(*placed);
  uncommitted_.push_back(*CmdKey::of(placed->cmd_id));  // placed: its id fits (insert checked)
  EnqueueOk ok{placed->cmd_id, placed->rig_id, 0, CommandState::queued, false, s == nullptr, placed->deliver_by_ms};
  if (s) {
    if (!s->backlog() || s->backlog()->empty()) {
      std::uint64_t seq = 0;
      (void)s->outbox.enqueue(placed->cmd_id, now, settings_.outbox_capacity, &seq);
      s->outbox.set_view(seq, placed);
      placed->in_outbox = true;
      ok.seq = seq;
    } else {
      s->backlog_to_fill().push_back(placed);
    }
    observer_.command_enqueued(*s, *placed, s->outbox.size());
  }
  return ok;
}

// ---------------------------------------------------------------------------------
// delivery on a rig's connection

void FleetCore::deliver_open(RigSession& s) {
  // Brokers sharing the store: another one may hold commands for this rig (it
  // wrote since start-up, and since this rig's were last read here).
  if (const std::uint64_t foreign = store_.foreign_writes(); foreign != foreign_seen_) {
    auto [read, first] = foreign_read_.try_emplace(s.rig_id, foreign);
    if (first || read->second != foreign) {
      read->second = foreign;
      const bool later = !store_.answers_at_once();
      store_.open_commands_of(s.rig_id, [this, later, rig = s.rig_id, serial = s.serial](std::vector<CommandView> records) {
        for (CommandView& r : records) adopt(std::move(r));
        if (!later) return;
        // Read from the loop: the rest goes now, if the connection is still there.
        RigSession* now = registry_.find(rig);
        if (now != nullptr && now->serial == serial && now->phase == SessionPhase::live) deliver_known(*now);
      });
      if (later) return;
    }
  }
  deliver_known(s);
}

void FleetCore::deliver_known(RigSession& s) {
  if (const auto owed = owed_cancels_.find(s.rig_id); owed != owed_cancels_.end()) {
    std::vector<std::string> ids = std::move(owed->second);
    owed_cancels_.erase(owed);
    for (const std::string& id : ids)
      if (!queue_cancel_of(s, id)) owe_cancel(s.rig_id, id);  // more than a session holds: the next connection
  }
  const std::string boot = s.boot_id.to_string();
  const std::uint64_t now = clock_.wall_ms();
  const std::vector<CommandView*> open = commands_.open_of(s.rig_id);  // a copy: ends change the list
  for (CommandView* v : open) {
    if (v->in_outbox || !v->recorded) continue;
    if (v->cancel_requested_at_ms || (v->state == CommandState::sent && now >= v->deliver_by_ms)) {
      // Whether the rig ever had it is the rig's to say: a CANCEL asks (its answer
      // is the stored RESULT, interrupted, or "never received").
      queue_cancel(s, *v);
      continue;
    }
    switch (v->state) {
      case CommandState::queued:
      case CommandState::sent:
        if (!kind_granted(s.grant(), v->kind)) {
          // Held while the rig was away, and its token now does not allow it: never sent.
          end(*v, CommandState::rejected, "kind_not_allowed: rig " + s.rig_id + "'s token does not allow '" + v->kind + "'");
          break;
        }
        s.backlog_to_fill().push_back(v);
        break;
      case CommandState::acked:
      case CommandState::running:
        if (lifecycle::awaits_new_boot(*v)) {
          if (v->acked_boot_id != boot) end(*v, CommandState::succeeded, "the rig came back with boot_id " + boot);
        } else if (v->acked_boot_id == boot) {
          // The same agent process: sent again, its dedup answers with the result a
          // broker crash may have lost (or the result comes when it finishes).
          s.backlog_to_fill().push_back(v);
        } else {
          // A new process: it reports what its old one left (a spooled RESULT, or
          // interrupted) after WELCOME; what it does not report was interrupted.
          v->reconcile_by_ms = now + settings_.reconcile_grace_ms;
        }
        break;
      default:
        break;
    }
  }
  fill_outbox(s);
}

void FleetCore::fill_outbox(RigSession& s) {
  std::deque<CommandView*>* backlog = s.backlog();
  if (!backlog) return;
  const std::uint64_t now = clock_.wall_ms();
  bool added = false;
  while (!backlog->empty() && s.outbox.size() < settings_.outbox_capacity) {
    CommandView* v = backlog->front();
    backlog->pop_front();
    if (is_final(v->state) || v->in_outbox) continue;
    std::uint64_t seq = 0;
    (void)s.outbox.enqueue(v->cmd_id, now, settings_.outbox_capacity, &seq);
    s.outbox.set_view(seq, v);
    v->in_outbox = true;
    added = true;
  }
  if (backlog->empty()) s.drop_backlog();
  if (added) transport_.write_soon(s);
}

void FleetCore::withdraw(CommandView& v) {
  RigSession* s = registry_.find(v.rig_id);
  if (!s) return;
  if (v.in_outbox) s->outbox.settle_cmd(v.cmd_id);
  v.in_outbox = false;
  if (s->backlog()) std::erase(*s->backlog(), &v);
}

bool FleetCore::queue_cancel(RigSession& s, CommandView& v) {
  if (!queue_cancel_of(s, v.cmd_id)) return false;
  if (v.cancel_requested_at_ms && !v.cancel_by_ms) v.cancel_by_ms = clock_.wall_ms() + settings_.cancel_grace_ms;
  return true;
}

bool FleetCore::queue_cancel_of(RigSession& s, const std::string& cmd_id) {
  std::vector<std::string>& list = pending_cancels_[&s];
  if (list.size() >= kMaxCancelsPerSession || std::find(list.begin(), list.end(), cmd_id) != list.end())
    return false;
  list.push_back(cmd_id);
  s.outbound.cancels = true;
  transport_.write_soon(s);
  return true;
}

void FleetCore::owe_cancel(const std::string& rig_id, const std::string& cmd_id) {
  std::vector<std::string>& owed = owed_cancels_[rig_id];
  if (owed.size() >= kMaxOwedCancelsPerRig || std::find(owed.begin(), owed.end(), cmd_id) != owed.end()) return;
  owed.push_back(cmd_id);
}

// ---------------------------------------------------------------------------------
// ends

void FleetCore::finished(const CommandView& v) {
  observer_.command_finished(v);
  emit(EventType::command_done, v.rig_id, v.cmd_id, to_string(v.state));
}

void FleetCore::end(CommandView& v, CommandState state, std::string detail) {
  if (is_final(v.state)) return;
  lifecycle::end(commands_, v, state, std::move(detail), clock_.wall_ms());
  record(v, true);
  finished(v);
}

CancelOutcome FleetCore::cancel(std::string_view cmd_id) {
  CommandView* v = store_.answers_at_once() ? find_command(cmd_id) : commands_.find(cmd_id);
  if (!v) return CancelOutcome::unknown;
  if (is_final(v->state)) return CancelOutcome::finished;
  if (v->cancel_requested_at_ms) return CancelOutcome::pending;
  if (v->state == CommandState::queued) {
    withdraw(*v);
    end(*v, CommandState::cancelled, "cancelled before it reached the rig");
    return CancelOutcome::cancelled;
  }
  v->cancel_requested_at_ms = clock_.wall_ms();
  save_now(*v);  // an operator was told: with the next commit, not the next interval
  // Connected here: the CANCEL goes now. Otherwise with the rig's next connection (deliver_open).
  if (RigSession* s = registry_.find(v->rig_id)) queue_cancel(*s, *v);
  return CancelOutcome::requested;
}

// Deadlines are found by walking the open commands a few times a second: their
// number is bounded (outboxes, held queues), and a command that finishes leaves
// nothing behind to expire (a reminder queue would hold one entry per command
// for its whole delivery window: millions at tens of thousands a second).
void FleetCore::expire_deadlines() {
  const std::uint64_t now = clock_.wall_ms();
  if (now - last_deadline_scan_ms_ < kDeadlineScanMs) return;
  last_deadline_scan_ms_ = now;
  std::vector<CommandView*> due;
  commands_.for_each_open_rig([&](std::string_view, const std::vector<CommandView*>& open) {
    for (CommandView* v : open) {
      const bool acked = v->state == CommandState::acked || v->state == CommandState::running;
      if ((!acked && now >= v->deliver_by_ms) ||
          (acked && v->acked_at_ms && now >= *v->acked_at_ms + std::uint64_t{v->timeout_s} * 1000) ||
          (v->reconcile_by_ms && now >= v->reconcile_by_ms) || (v->cancel_by_ms && now >= v->cancel_by_ms))
        due.push_back(v);
    }
  });
  for (CommandView* v : due) {
    if (is_final(v->state)) continue;
    const bool acked = v->state == CommandState::acked || v->state == CommandState::running;
    if (v->cancel_by_ms && now >= v->cancel_by_ms) {
      end(*v, CommandState::cancelled,
          "the rig did not answer the cancel within " + std::to_string(settings_.cancel_grace_ms / 1000) + " s");
    } else if (acked && v->reconcile_by_ms && now >= v->reconcile_by_ms) {
      const RigSession* s = registry_.find(v->rig_id);
      const std::string boot = s ? s->boot_id.to_string() : std::string();
      v->reconcile_by_ms = 0;
      if (s && v->acked_boot_id != boot)
        end(*v, CommandState::interrupted,
            "the rig restarted (boot_id " + boot + ") without a result for it from boot_id " + v->acked_boot_id);
    } else if (acked && v->acked_at_ms && now >= *v->acked_at_ms + std::uint64_t{v->timeout_s} * 1000) {
      const bool reboot = lifecycle::awaits_new_boot(*v);
      RigSession* s = registry_.find(v->rig_id);
      if (s) queue_cancel(*s, *v);
      else if (!reboot) owe_cancel(v->rig_id, v->cmd_id);
      end(*v, CommandState::timed_out,
          reboot ? "the rig did not come back with a new boot_id within timeout_s (" + seconds(v->timeout_s) + ")"
          : s    ? "no result within timeout_s (" + seconds(v->timeout_s) + "): CANCEL sent to the rig"
                 : "no result within timeout_s (" + seconds(v->timeout_s) +
                       "): the rig is away; CANCEL goes when it reconnects");
    } else if (v->state == CommandState::queued && now >= v->deliver_by_ms) {
      withdraw(*v);
      end(*v, CommandState::undeliverable,
          "not delivered within deliver_within_s (" +
              seconds(static_cast<std::uint32_t>((v->deliver_by_ms - v->enqueued_at_ms) / 1000)) +
              "): it never reached the rig");
    } else if (v->state == CommandState::sent && now >= v->deliver_by_ms + std::uint64_t{v->timeout_s} * 1000) {
      // Written, never acknowledged: the rig may have it, and its next connection is
      // asked (deliver_open). One that never comes back is given up after timeout_s more.
      end(*v, CommandState::undeliverable, "never acknowledged, and its rig did not come back to say whether it had it");
    }
  }
}

}  // namespace fleetlink::broker
