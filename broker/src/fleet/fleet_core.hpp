#pragma once
// The broker's data plane as pure logic: every rig session's state machine, the
// registry, the command table and the event bus, between the transport below
// (RigTransport: libwebsockets) and the control plane above (Fleet). It takes
// what the transport saw (a connection, bytes, a pong, a close) and timer ticks,
// and answers with what to do: frames to write in priority order (next_frame),
// closes with a code, events. No sockets, no clocks of its own: unit-tested in
// tests/unit/broker/fleet with a fake transport and a hand-moved clock.
//
// One file per inbound message kind implements its handler (handle_hello.cpp,
// handle_ack.cpp, handle_nack.cpp, handle_result.cpp, handle_output.cpp,
// handle_event.cpp); this file's .cpp holds the connection lifecycle, the sweep,
// the outbound side and the Fleet operations.
//
// Single-threaded: everything runs on the event loop.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "fleet/broker_mesh.hpp"
#include "fleet/clock.hpp"
#include "fleet/command_table.hpp"
#include "fleet/drain.hpp"
#include "fleet/events.hpp"
#include "fleet/fleet.hpp"
#include "fleet/observer.hpp"
#include "fleet/outbound.hpp"
#include "fleet/remote_output.hpp"
#include "fleet/rig_registry.hpp"
#include "fleet/rig_session.hpp"
#include "fleet/transport.hpp"
#include "fleetlink/codec.hpp"
#include "store/command_store.hpp"
#include "store/registry_backend.hpp"

namespace fleetlink::broker {

// The data plane's settings (the broker's config, app/config.hpp, fills them).
struct FleetSettings {
  std::string broker_id = "broker";
  KeepaliveSettings keepalive;
  std::uint32_t hello_timeout_ms = 10000;
  std::uint32_t outbox_capacity = 128;
  std::uint32_t max_frame_bytes = 131072;
  double rig_rate = 200;                    // inbound frames per second per connection
  double rig_burst = 400;
  // After a drain starts: close what remains 1001 and stop (drain_deadline(): 0 is
  // each drain's own window + 5 s; a value is used, but never before window + 1 s).
  std::uint32_t drain_deadline_ms = 0;
  std::uint32_t command_history = 10000;
  Strictness strictness = Strictness::lenient;
  std::uint32_t registry_refresh_ms = 10000;  // registry entries (TTL 60 s) are refreshed this often
  std::uint32_t sweep_slice_ms = 10;          // the sweep visits a slice of the sessions per tick
  // A rig back with a new boot_id has this long to report the commands its old
  // boot acknowledged (spooled results, interrupted ones) before the broker
  // concludes they were interrupted.
  std::uint32_t reconcile_grace_ms = 30000;
  // A CANCEL unanswered this long: the command ends cancelled.
  std::uint32_t cancel_grace_ms = 30000;
  // Steps of commands (ACK, RESULT, ...) are committed to the store at least this
  // often; a new command is committed before anything is promised about it.
  std::uint32_t store_commit_interval_ms = 20;
  // The inventory's last_seen of connected rigs is written this often.
  std::uint32_t inventory_refresh_ms = 60000;
  // Several brokers: another broker's answer to a routed command, cancel or
  // force-reconnect is awaited this long.
  std::uint32_t mesh_answer_ms = 3000;
  // A connected rig whose oldest unacknowledged command waits longer than this
  // is shown unresponsive (a rig reads and ACKs a command at once: one that does
  // not is frozen or cut off), before its missed pongs close it.
  std::uint32_t unresponsive_after_ms = 10000;
  // Rig tokens (fleet/rig_grant.hpp): whether a rig must present one.
  RigTokenMode rig_token = RigTokenMode::off;
};

// A frame for the transport to write.
struct Outgoing {
  OutboundKind kind = OutboundKind::none;
  std::uint32_t ping_stamp = 0;  // ping: its 4-byte payload (lws drops empty PONGs)
  Message message;               // every other kind
};

class FleetCore final : public Fleet {
 public:
  FleetCore(FleetSettings settings, RigTransport& transport, FleetObserver& observer, const Clock& clock,
            RegistryBackend& registry, CommandStore& store, std::uint64_t seed);
  FleetCore(const FleetCore&) = delete;
  FleetCore& operator=(const FleetCore&) = delete;

  const FleetSettings& settings() const noexcept { return settings_; }
  const Clock& clock() const noexcept { return clock_; }

