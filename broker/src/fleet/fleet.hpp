#pragma once
// The broker's view of the fleet, as the control plane sees it. The data plane
// (agent connections, registry, outboxes) implements it; the control API, the
// dashboard and the metrics endpoint only read it and ask it to act.
//
// Everything here runs on the broker's single event-loop thread: no locks.
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "fleet/events.hpp"
#include "fleetlink/expected.hpp"
#include "fleetlink/messages.hpp"

namespace fleetlink::broker {

struct UnackedCommand {
  std::string cmd_id;
  std::uint64_t seq = 0;
  std::string kind;
  std::uint64_t age_ms = 0;      // since enqueue
  bool sent = false;             // written to the socket (false: still in the outbox)
};

struct RigView {
  std::string rig_id;
  // "connected" | "unresponsive" (a pong missing, or its oldest unacknowledged command
  // older than unresponsive_after_ms) | "draining" | "offline" (known, not connected here)
  std::string state;
  std::string unresponsive_because;  // unresponsive: why, in words
  bool connected = false;
  std::string boot_id;
  std::string agent_version;
  StringMap labels;
  std::vector<std::string> kinds;
  std::string peer;              // "ip:port" (connected only)
  std::uint64_t connected_at_ms = 0;
  std::uint64_t first_seen_ms = 0;
  std::uint64_t last_seen_ms = 0;     // last frame or pong from the rig (offline: when it left)
  std::uint64_t last_ack_seq = 0;
  std::optional<std::uint64_t> last_ack_at_ms;
  std::uint64_t next_seq = 1;
  // Commands waiting for the rig's ACK (written or not) and those held behind
  // them: what outbox_capacity bounds, and a POST is refused 503 at.
  std::size_t outbox_depth = 0;
  std::size_t unsent = 0;             // of the outbox: queued, not yet written
  std::size_t outbox_capacity = 0;
  std::size_t held = 0;               // commands waiting for the rig (offline, or behind a full outbox)
  unsigned missed_pongs = 0;
  std::vector<UnackedCommand> unacked; // oldest first
  std::string broker_id;              // the broker it is connected to (several brokers; empty: offline)
};

// A command's life (docs/PROTOCOL.md section 6, fleet/lifecycle.hpp):
//
//   queued -> sent -> acked -> running -> succeeded | failed | timed_out | cancelled
//
// or, never run: undeliverable (not acknowledged by its delivery deadline),
// rejected (the rig NACKed it); or interrupted (the rig restarted, new boot_id,
// without finishing it). The last seven are final.
enum class CommandState : std::uint8_t {
  queued,         // recorded; waiting for (or in) its rig's outbox
  sent,           // written to a connection, no ACK yet (sent again on the next one if none comes)
  acked,          // the rig accepted it; no RESULT yet
  running,        // output is arriving (or a reboot was scheduled and the new boot is awaited)
  succeeded,
  failed,
  timed_out,      // no RESULT by its deadline (the rig was told to CANCEL), or the rig's own time limit
  cancelled,
  undeliverable,  // not acknowledged by its delivery deadline: it never ran
  rejected,       // the rig refused it (NACK): it never ran
  interrupted,    // the rig came back with a new boot_id and no result for it
};
inline constexpr std::size_t kCommandStateCount = 11;
const char* to_string(CommandState s) noexcept;
std::optional<CommandState> command_state_from_string(std::string_view s) noexcept;
constexpr bool is_final(CommandState s) noexcept { return s >= CommandState::succeeded; }

// One command's record: what the broker knows of it, what the store keeps.
struct CommandView {
  std::string cmd_id;
  std::string rig_id;
  std::string kind;
  StringMap args;
  std::string idempotency_key;            // the client's name for it (a repeated POST returns this command)
  std::string job_id;                     // the fan-out job it belongs to, if any
  std::string operator_name;              // who asked for it (the operators file's name); empty: an open API
  std::uint64_t seq = 0;                  // on its current (or last) connection; 0 before the first delivery
  std::uint32_t attempts = 0;             // connections it was written on
  CommandState state = CommandState::queued;
  std::uint64_t enqueued_at_ms = 0;       // queued
  std::optional<std::uint64_t> sent_at_ms;
  std::optional<std::uint64_t> acked_at_ms;
  std::optional<std::uint64_t> running_at_ms;
  std::optional<std::uint64_t> finished_at_ms;
  std::uint64_t deliver_by_ms = 0;        // not acknowledged by then: undeliverable
  std::uint32_t timeout_s = 0;            // acknowledged, no RESULT this long after: CANCEL, timed_out
  std::string acked_boot_id;              // the rig's boot_id when it acknowledged
  std::optional<std::uint64_t> cancel_requested_at_ms;
  std::string detail;                     // why it ended as it did (for people)
  bool duplicate = false;                 // the rig said it had run this cmd_id already
  std::optional<msg::Nack> nack;
  std::optional<msg::Result> result;      // output holds at most kMaxResultOutput bytes
  std::string streamed_output;            // chunks seen so far (bounded tail)
  std::uint64_t streamed_bytes = 0;
  std::uint64_t stream_next_offset = 0;   // where the next output chunk should start
  std::uint64_t stream_gap_bytes = 0;     // bytes skipped between chunks (see output_accounting.hpp)

