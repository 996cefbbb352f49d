// Prometheus text exposition format 0.0.4 for BrokerMetrics.
// Every series is fleet-wide: labels only ever carry small closed sets
// (HELLO outcome, close code), never a rig id.
#include "observe/metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>

#include "common/build_info.hpp"
#include "fleet/fleet.hpp"
#include "fleetlink/close_codes.hpp"
#include "fleetlink/messages.hpp"

namespace fleetlink::broker {

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  bounds_.erase(std::unique(bounds_.begin(), bounds_.end()), bounds_.end());
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::observe(double v) noexcept {
  if (std::isnan(v)) return;
  // First bucket whose upper bound is >= v (Prometheus buckets are "le").
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);
  ++counts_[static_cast<std::size_t>(it - bounds_.begin())];
  sum_ += v;
  ++count_;
}

BrokerMetrics::BrokerMetrics()
    : outbox_depth({0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}),
      ack_latency_seconds({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                           2.5, 5, 10}) {
  for (const char* outcome :
       {"accepted", "malformed", "identity_mismatch", "duplicate", "superseded_old"}) {
    hellos[outcome];  // known outcomes are always exported, at 0 until seen
  }
  for (const char* listener : {"rig", "control"}) accept_fd_exhausted[listener];
  for (const char* why : {"idle", "evicted", "refused"}) control_connections_closed[why];
}

