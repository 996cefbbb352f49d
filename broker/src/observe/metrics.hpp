#pragma once
// The broker's Prometheus metrics: aggregated counters, gauges and histograms,
// never a series per rig. Single-threaded (the event loop), so plain integers.
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fleet/fleet.hpp"
#include "store/command_store.hpp"

namespace fleetlink::broker {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v) noexcept;
  const std::vector<double>& bounds() const noexcept { return bounds_; }
  const std::vector<std::uint64_t>& counts() const noexcept { return counts_; }  // per bucket, +Inf last
  double sum() const noexcept { return sum_; }
  std::uint64_t count() const noexcept { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

struct BrokerMetrics {
  BrokerMetrics();

  std::int64_t connections_open = 0;                 // gauge: WebSocket connections
  std::int64_t rigs_registered = 0;                  // gauge: rigs past WELCOME
  std::uint64_t connections_accepted = 0;            // TCP accepts that were admitted
  std::uint64_t admissions_refused = 0;              // answered 503 Retry-After
  // Admission under pressure (net/accept_gate, control_net/control_listener).
  std::map<std::string, std::uint64_t> accept_fd_exhausted;        // episodes, by listener: rig, control (plain)
  std::uint64_t handshakes_timed_out = 0;            // no TLS handshake + upgrade within the deadline
  std::uint64_t handshakes_refused_per_address = 0;  // closed at once: too many pending from that address
  std::int64_t control_connections_open = 0;         // gauge
  std::map<std::string, std::uint64_t> control_connections_closed;  // by the broker: idle, evicted, refused
  std::map<std::string, std::uint64_t> hellos;       // by outcome: accepted, malformed, identity_mismatch, duplicate, superseded_old
  std::map<std::uint16_t, std::uint64_t> closes;     // by close code
  std::uint64_t commands_enqueued = 0;
  std::uint64_t commands_acked = 0;
  std::uint64_t commands_nacked = 0;
  std::uint64_t commands_rejected = 0;               // enqueue refused (full, unknown rig, ...)
  std::uint64_t commands_completed = 0;              // RESULT received
  std::uint64_t commands_unacked = 0;                // connection ended before ACK: sent again on the next one
  std::array<std::uint64_t, kCommandStateCount> commands_finished{};  // by state (the final ones)
  std::uint64_t store_commit_errors = 0;
  std::uint64_t frames_in = 0;
  std::uint64_t frames_out = 0;
  std::uint64_t direct_writes = 0;                   // commands written at once, not from a writeable callback
  std::uint64_t tls_full = 0;                        // rig TLS handshakes with certificates
  std::uint64_t tls_resumed = 0;                     // rig TLS sessions resumed from a ticket
  std::uint64_t frames_rejected = 0;                 // malformed, oversized, rate-limited
  // Reloads of the TLS material and the operators (SIGHUP, POST /v1/admin/reload).
  std::uint64_t reloads_ok = 0;
  std::uint64_t reloads_failed = 0;
  std::uint64_t reload_last_success_s = 0;           // unix time of the start-up load or the last good reload
  bool reload_last_ok = true;                        // false after a failed reload, until a good one
  std::uint64_t rigs_distrusted = 0;                 // closed 4401: certificate revoked or no longer chaining
  std::uint64_t unknown_types_ignored = 0;           // lenient mode
  std::uint64_t pings_sent = 0;
  std::uint64_t pongs_missed = 0;
  // Several brokers (--registry redis).
  std::map<std::string, std::uint64_t> mesh_notes;   // notes from other brokers, by kind
  std::uint64_t registry_unavailable = 0;            // HELLOs served without a registry entry (Redis away)
  std::uint64_t rigs_taken_over = 0;                 // from a broker that was gone
  std::uint64_t superseded_elsewhere = 0;            // connections closed 4410 for another broker's entry
  Histogram outbox_depth;                            // observed at each enqueue
  Histogram ack_latency_seconds;                     // enqueue -> ACK

  // Prometheus text exposition format 0.0.4. `gauges` adds point-in-time values
  // computed by the caller (e.g. process RSS).
  std::string render_prometheus(const std::map<std::string, double>& extra_gauges = {}) const;

  // The command store's own counters (set by the application; null: none).
  const CommandStore* store = nullptr;
};

}  // namespace fleetlink::broker
