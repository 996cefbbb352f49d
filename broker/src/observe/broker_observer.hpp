#pragma once
// What an operator sees of the data plane: every FleetObserver report becomes
// a Prometheus counter (BrokerMetrics) and, where it matters, one log line.
// The protocol code only says what happened (fleet/observer.hpp).
#include <string>
#include <vector>

#include "fleet/observer.hpp"
#include "observe/metrics.hpp"

namespace fleetlink::broker {

class BrokerObserver final : public FleetObserver {
 public:
  struct Limits {  // quoted in log lines
    double rig_rate = 200;
    double rig_burst = 400;
  };
  BrokerObserver(BrokerMetrics& metrics, Limits limits) : metrics_(metrics), limits_(limits) {}

  void upgrade_admitted() override;
  void upgrade_refused(std::string_view why, std::string_view retry_after) override;
  void tls_established(bool resumed) override;
  void accept_fd_exhausted(std::string_view listener) override;
  void handshake_timed_out() override;
  void handshake_refused_per_address() override;
  void control_connection_closed(std::string_view why) override;
  void control_connections(std::size_t open) override;
  void session_opened(const RigSession& s) override;
  void session_closed(const RigSession& s, std::uint16_t peer_code) override;
  void closing(const RigSession& s, const PeerAddress& peer, CloseCode code, std::string_view reason) override;
  void frame_written(const RigSession& s, OutboundKind kind) override;
  void written_directly() override;
  void write_failed(const RigSession& s) override;
  void certificate_distrusted(const RigSession& s, std::string_view why) override;
  void frame_received(const RigSession& s) override;
  void frame_refused(const RigSession& s, const FrameFault& fault, std::string_view detail) override;
  void hello_unusable(std::string_view peer, std::string_view subject, const FrameFault& fault,
                      std::string_view detail) override;
  void hello(const RigSession& s, const msg::Hello& hello, const HelloDecision& d, const PeerAddress& peer,
             std::string_view subject) override;
  void superseding(const RigSession& old, const msg::Hello& hello, std::string_view why) override;
  void probing(const RigSession& old) override;
  void registry_unavailable(std::string_view rig_id, std::string_view why) override;
  void mesh_note(std::string_view kind, std::string_view from) override;
  void owner_gone(std::string_view rig_id, std::string_view broker_id) override;
  void superseded_elsewhere(const RigSession& s, std::string_view owner) override;
  void rig_registered(const RigSession& s) override;
  void rig_unregistered(const RigSession& s) override;
  void pong_missed(const RigSession& s, unsigned missed, unsigned max_missed) override;
  void command_enqueued(const RigSession& s, const CommandView& v, std::size_t outbox_depth) override;
  void enqueue_refused(const EnqueueFailure& f) override;
  void acked(const RigSession& s, const msg::Ack& ack, std::uint64_t latency_ms) override;
  void nacked(const RigSession& s, const msg::Nack& nack) override;
  void unknown_answer(const RigSession& s, std::string_view what, std::uint64_t seq,
                      std::string_view cmd_id) override;
  void result(const RigSession& s, const msg::Result& r) override;
  void result_refused(const RigSession& s, std::string_view cmd_id, std::string_view why) override;
  void output_lost(const RigSession& s, const CommandView& v, std::uint64_t lost, std::uint64_t dropped) override;
  void output_gap(const RigSession& s, std::string_view cmd_id, std::uint64_t expected, std::uint64_t offset,
                  std::uint64_t gap) override;
  void command_unacked(const RigSession& s, const OutboxEntry& e) override;
  void command_finished(const CommandView& v) override;
  void store_failed(const Error& e) override;
  void drain_started(std::size_t rigs, std::uint32_t window_ms, std::uint32_t deadline_ms) override;
  void drain_finished(std::size_t connections_left) override;

  // The application's reloads (not the fleet's): the TLS material and operators
  // in use were loaded at `wall_ms` (start-up), or a reload (`trigger`: "SIGHUP",
  // "POST /v1/admin/reload by alice") succeeded with these changes, or failed.
  void loaded(std::uint64_t wall_ms);
  void reload_succeeded(std::string_view trigger, const std::vector<std::string>& changes,
                        const std::vector<std::string>& warnings, std::uint64_t wall_ms);
  void reload_failed(std::string_view trigger, std::string_view detail);

 private:
  BrokerMetrics& metrics_;
  Limits limits_;
};

}  // namespace fleetlink::broker
