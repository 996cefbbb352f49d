#pragma once
// What the fleet reports as it works: every count and log line of the data
// plane goes through here, so the protocol code says what happened and the
// observer (observe/broker_observer.cpp: Prometheus counters and log lines)
// decides what an operator sees. Every method has an empty default: a unit test
// overrides what it checks.
#include <cstdint>
#include <string>
#include <string_view>

#include "fleet/fleet.hpp"
#include "fleet/frame_errors.hpp"
#include "fleet/hello_policy.hpp"
#include "fleet/outbound.hpp"
#include "fleet/transport.hpp"
#include "fleetlink/messages.hpp"

namespace fleetlink::broker {

struct RigSession;
struct OutboxEntry;

// A connection's peer address ("host:port"), asked of the transport only when a
// line that shows it is written: each ask is a getpeername() system call, and at
// the default log level neither an accepted HELLO's line nor a close's is (the
// call was 2% of the broker's CPU in a reconnect storm).
class PeerAddress {
 public:
  PeerAddress(const RigTransport& transport, const RigSession& s) noexcept : transport_(&transport), session_(&s) {}
  // Asked when the line is written, which for a HELLO refused after a probe or a
  // claim may be after the peer has gone: then the line says so.
  std::string text() const {
    std::string address = transport_->peer_address(*session_);
    return address.empty() ? std::string("(gone)") : address;
  }

 private:
  const RigTransport* transport_;
  const RigSession* session_;
};

class FleetObserver {
 public:
  virtual ~FleetObserver() = default;

  // --- connections (the transport's view) ---
  // An upgrade to the rig endpoint was admitted or refused (503 + Retry-After).
  virtual void upgrade_admitted() {}
  virtual void upgrade_refused(std::string_view /*why*/, std::string_view /*retry_after*/) {}
  // Admission under pressure (net/accept_gate, control_net/control_listener).
  // A listener ran out of file descriptors: an episode began ("rig", "plain", "control").
  virtual void accept_fd_exhausted(std::string_view /*listener*/) {}
  // A rig connection was closed: no TLS handshake and upgrade within the handshake deadline.
  virtual void handshake_timed_out() {}
  // A new rig connection was closed at once: its address had too many handshakes pending.
  virtual void handshake_refused_per_address() {}
  // The broker closed a control-port connection: "idle", "evicted" (room for a new
  // one at the bound) or "refused" (at the bound, none idle).
  virtual void control_connection_closed(std::string_view /*why*/) {}
  // Control-port connections open now.
  virtual void control_connections(std::size_t /*open*/) {}
  // A TLS rig connection was established: resumed from a ticket, or a full handshake.
  virtual void tls_established(bool /*resumed*/) {}
  virtual void session_opened(const RigSession& /*s*/) {}
  // The connection is gone; `peer_code` is the rig's close code (0: not the rig's close).
  virtual void session_closed(const RigSession& /*s*/, std::uint16_t /*peer_code*/) {}
  virtual void closing(const RigSession& /*s*/, const PeerAddress& /*peer*/, CloseCode /*code*/, std::string_view /*reason*/) {}
  virtual void frame_written(const RigSession& /*s*/, OutboundKind /*kind*/) {}
  virtual void written_directly() {}
  virtual void write_failed(const RigSession& /*s*/) {}
  // A connection is closed 4401 because its certificate is not trusted any more
  // (a reload of the CA bundle or CRLs): `why` is the verifier's word ("certificate revoked").
  virtual void certificate_distrusted(const RigSession& /*s*/, std::string_view /*why*/) {}

  // --- frames from rigs ---
  virtual void frame_received(const RigSession& /*s*/) {}
  // A frame refused (closing, or ignored when !fault.close). `detail`: the decoder's words, if any.
  virtual void frame_refused(const RigSession& /*s*/, const FrameFault& /*fault*/, std::string_view /*detail*/) {}
  // The HELLO (or the first frame) was not usable: `subject` of the peer's certificate, if any.
  virtual void hello_unusable(std::string_view /*peer*/, std::string_view /*subject*/, const FrameFault& /*fault*/,
                              std::string_view /*detail*/) {}

  // --- HELLO ---
  virtual void hello(const RigSession& /*s*/, const msg::Hello& /*hello*/, const HelloDecision& /*d*/, const PeerAddress& /*peer*/,
                     std::string_view /*subject*/) {}
  virtual void superseding(const RigSession& /*old*/, const msg::Hello& /*hello*/, std::string_view /*why*/) {}
  // The same agent process says it reconnected: its old socket is probed now.
  virtual void probing(const RigSession& /*old*/) {}
  // Several brokers (a shared registry): its trouble, and what the others said.
  virtual void registry_unavailable(std::string_view /*rig_id*/, std::string_view /*why*/) {}
  virtual void owner_gone(std::string_view /*rig_id*/, std::string_view /*broker_id*/) {}
  virtual void superseded_elsewhere(const RigSession& /*s*/, std::string_view /*owner*/) {}
  virtual void mesh_note(std::string_view /*kind*/, std::string_view /*from*/) {}
  virtual void rig_registered(const RigSession& /*s*/) {}
  virtual void rig_unregistered(const RigSession& /*s*/) {}

  // --- keepalive ---
  virtual void pong_missed(const RigSession& /*s*/, unsigned /*missed*/, unsigned /*max_missed*/) {}

  // --- commands ---
  virtual void command_enqueued(const RigSession& /*s*/, const CommandView& /*v*/, std::size_t /*outbox_depth*/) {}
  virtual void enqueue_refused(const EnqueueFailure& /*f*/) {}
  virtual void acked(const RigSession& /*s*/, const msg::Ack& /*ack*/, std::uint64_t /*latency_ms*/) {}
  virtual void nacked(const RigSession& /*s*/, const msg::Nack& /*nack*/) {}
  // An ACK/NACK whose seq (and cmd_id) is not in the connection's outbox.
  virtual void unknown_answer(const RigSession& /*s*/, std::string_view /*what*/, std::uint64_t /*seq*/,
                              std::string_view /*cmd_id*/) {}
  virtual void result(const RigSession& /*s*/, const msg::Result& /*r*/) {}
  // A RESULT the broker cannot attach: unknown command, or another rig's.
  virtual void result_refused(const RigSession& /*s*/, std::string_view /*cmd_id*/, std::string_view /*why*/) {}
  // Output bytes lost in transit (stream gaps the rig's dropped_bytes did not cover).
  virtual void output_lost(const RigSession& /*s*/, const CommandView& /*v*/, std::uint64_t /*lost*/, std::uint64_t /*dropped*/) {}
  virtual void output_gap(const RigSession& /*s*/, std::string_view /*cmd_id*/, std::uint64_t /*expected*/,
                          std::uint64_t /*offset*/, std::uint64_t /*gap*/) {}
  // The connection ended with this command unacknowledged: it waits for the next one.
  virtual void command_unacked(const RigSession& /*s*/, const OutboxEntry& /*e*/) {}
  // A command reached its final state.
  virtual void command_finished(const CommandView& /*v*/) {}
  // The store refused a commit (it retries with the next one).
  virtual void store_failed(const Error& /*e*/) {}

  // --- drain ---
  virtual void drain_started(std::size_t /*rigs*/, std::uint32_t /*window_ms*/, std::uint32_t /*deadline_ms*/) {}
  virtual void drain_finished(std::size_t /*connections_left*/) {}
};

}  // namespace fleetlink::broker