namespace {

constexpr std::string_view kPrefix = "fleetlink_broker_";

std::string format_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

template <typename Int>
std::string format_int(Int v) {
  char buf[32];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

// Label values escape backslash, double quote and newline.
std::string escape_label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (const char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Metric names allow [a-zA-Z_:][a-zA-Z0-9_:]*; anything else becomes '_'.
std::string sanitize_name(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == ':';
    out += ok ? c : '_';
  }
  if (out.empty() || (out[0] >= '0' && out[0] <= '9')) out.insert(out.begin(), '_');
  return out;
}

class Writer {
 public:
  void header(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += kPrefix;
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += kPrefix;
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  void sample(std::string_view name, std::string_view labels, const std::string& value) {
    out_ += kPrefix;
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      out_ += labels;
      out_ += '}';
    }
    out_ += ' ';
    out_ += value;
    out_ += '\n';
  }
  template <typename Int>
  void simple(std::string_view name, std::string_view type, std::string_view help, Int v) {
    header(name, type, help);
    sample(name, {}, format_int(v));
  }
  void histogram(std::string_view name, std::string_view help, const Histogram& h) {
    histogram(name, help, h.bounds(), h.counts(), h.sum());
  }
  // `counts`: one per bound, then the +Inf bucket.
  void histogram(std::string_view name, std::string_view help, const std::vector<double>& bounds,
                 const std::vector<std::uint64_t>& counts, double sum) {
    header(name, "histogram", help);
    const std::string bucket = std::string(name) + "_bucket";
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < bounds.size() && i < counts.size(); ++i) {
      cumulative += counts[i];
      sample(bucket, "le=\"" + format_number(bounds[i]) + "\"", format_int(cumulative));
    }
    if (counts.size() > bounds.size()) cumulative += counts[bounds.size()];
    sample(bucket, "le=\"+Inf\"", format_int(cumulative));
    sample(std::string(name) + "_sum", {}, format_number(sum));
    sample(std::string(name) + "_count", {}, format_int(cumulative));
  }
  // fleetlink_build_info{version,commit} 1: the name every fleetlink program would
  // use (no broker_ prefix), so one query finds the versions of the whole fleet's
  // brokers. The commit is left out when the build did not know it.
  void build_info() {
    out_ += "# HELP fleetlink_build_info The version (and commit) this program was built from; always 1.\n"
            "# TYPE fleetlink_build_info gauge\n"
            "fleetlink_build_info{program=\"fleetlink-broker\",version=\"";
    out_ += escape_label(build_info::version());
    out_ += '"';
    if (!build_info::commit().empty()) {
      out_ += ",commit=\"";
      out_ += escape_label(build_info::commit());
      out_ += '"';
    }
    out_ += ",protocol=\"";
    out_ += format_int(kProtocolVersion);
    out_ += "\"} 1\n";
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::string BrokerMetrics::render_prometheus(
    const std::map<std::string, double>& extra_gauges) const {
  Writer w;
  w.build_info();
  w.simple("connections_open", "gauge", "WebSocket connections currently open.", connections_open);
  w.simple("rigs_registered", "gauge", "Rigs past WELCOME, live on this broker.", rigs_registered);
  w.simple("connections_accepted_total", "counter",
           "Connection attempts admitted by the accept-rate limiter.", connections_accepted);
  w.simple("admissions_refused_total", "counter",
           "Connection attempts answered 503 with Retry-After (accept rate over the limit).",
           admissions_refused);

  w.header("accept_fd_exhausted_total", "counter",
           "Episodes of a listener out of file descriptors (accepting paused with a back-off), by listener.");
  for (const auto& [listener, n] : accept_fd_exhausted)
    w.sample("accept_fd_exhausted_total", "listener=\"" + escape_label(listener) + "\"", format_int(n));
  w.simple("handshakes_timed_out_total", "counter",
           "Rig connections closed without their TLS handshake and upgrade done within handshake-timeout-ms.",
           handshakes_timed_out);
  w.simple("handshakes_refused_per_address_total", "counter",
           "Rig connections closed at once: max-handshakes-per-address pending from their address.",
           handshakes_refused_per_address);
  w.simple("control_connections_open", "gauge", "Connections to the control port open now.",
           control_connections_open);
  w.header("control_connections_closed_total", "counter",
           "Control-port connections the broker closed: idle (control-idle-timeout-ms), evicted (room for a "
           "new one at control-max-connections), refused (at the bound, none idle).");
  for (const auto& [why, n] : control_connections_closed)
    w.sample("control_connections_closed_total", "reason=\"" + escape_label(why) + "\"", format_int(n));

  w.header("hellos_total", "counter", "HELLO frames by outcome.");
  for (const auto& [outcome, n] : hellos) {
    w.sample("hellos_total", "outcome=\"" + escape_label(outcome) + "\"", format_int(n));
  }

  w.header("mesh_notes_total", "counter", "Notes from other brokers on the Redis mesh, by kind.");
  for (const auto& [kind, n] : mesh_notes) w.sample("mesh_notes_total", "kind=\"" + escape_label(kind) + "\"", format_int(n));
  w.simple("registry_unavailable_total", "counter",
           "Rigs admitted while the registry could not be reached (registered when it is back).",
           registry_unavailable);
  w.simple("rigs_taken_over_total", "counter", "Rigs taken from a broker that was gone (nobody on its channel).",
           rigs_taken_over);
  w.simple("superseded_elsewhere_total", "counter",
           "Connections closed 4410 because the registry names another owner.", superseded_elsewhere);

  w.header("closes_total", "counter", "WebSocket connections closed, by close code.");
  for (const auto& [code, n] : closes) {
    w.sample("closes_total",
             "code=\"" + format_int(code) + "\",name=\"" +
                 escape_label(close_code_name(code)) + "\"",
             format_int(n));
  }

  w.simple("commands_enqueued_total", "counter", "Commands accepted into a rig outbox.",
           commands_enqueued);
  w.simple("commands_acked_total", "counter", "Commands acknowledged by their rig.",
           commands_acked);
  w.simple("commands_nacked_total", "counter", "Commands refused by their rig (NACK).",
           commands_nacked);
  w.simple("commands_rejected_total", "counter",
           "Enqueue requests the broker refused (outbox full, unknown rig, store unavailable, ...); not the rejected state (a NACK).",
           commands_rejected);
  w.simple("commands_completed_total", "counter", "Commands whose RESULT arrived.",
           commands_completed);
  w.simple("commands_unacked_total", "counter",
           "Commands whose connection ended before their ACK (each is sent again on the rig's next connection).",
           commands_unacked);
  w.header("commands_finished_total", "counter", "Commands that reached a final state, by state.");
  for (std::size_t i = 0; i < kCommandStateCount; ++i) {
    const auto state = static_cast<CommandState>(i);
    if (is_final(state))
      w.sample("commands_finished_total", "state=\"" + std::string(to_string(state)) + "\"",
               format_int(commands_finished[i]));
  }
  w.simple("store_commit_errors_total", "counter", "Batches of the command store whose first attempt failed (they are kept and tried again).",
           store_commit_errors);
  if (store != nullptr) {
    const StoreCounters c = store->counters();
    w.simple("store_commits_total", "counter", "Transactions of the command store (each of one or more batches).", c.commits);
    w.simple("store_commits_on_loop_total", "counter",
             "Of the store's transactions: small batches committed on the event loop while its writer thread was idle.",
             c.commits_on_loop);
    w.simple("store_rows_written_total", "counter", "Command rows the store wrote (steps of one commit coalesced).",
             c.rows_written);
    if (!c.commit_bounds.empty())
      w.histogram("store_commit_seconds", "How long each transaction of the command store took (on its writer thread, or on the event loop for a small batch).",
                  c.commit_bounds, c.commit_buckets, c.commit_seconds);
  }
  w.simple("frames_in_total", "counter", "WebSocket frames received from rigs.", frames_in);
  w.simple("frames_out_total", "counter", "WebSocket frames sent to rigs.", frames_out);
  w.simple("tls_handshakes_full_total", "counter",
           "Rig TLS handshakes with certificate exchange and verification.", tls_full);
  w.simple("tls_handshakes_resumed_total", "counter",
           "Rig TLS sessions resumed from a session ticket (--tls-ticket-key-file).", tls_resumed);
  w.header("reloads_total", "counter",
           "Reloads of the CA bundle, CRLs, broker certificate and operators (SIGHUP, POST /v1/admin/reload), by "
           "result; a failed one changed nothing.");
  w.sample("reloads_total", "result=\"ok\"", format_int(reloads_ok));
  w.sample("reloads_total", "result=\"failed\"", format_int(reloads_failed));
  w.simple("reload_last_success_timestamp_seconds", "gauge",
           "Unix time the TLS material and operators in use were loaded (start-up or the last good reload).",
           reload_last_success_s);
  w.simple("reload_last_successful", "gauge", "0 after a failed reload (the previous material stays), else 1.",
           reload_last_ok ? 1 : 0);
  w.simple("rigs_distrusted_total", "counter",
           "Rig connections closed 4401 because a reload made their certificate untrusted (revoked, or no longer "
           "chaining to the CA bundle).",
           rigs_distrusted);
  w.simple("frames_written_directly_total", "counter",
           "Frames (WELCOMEs, commands, pings) written to a rig at once, without waiting for a writeable callback.",
           direct_writes);
  w.simple("frames_rejected_total", "counter",
           "Inbound frames rejected (malformed, oversized, over the rate limit).",
           frames_rejected);
  w.simple("unknown_types_ignored_total", "counter",
           "Frames of an unknown message type ignored in lenient mode.", unknown_types_ignored);
  w.simple("pings_sent_total", "counter", "Keepalive pings sent.", pings_sent);
  w.simple("pongs_missed_total", "counter", "Keepalive pongs not received in time.",
           pongs_missed);
  w.histogram("outbox_depth", "Outbox depth observed at each enqueue.", outbox_depth);
  w.histogram("ack_latency_seconds", "Time from enqueue to the rig's ACK.", ack_latency_seconds);

  for (const auto& [raw_name, value] : extra_gauges) {
    std::string name = sanitize_name(raw_name);
    if (name.rfind(kPrefix, 0) == 0) name.erase(0, kPrefix.size());
    std::string_view help = "Point-in-time value computed at scrape time.";
    if (name == "process_resident_memory_bytes") help = "Resident set size of the broker (VmRSS).";
    if (name == "process_open_fds") help = "Open file descriptors of the broker process.";
    w.header(name, "gauge", help);
    w.sample(name, {}, format_number(value));
  }
  return w.take();
}

}  // namespace fleetlink::broker