  // ---- what the transport saw ----
  // A WebSocket was established; `s` lives (in the transport's memory) until on_closed.
  void on_open(RigSession& s);
  // Bytes of a frame: `remaining` more follow in this frame, `final` ends it.
  void on_data(RigSession& s, std::span<const std::uint8_t> data, std::size_t remaining, bool final);
  void on_pong(RigSession& s);
  // The rig sent a close frame with this code.
  void on_peer_close(RigSession& s, std::uint16_t code);
  // The connection is gone; the transport destroys `s` right after.
  void on_closed(RigSession& s);

  // ---- the single writer ----
  // The most urgent frame waiting for `s`, taken (nullopt: nothing to write).
  std::optional<Outgoing> next_frame(RigSession& s);
  bool has_more_to_write(const RigSession& s) const noexcept;

  // ---- timers ----
  // One slice of the walk over every session: hello timeouts, keepalive pings and
  // 4002 closes, registry refreshes; the drain's end. Called every sweep_interval_ms().
  void sweep();
  std::uint32_t sweep_interval_ms() const noexcept { return sweep_slice_ms_; }
  // Sessions paused by the inbound rate limit whose bucket refilled are read again;
  // returns how many. Called every 20 ms while has_paused().
  std::size_t resume_paused();
  bool has_paused() const noexcept { return !paused_.empty(); }

  // ---- the store ----
  // At start-up: every open command, every rig ever seen; the unfinished jobs are
  // returned for the control plane.
  Expected<std::vector<JobRecord>> load();
  // Commits the steps of the last interval (a timer calls it every
  // store_commit_interval_ms): they wait so that the steps of one interval
  // become one row per command, and a fan-out's answers dirty each page once.
  // What a crash loses of them the rigs tell again: a command the store has as
  // not acknowledged is sent again, and the rig's dedup answers with its ACK and
  // stored RESULT.
  //
  // A light interval (at most kIntervalSlices pieces of the store's
  // interval_slice_rows()) goes in those pieces, the first here and the rest
  // by commit_more(), one per turn of the loop: a command that arrives
  // meanwhile waits for one small commit, not for the whole interval's. True:
  // steps are left for commit_more().
  bool commit_if_due();
  // The interval's next piece; true while steps are left.
  bool commit_more();
  // Makes whatever is pending durable, and waits for it (shutdown).
  void flush_store();
  // The store has outcomes of batches (its wakeup ran): commands waiting for
  // their record go (or are withdrawn), answers waiting for it are given.
  void on_store_progress();
  CommandStore& store() noexcept { return store_; }

  // ---- the application ----
  // The listeners are up and the certificates loaded (part of ready()).
  void set_transport_ready(bool ready) noexcept { transport_ready_ = ready; }
  // Called once when a drain has finished (no connection left, or the deadline passed).
  void on_drained(std::function<void()> done) { on_drained_ = std::move(done); }
  std::size_t connection_count() const noexcept { return connection_count_; }

  // ---- trust (the rig listener's CA bundle or CRLs were reloaded) ----
  // Whether a connection's certificate is still trusted: nullopt yes, else why not.
  using TrustCheck = std::function<std::optional<std::string>(const RigSession&)>;
  // Closes `s` 4401: its certificate is no longer trusted (`why`: the verifier's verdict).
  void distrust(RigSession& s, std::string_view why);
  // Every connection with a certificate open now is asked `check`, a slice at a
  // time (recheck_slice), and distrusted when refused. Connections opened later
  // were verified under the new trust and are not visited; a new call starts
  // over with its own check.
  void start_recheck(TrustCheck check);
  // Checks up to `max` connections; true while some remain.
  bool recheck_slice(std::size_t max);
  bool rechecking() const noexcept { return recheck_cursor_ != nullptr; }