  // This broker's hands on it (not stored).
  bool recorded = false;                  // its creation is in the store's hands (a batch submitted)
  std::uint64_t waits_for_batch = 0;      // not written to its rig before that batch is durable (0: free to go)
  bool in_outbox = false;                 // in the outbox of its rig's connection here
  std::uint64_t reconcile_by_ms = 0;      // its rig came back with a new boot_id: its report is due by then
  std::uint64_t cancel_by_ms = 0;         // a CANCEL went out: its answer is due by then
  // A step taken since the store last had it: written with the next interval
  // commit, so an ACK and the RESULT after it become one row.
  bool unsaved = false;
  bool unsaved_result = false;            // ...and its result with it
};

// POST /v1/rigs/{rig}/commands, one rig's share of a job, a line of the control stream.
struct CommandRequest {
  std::string rig_id;
  std::string kind;
  StringMap args;
  std::string cmd_id;                      // the client's own UUID for it (empty: the broker makes one)
  std::string idempotency_key;             // the client's name for it (<= 128 bytes)
  std::optional<std::uint32_t> deliver_within_s;  // unset: the kind's default
  std::optional<std::uint32_t> timeout_s;         // unset: the kind's default
  bool hold = false;                       // a rig never seen yet: hold it for the rig instead of refusing
  std::string job_id;
  std::string operator_name;               // the caller's name (recorded on the command); empty: an open API
};

struct EnqueueOk {
  std::string cmd_id;
  std::string rig_id;
  std::uint64_t seq = 0;          // 0: not in a connection's outbox yet (held for the rig)
  CommandState state = CommandState::queued;
  bool existing = false;          // the request named a command that already exists: that one, unchanged
  bool held = false;              // the rig is not connected here: delivered when it says HELLO
  std::uint64_t deliver_by_ms = 0;
};

enum class EnqueueError : std::uint8_t {
  unknown_rig,        // never seen (and not held)                        -> HTTP 404
  rig_unresponsive,   // outbox (or the held queue) full                  -> HTTP 503
  unsupported_kind,   // the rig did not list this kind in HELLO          -> HTTP 422
  draining,           // this broker is draining                          -> HTTP 503
  bad_request,        // empty kind, too many/too large args, bad ids     -> HTTP 400
  conflict,           // the cmd_id / idempotency_key names another command -> HTTP 409
  store_unavailable,  // the command could not be recorded: not sent      -> HTTP 503
  registry_unavailable,  // several brokers: the rig is not here and the registry cannot say where -> 503
  route_timeout,      // its owner broker did not answer in time: it may have it -> HTTP 504
  kind_not_allowed,   // the rig's token (--rig-token) does not grant this kind -> HTTP 403
};
const char* to_string(EnqueueError e) noexcept;

struct EnqueueFailure {
  EnqueueError error = EnqueueError::unknown_rig;
  std::string rig_id;
  std::string detail;           // "outbox full (128/128), oldest queued cmd age 47s"
  std::uint64_t last_ack_seq = 0;
  std::optional<std::uint64_t> last_ack_at_ms;
  std::string suggested_action; // "force_reconnect" for rig_unresponsive, else empty
  std::string cmd_id;           // conflict: the existing command
};

using EnqueueOutcome = std::variant<EnqueueOk, EnqueueFailure>;

enum class CancelOutcome : std::uint8_t {
  unknown,       // no such command                                  -> 404
  finished,      // already in a final state                         -> 409 not_running
  pending,       // a cancel of it is already on its way             -> 409 cancel_pending
  cancelled,     // it had not reached the rig: cancelled now        -> 200
  requested,     // CANCEL sent (or sent when the rig comes back)    -> 202
};

// GET /v1/commands?rig=&state=&since=&job=&before=&limit=
struct CommandQuery {
  std::string rig_id;                    // empty: every rig
  std::optional<CommandState> state;
  std::string job_id;
  std::uint64_t since_ms = 0;            // enqueued at or after
  std::string before_cmd_id;             // paging: only commands older than this one
  std::size_t limit = 100;
};

class Fleet {
 public:
  virtual ~Fleet() = default;

