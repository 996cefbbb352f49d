#pragma once
// Brokers that share a registry (Redis) talk to each other through a mesh:
// each listens on a channel of its own, and all on one fleet channel. What
// goes over it only asks and wakes; the record of truth is the registry and the
// command store, never a message (a message can be lost across a reconnect,
// so every ask has a deadline and a fallback).
//
//   probe       "is your connection for rig R (boot B) alive?": the owner pings it
//               now; a broker that has no such connection drops its stale entry
//   superseded  "rig R is mine now with a newer boot": the owner closes its 4410
//   command     a command for a rig the receiver holds: it enqueues and answers
//               (command_answer) with the outcome, once its record is durable
//   cancel      to every broker: the one holding the command cancels it; each answers
//   reconnect   to every broker: the one holding the rig closes it; each answers
//   event       to every broker: a lifecycle event, re-emitted on its event bus
//   rig_seen    to every broker: a rig this one holds, for the fleet view (GET /v1/rigs)
//   ping        "are you there?": nothing to do; the count of listeners PUBLISH
//               answers tells whether that broker is alive (a job's holder)
//
// Pure: the interface the fleet core calls; redis/redis_mesh.hpp carries it.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "fleet/events.hpp"
#include "fleet/fleet.hpp"
#include "store/command_store.hpp"

namespace fleetlink::broker {

enum class MeshKind : std::uint8_t {
  probe,
  superseded,
  command,
  command_answer,
  cancel,
  cancel_answer,
  reconnect,
  reconnect_answer,
  event,
  rig_seen,  // to every broker: a rig this one holds (at its HELLO, then every inventory pass)
  ping,      // to one broker: its channel's listeners say whether it is alive
};
inline constexpr MeshKind kLastMeshKind = MeshKind::ping;
const char* to_string(MeshKind k) noexcept;
std::optional<MeshKind> mesh_kind_from_string(std::string_view s) noexcept;

struct MeshNote {
  MeshKind kind = MeshKind::probe;
  std::string from;         // the sending broker's id
  std::uint64_t ask = 0;    // the asker's number for a request; its answer carries it back
  std::string rig_id;
  std::string boot_id;      // probe, superseded
  std::string cmd_id;       // cancel
  bool held = false;        // *_answer: the receiver holds the command / rig (false: not mine)
  std::optional<CommandRequest> command;  // command
  std::optional<EnqueueOutcome> outcome;  // command_answer
  std::string unrecorded;                 // command_answer: why its store has not recorded it (empty: it has)
  CancelOutcome cancel = CancelOutcome::unknown;  // cancel_answer
  std::optional<FleetEvent> event;        // event
  std::optional<RigRecord> rig;           // rig_seen
};

class BrokerMesh {
 public:
  using Reached = std::function<void(Expected<std::size_t> listeners)>;
  virtual ~BrokerMesh() = default;
  virtual bool up() const = 0;
  // To one broker's channel. `reached` gets how many listened (0: that broker is
  // gone: its channel has no subscriber), or an Error when the mesh is down.
  virtual void send(std::string_view broker_id, const MeshNote& note, Reached reached) = 0;
  // To every broker, this one included (it ignores its own notes).
  virtual void broadcast(const MeshNote& note, Reached reached) = 0;
};

}  // namespace fleetlink::broker