  // ---- Fleet (the control plane) ----
  EnqueueOutcome enqueue(CommandRequest request) override;
  std::uint64_t persist() override;
  void when_recorded(std::uint64_t batch, std::function<void(const Expected<void>&)> then) override;
  std::vector<RigView> rigs() const override;
  void visit_rig_labels(const RigLabelsVisitor& visit) const override;
  std::optional<RigView> rig(std::string_view rig_id) const override;
  std::optional<CommandView> command(std::string_view cmd_id) const override;
  bool read_command(std::string_view cmd_id, const std::function<void(const CommandView&)>& read) const override;
  std::vector<CommandView> list_commands(const CommandQuery& query) const override;
  bool reads_later() const override;
  void command_then(std::string_view cmd_id, std::function<void(std::optional<CommandView>)> done) const override;
  void list_commands_then(const CommandQuery& query, std::function<void(std::vector<CommandView>)> done) const override;
  bool force_reconnect(std::string_view rig_id) override;
  CancelOutcome cancel(std::string_view cmd_id) override;
  void start_drain(std::chrono::milliseconds window) override;
  bool draining() const override { return drain_.active; }
  bool ready() const override;
  std::vector<std::string> not_ready_because() const override;
  std::string broker_id() const override { return settings_.broker_id; }
  EventBus& events() override { return bus_; }
  bool routes_elsewhere(std::string_view rig_id) const override;
  bool cancel_routes_elsewhere(std::string_view cmd_id) const override;
  bool shares_jobs() const override;
  void hold_job(std::string_view job_id, bool take, std::function<void(JobHold)> done) override;
  std::uint64_t job_hold_refresh_ms() const override { return settings_.registry_refresh_ms; }
  void enqueue_routed(CommandRequest request, std::function<void(RoutedOutcome)> done) override;
  void cancel_routed(std::string_view cmd_id, std::function<void(CancelOutcome)> done) override;
  void force_reconnect_routed(std::string_view rig_id, std::function<void(bool closed, bool known)> done) override;

  // ---- several brokers (fleet_mesh.cpp) ----
  // The mesh to the other brokers (null: a single broker). Set before the loop runs.
  void set_mesh(BrokerMesh* mesh) noexcept { mesh_ = mesh; }
  // A note from another broker (the mesh's listener, on the loop).
  void on_mesh(const MeshNote& note);
  // The registry is reachable again: every live rig's entry is written again
  // (a refresh restores a missing key; one that names another owner closes 4410).
  void registry_recovered();
  // Asks of other brokers still waiting for answers.
  std::size_t mesh_asks() const noexcept { return asks_.size(); }

 private:
  // ---- HELLO (handle_hello.cpp) ----
  struct PendingHello;
  void claim_answered(std::uint32_t serial, const std::shared_ptr<PendingHello>& p, Expected<ClaimResult> r,
                      bool forced);
  void claim_rig(std::uint32_t serial, const std::shared_ptr<PendingHello>& p, bool force);
  void ask_owner(std::uint32_t serial, const std::shared_ptr<PendingHello>& p, const RegistryEntry& owner);
  void refuse_hello(RigSession& s, PendingHello& p);
  void admit(RigSession& s, PendingHello& p);
  void probe(RigSession& s);
  RigSession* claiming_session(std::uint32_t serial) const;
  // A HELLO for a rig whose connection here may be alive: the old one is probed
  // and the newcomer waits (probes_, by the old connection's serial).
  void wait_for_probe(RigSession& newcomer, RigSession& old, const std::shared_ptr<PendingHello>& p);
  // The old connection answered (alive: the newcomer is refused 4409), closed
  // (the newcomer goes on), or its probe timed out (closed 4410, the newcomer goes on).
  void probe_answered(RigSession& old);
  void probed_connection_gone(const RigSession& old);
  void expire_probes(std::uint32_t now);
  void continue_hello(RigSession& s, const std::shared_ptr<PendingHello>& p, HelloVerdict verdict);
  // The registry's answer to a session's refresh.
  void refreshed(const std::string& rig_id, std::uint32_t serial, const Expected<RefreshResult>& r);

  // ---- the mesh (fleet_mesh.cpp) ----
  struct MeshAsk {
    MeshKind answer = MeshKind::command_answer;
    std::uint64_t deadline_ms = 0;   // wall clock
    std::size_t answers_due = 1;     // a broadcast: every other broker answers (0: not known yet)
    std::size_t answers_seen = 0;    // "not mine" answers so far
    std::function<void(const MeshNote* answer)> done;  // null: nobody held it, or no answer in time
  };
  std::uint64_t start_ask(MeshKind answer, std::function<void(const MeshNote*)> done);
  void settle_ask(std::uint64_t ask, const MeshNote* answer);
  void expire_asks();
  void answer_note(const MeshNote& asked, MeshNote answer);
  // To every broker; the ask settles with the first that holds it, or when every
  // other one said it does not.
  void broadcast_ask(std::uint64_t ask, MeshNote note);
  void enqueue_here(CommandRequest request, std::function<void(RoutedOutcome)> done);
  void cancel_here(const std::string& cmd_id, std::function<void(CancelOutcome)> done);
  void relay(const FleetEvent& event);
  void announce(const RigSession& s);  // rig_seen to every broker
  void heard_of(const MeshNote& note);  // rig_seen, rig_connected/disconnected from another broker
  RigView remote_view(const RigRecord& r) const;