  // Creates the command and queues it for its rig. Nothing goes to the rig
  // before persist(), and no answer may promise the command before the batch
  // persist() returns is recorded (when_recorded).
  virtual EnqueueOutcome enqueue(CommandRequest request) = 0;
  // Hands every command enqueued so far to the store and returns their batch.
  // A command a client named by idempotency_key, and a job's, goes to its rig
  // once that batch is durable (a retry after a crash finds the key; a job is
  // not half-sent unrecorded); any other goes now, while its record is being
  // committed (a lone command's round trip does not wait for the disk).
  virtual std::uint64_t persist() = 0;
  // Runs `then` once `batch` is durable (at once if it is already), or with the
  // error if the store could not record it. Then the commands of that batch
  // that were waiting for it were withdrawn (undeliverable, never sent), and
  // the others were sent: their record lands when the store recovers (answer
  // store_unavailable for both, saying which).
  virtual void when_recorded(std::uint64_t batch, std::function<void(const Expected<void>&)> then) = 0;
  virtual std::vector<RigView> rigs() const = 0;
  // Every known rig's id and labels (sorted by key), connected or not, in no
  // particular order: what a target-set selection needs, without building a
  // RigView per rig.
  using LabelList = std::vector<std::pair<std::string, std::string>>;
  using RigLabelsVisitor = std::function<void(std::string_view rig_id, const LabelList& labels)>;
  virtual void visit_rig_labels(const RigLabelsVisitor& visit) const {
    for (const RigView& r : rigs()) visit(r.rig_id, LabelList(r.labels.begin(), r.labels.end()));
  }
  virtual std::optional<RigView> rig(std::string_view rig_id) const = 0;
  // In memory, or in the store.
  virtual std::optional<CommandView> command(std::string_view cmd_id) const = 0;
  // The command without copying it (its output may be 64 KiB): `read` runs at
  // once, on the caller's thread, if the command is known. False otherwise.
  virtual bool read_command(std::string_view cmd_id,
                            const std::function<void(const CommandView&)>& read) const {
    const std::optional<CommandView> v = command(cmd_id);
    if (v) read(*v);
    return v.has_value();
  }
  // History, newest first: the store's, with what memory knows fresher.
  virtual std::vector<CommandView> list_commands(const CommandQuery& query) const = 0;
  // A store that answers later (Redis): command() and list_commands() know only
  // memory; these ask the store and answer from the loop (at once otherwise).
  virtual bool reads_later() const { return false; }
  virtual void command_then(std::string_view cmd_id, std::function<void(std::optional<CommandView>)> done) const {
    done(command(cmd_id));
  }
  virtual void list_commands_then(const CommandQuery& query,
                                  std::function<void(std::vector<CommandView>)> done) const {
    done(list_commands(query));
  }
  // Close the rig's connection (CloseCode::forced_reconnect). False if not connected.
  virtual bool force_reconnect(std::string_view rig_id) = 0;
  virtual CancelOutcome cancel(std::string_view cmd_id) = 0;
  // Stop accepting, GOAWAY everyone spread over the window, exit when empty or at the deadline.
  virtual void start_drain(std::chrono::milliseconds window) = 0;
  virtual bool draining() const = 0;
  // Certificates loaded, listener up, registry and store reachable.
  virtual bool ready() const = 0;
  // Why not, one line each ("registry_unavailable: ...", "draining"); empty when ready.
  virtual std::vector<std::string> not_ready_because() const { return {}; }
  virtual std::string broker_id() const = 0;

