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
  std::string state;             // "connected" | "unresponsive" (pongs missing) | "draining"
  std::string boot_id;
  std::string agent_version;
  StringMap labels;
  std::vector<std::string> kinds;
  std::string peer;              // "ip:port"
  std::uint64_t connected_at_ms = 0;
  std::uint64_t last_seen_ms = 0;     // last frame or pong from the rig
  std::uint64_t last_ack_seq = 0;
  std::optional<std::uint64_t> last_ack_at_ms;
  std::uint64_t next_seq = 1;
  std::size_t outbox_depth = 0;       // queued, not yet written
  std::size_t outbox_capacity = 0;
  unsigned missed_pongs = 0;
  std::vector<UnackedCommand> unacked; // oldest first
};

// A command's life as the broker saw it.
enum class CommandState : std::uint8_t {
  queued,     // in the rig's outbox
  sent,       // written to the socket, no ACK yet
  acked,      // the rig accepted it; no RESULT yet
  running,    // output chunks are arriving
  done,       // RESULT received
  nacked,     // the rig refused it
  lost,       // the connection ended before an ACK: NOT retransmitted, shown to the operator
};
const char* to_string(CommandState s) noexcept;

struct CommandView {
  std::string cmd_id;
  std::string rig_id;
  std::string kind;
  StringMap args;
  std::uint64_t seq = 0;
  CommandState state = CommandState::queued;
  std::uint64_t enqueued_at_ms = 0;
  std::optional<std::uint64_t> sent_at_ms;
  std::optional<std::uint64_t> acked_at_ms;
  std::optional<std::uint64_t> finished_at_ms;
  bool duplicate = false;                 // the rig said it had run this cmd_id already
  std::optional<msg::Nack> nack;
  std::optional<msg::Result> result;      // output holds at most kMaxResultOutput bytes
  std::string streamed_output;            // chunks seen so far (bounded tail)
  std::uint64_t streamed_bytes = 0;
  std::uint64_t stream_next_offset = 0;   // where the next output chunk should start
  std::uint64_t stream_gap_bytes = 0;     // bytes skipped between chunks (see command_table.hpp)
};

struct EnqueueOk {
  std::string cmd_id;
  std::string rig_id;
  std::uint64_t seq = 0;
};

enum class EnqueueError : std::uint8_t {
  unknown_rig,        // no live connection for the rig            -> HTTP 404
  rig_unresponsive,   // outbox full                              -> HTTP 503
  unsupported_kind,   // the rig did not list this kind in HELLO  -> HTTP 422
  draining,           // this broker is draining                  -> HTTP 503
  bad_request,        // empty kind, too many/too large args      -> HTTP 400
};
const char* to_string(EnqueueError e) noexcept;

struct EnqueueFailure {
  EnqueueError error = EnqueueError::unknown_rig;
  std::string rig_id;
  std::string detail;           // "outbox full (128/128), oldest queued cmd age 47s"
  std::uint64_t last_ack_seq = 0;
  std::optional<std::uint64_t> last_ack_at_ms;
  std::string suggested_action; // "force_reconnect" for rig_unresponsive, else empty
};

using EnqueueOutcome = std::variant<EnqueueOk, EnqueueFailure>;

class Fleet {
 public:
  virtual ~Fleet() = default;

  virtual EnqueueOutcome enqueue(std::string_view rig_id, std::string kind, StringMap args) = 0;
  virtual std::vector<RigView> rigs() const = 0;
  // Every connected rig's id and labels (sorted by key), in no particular order:
  // what a target-set selection needs, without building a RigView per rig.
  using LabelList = std::vector<std::pair<std::string, std::string>>;
  using RigLabelsVisitor = std::function<void(std::string_view rig_id, const LabelList& labels)>;
  virtual void visit_rig_labels(const RigLabelsVisitor& visit) const {
    for (const RigView& r : rigs()) visit(r.rig_id, LabelList(r.labels.begin(), r.labels.end()));
  }
  virtual std::optional<RigView> rig(std::string_view rig_id) const = 0;
  virtual std::optional<CommandView> command(std::string_view cmd_id) const = 0;
  // The command without copying it (its output may be 64 KiB): `read` runs at
  // once, on the caller's thread, if the command is known. False otherwise.
  virtual bool read_command(std::string_view cmd_id,
                            const std::function<void(const CommandView&)>& read) const {
    const std::optional<CommandView> v = command(cmd_id);
    if (v) read(*v);
    return v.has_value();
  }
  // Close the rig's connection (CloseCode::forced_reconnect). False if not connected.
  virtual bool force_reconnect(std::string_view rig_id) = 0;
  // Ask the rig to stop a command in flight (broker -> agent CANCEL). False if the
  // command is unknown, finished, or its rig is not connected here. (Added by the
  // data plane; the default keeps other Fleet implementations compiling.)
  virtual bool cancel(std::string_view cmd_id) { (void)cmd_id; return false; }
  // Stop accepting, GOAWAY everyone spread over the window, exit when empty or at the deadline.
  virtual void start_drain(std::chrono::milliseconds window) = 0;
  virtual bool draining() const = 0;
  // Certificates loaded, listener up, registry reachable.
  virtual bool ready() const = 0;
  virtual std::string broker_id() const = 0;

  // What happens to rigs and commands (fleet/events.hpp).
  virtual EventBus& events() = 0;
};

}  // namespace fleetlink::broker