  // One per inbound message kind (handle_*.cpp).
  void on_frame(RigSession& s, std::span<const std::uint8_t> frame);
  void on_hello(RigSession& s, msg::Hello hello);
  void on_ack(RigSession& s, const msg::Ack& ack);
  void on_nack(RigSession& s, const msg::Nack& nack);
  void on_result(RigSession& s, msg::Result result);
  void on_output(RigSession& s, const msg::OutputChunk& chunk);
  void on_event(RigSession& s, const msg::Event& event);

  // ---- commands (fleet_commands.cpp) ----
  // The command in memory, or read from the store into memory; nullptr if neither has it.
  CommandView* find_command(std::string_view cmd_id);
  // A record read from the store, merged: the later state wins.
  CommandView* adopt(CommandView record);
  std::optional<EnqueueFailure> refuse_existing(const CommandView& existing, const CommandRequest& r) const;
  // Sends a rig's open commands on its new connection (and settles what the
  // connection's boot_id tells: a reboot done, commands of an old boot to reconcile).
  void deliver_open(RigSession& s);
  void deliver_known(RigSession& s);  // deliver_open's part after the store was read
  // A frame about a command neither memory has nor a store answering at once:
  // true when it is being read (`again` runs with the session when it is in
  // memory, if it is in the store); false: go on now.
  bool fetch_then(RigSession& s, std::string_view cmd_id, std::function<void(RigSession&)> again);
  // Moves commands from the backlog into the outbox while there is room.
  void fill_outbox(RigSession& s);
  // Takes a command out of its rig's outbox or backlog (it will not be sent).
  void withdraw(CommandView& v);
  // Queues a CANCEL for v on s; false when too many wait or one already does.
  bool queue_cancel(RigSession& s, CommandView& v);
  bool queue_cancel_of(RigSession& s, const std::string& cmd_id);
  // The rig is not here: its CANCEL goes after its next WELCOME.
  void owe_cancel(const std::string& rig_id, const std::string& cmd_id);
  // The store gets v: a new command at once (persist() commits it); a step of a
  // recorded one with the next interval commit (save_unsaved).
  void record(CommandView& v, bool with_result = false);
  // What only memory has goes to the store's buffer now (an operator's cancel;
  // an interval commit).
  void save_now(CommandView& v);
  // The first `limit` commands with unsaved steps, or all of them.
  void save_unsaved(std::size_t limit = SIZE_MAX);
  // persist(), save_unsaved(limit), submit; true while steps are left.
  bool commit_steps(std::size_t limit);
  void finished(const CommandView& v);  // the event, the observer
  void end(CommandView& v, CommandState state, std::string detail);
  void expire_deadlines();
  // What became of a batch: nullopt while it is on its way; an Error if the
  // store reported it failed and it is not durable since.
  std::optional<Expected<void>> batch_state(std::uint64_t batch) const;
  // The commands held for batches up to `batch` go, or are withdrawn if it failed.
  void release_held(std::uint64_t batch, const Expected<void>& result);
  RigRecord rig_record(const RigSession& s) const;

  void refuse_frame(RigSession& s, const FrameFault& fault, std::string_view detail);
  void close_session(RigSession& s, CloseCode code, std::string reason);
  // The session stops being its rig's connection; what it had not got acknowledged is lost.
  void unregister(RigSession& s, std::string_view why);
  void pause_reading(RigSession& s);
  void sweep_one(RigSession& s, std::uint32_t now, bool refresh);
  void check_drain_done();
  void emit(EventType type, std::string_view rig_id, std::string_view cmd_id, std::string detail,
            std::uint64_t offset = 0);
  // Whether an event of this type would reach anyone (here, or relayed to other brokers).
  bool heard(EventType type, std::string_view cmd_id) const {
    return (mesh_ != nullptr && mesh_->up()) || bus_.wants(type, cmd_id);
  }
  RigView view_of(const RigSession& s) const;
  RigView view_of(const RigRecord& r) const;
  std::string subject_of(const RigSession& s) const;