  // What happens to rigs and commands (fleet/events.hpp).
  virtual EventBus& events() = 0;

  // ---- several brokers (a shared registry, fleet/broker_mesh.hpp) ----
  // The rig is not connected here and may be on another broker: its commands,
  // and a force-reconnect, go through the *_routed calls, whose answers come
  // later (within a bounded time). A single broker never routes.
  virtual bool routes_elsewhere(std::string_view /*rig_id*/) const { return false; }
  // A request that names its command (cmd_id, idempotency_key) while the store
  // answers later: enqueue_routed reads the store first, so it is answered later too.
  bool names_a_stored_command(const CommandRequest& r) const {
    return reads_later() && (!r.cmd_id.empty() || !r.idempotency_key.empty());
  }
  // The command is not this broker's to cancel (it does not hold it, or its rig is elsewhere).
  virtual bool cancel_routes_elsewhere(std::string_view /*cmd_id*/) const { return false; }
  struct RoutedOutcome {
    EnqueueOutcome outcome;
    std::optional<Error> unrecorded;  // set: the store could not record it (outcome names the command)
    std::string broker_id;            // the broker that took it
  };
  virtual void enqueue_routed(CommandRequest request, std::function<void(RoutedOutcome)> done) {
    RoutedOutcome out{enqueue(std::move(request)), std::nullopt, broker_id()};
    const std::uint64_t batch = persist();
    when_recorded(batch, [out = std::move(out), done = std::move(done)](const Expected<void>& kept) mutable {
      if (!kept) out.unrecorded = kept.error();
      done(std::move(out));
    });
  }
  virtual void cancel_routed(std::string_view cmd_id, std::function<void(CancelOutcome)> done) {
    done(cancel(cmd_id));
  }
  // Answers whether a connection was closed, and whether the rig is known at all.
  virtual void force_reconnect_routed(std::string_view rig_id, std::function<void(bool closed, bool known)> done) {
    const bool closed = force_reconnect(rig_id);
    done(closed, closed || rig(rig_id).has_value());
  }

  // ---- fan-out jobs across brokers (control/jobs.hpp) ----
  // Other brokers share the jobs (a shared registry and store): each running
  // job is driven by the broker that holds it, and one whose holder is gone is
  // taken over by another.
  virtual bool shares_jobs() const { return false; }
  struct JobHold {
    bool held = true;            // this broker drives the job
    std::string holder;          // !held: the broker that does ("" if unknown)
    std::optional<Error> error;  // the registry could not say (held is false)
  };
  // take: claim the job (one this broker starts, resumes or takes over; a holder
  // that is gone is replaced); otherwise renew the hold of one it drives.
  virtual void hold_job(std::string_view /*job_id*/, bool /*take*/, std::function<void(JobHold)> done) {
    done(JobHold{true, broker_id(), std::nullopt});
  }
  // How often a driven job's hold is renewed (its TTL is several times this).
  virtual std::uint64_t job_hold_refresh_ms() const { return 10000; }
};

}  // namespace fleetlink::broker