  FleetSettings settings_;
  RigTransport& transport_;
  FleetObserver& observer_;
  const Clock& clock_;
  RigRegistry registry_;
  CommandStore& store_;
  CommandTable commands_;
  std::uint64_t last_deadline_scan_ms_ = 0;
  static constexpr std::uint64_t kDeadlineScanMs = 200;
  static constexpr std::size_t kIntervalSlices = 16;  // commit_if_due: a light interval's pieces, at most
  // Rigs seen before and not connected here now (the store's inventory).
  std::unordered_map<std::string, RigRecord, TransparentStringHash, std::equal_to<>> offline_;
  std::vector<CmdKey> uncommitted_;       // commands created since the last persist() (ids inline: no allocation)
  // Commands that go to their rig only once their batch is durable, by batch.
  struct HeldBatch {
    std::uint64_t batch = 0;
    std::vector<CmdKey> commands;
  };
  std::deque<HeldBatch> held_;
  std::multimap<std::uint64_t, std::function<void(const Expected<void>&)>> waiters_;  // when_recorded
  std::uint64_t reported_through_ = 0;    // the newest batch whose outcome was taken
  std::deque<std::pair<std::uint64_t, Error>> failed_;  // batches reported failed, not durable since
  std::vector<CmdKey> unsaved_;           // commands with a step not yet in the store (CommandView::unsaved)
  std::uint64_t foreign_seen_ = 0;        // store_.foreign_writes() at start-up
  // Brokers sharing the store: foreign_writes() when each rig's open commands were last read.
  std::unordered_map<std::string, std::uint64_t, TransparentStringHash, std::equal_to<>> foreign_read_;
  std::uint32_t last_inventory_ms_ = 0;
  bool inventory_pass_ = false;
  EventBus bus_;
  DrainPlan drain_;
  std::mt19937_64 rng_;
  std::function<void()> on_drained_;
  bool transport_ready_ = false;
  bool drained_ = false;

  RigSession* head_ = nullptr;          // every session
  std::size_t connection_count_ = 0;
  RigSession* sweep_cursor_ = nullptr;  // the next one the sweep visits; null: a new pass
  RigSession* recheck_cursor_ = nullptr;  // the next one a reload's re-check visits; null: none running
  TrustCheck recheck_;
  std::uint32_t sweep_slice_ms_ = 10;
  std::uint32_t sweep_slices_ = 1;      // ticks per pass
  bool refresh_pass_ = false;           // this pass also refreshes the registry entries
  std::uint32_t last_refresh_ms_ = 0;
  std::vector<RigSession*> paused_;     // reading paused by the inbound rate limit
  // CANCELs waiting to be written, per session: rare, so kept here rather than in every session.
  std::unordered_map<const RigSession*, std::vector<std::string>> pending_cancels_;
  // CANCELs owed to rigs that were away when a command of theirs timed out (or
  // whose connection closed before the CANCEL was written): sent after the rig's
  // next WELCOME to this broker, so that it stops what it may still be running.
  // Kept in memory only: a broker restart forgets them (docs/OPERATIONS.md 9).
  std::unordered_map<std::string, std::vector<std::string>> owed_cancels_;

  // Several brokers.
  BrokerMesh* mesh_ = nullptr;
  std::unordered_map<std::uint32_t, RigSession*> claiming_;  // sessions whose claim is on its way, by serial
  struct HelloProbe {
    RigSession* old;                        // valid while the entry lives (erased when it closes)
    std::uint32_t waiter;                   // the newcomer's serial (claiming_)
    std::shared_ptr<PendingHello> pending;
    std::uint32_t deadline_ms;              // mono: no pong by then -> the old one is superseded
  };
  std::unordered_map<std::uint32_t, HelloProbe> probes_;  // by the old connection's serial
  std::uint32_t next_serial_ = 0;
  std::map<std::uint64_t, MeshAsk> asks_;
  // Rigs other brokers hold (rig_seen), for the fleet view; forgotten at their
  // disconnect, or when not announced again for a few inventory passes.
  struct RemoteRig {
    RigRecord record;
    std::uint64_t heard_ms = 0;
  };
  std::unordered_map<std::string, RemoteRig, TransparentStringHash, std::equal_to<>> remote_;
  // Output of commands on other brokers, as relayed (laid over their stored records).
  RemoteOutputs remote_outputs_;
  std::uint64_t next_ask_ = 0;
};

}  // namespace fleetlink::broker
