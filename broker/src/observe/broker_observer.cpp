#include "observe/broker_observer.hpp"

#include <string>

#include "common/log.hpp"
#include "fleet/outbox.hpp"
#include "fleet/rig_session.hpp"

namespace fleetlink::broker {

namespace {
const char* rig_of(const RigSession& s) { return s.rig_id.empty() ? "-" : s.rig_id.c_str(); }
std::string text(std::string_view v) { return std::string(v); }
unsigned long long ull(std::uint64_t v) { return static_cast<unsigned long long>(v); }
// The key a repeated line is limited under (common/log.hpp): what it says, of which rig.
std::string key(std::string_view what, const RigSession& s) { return std::string(what) + " rig=" + rig_of(s); }
}  // namespace

void BrokerObserver::upgrade_admitted() { ++metrics_.connections_accepted; }

void BrokerObserver::upgrade_refused(std::string_view why, std::string_view retry_after) {
  ++metrics_.admissions_refused;
  FL_DEBUG("upgrade refused: %s, Retry-After %s", text(why).c_str(), text(retry_after).c_str());
}

void BrokerObserver::tls_established(bool resumed) { ++(resumed ? metrics_.tls_resumed : metrics_.tls_full); }

void BrokerObserver::accept_fd_exhausted(std::string_view listener) { ++metrics_.accept_fd_exhausted[text(listener)]; }

void BrokerObserver::handshake_timed_out() { ++metrics_.handshakes_timed_out; }

void BrokerObserver::handshake_refused_per_address() { ++metrics_.handshakes_refused_per_address; }

void BrokerObserver::control_connection_closed(std::string_view why) {
  ++metrics_.control_connections_closed[text(why)];
}

void BrokerObserver::control_connections(std::size_t open) {
  metrics_.control_connections_open = static_cast<std::int64_t>(open);
}

void BrokerObserver::session_opened(const RigSession& /*s*/) { ++metrics_.connections_open; }

void BrokerObserver::session_closed(const RigSession& s, std::uint16_t peer_code) {
  if (peer_code != 0) ++metrics_.closes[peer_code];
  --metrics_.connections_open;
  FL_DEBUG("connection closed rig=%s", rig_of(s));
}

void BrokerObserver::closing(const RigSession& s, const PeerAddress& peer, CloseCode code, std::string_view reason) {
  const auto n = static_cast<std::uint16_t>(code);
  ++metrics_.closes[n];
  FL_INFO("closing rig=%s peer=%s code=%u (%s) %s", rig_of(s), peer.text().c_str(), n,
          text(close_code_name(n)).c_str(), text(reason).c_str());
}

void BrokerObserver::frame_written(const RigSession& /*s*/, OutboundKind kind) {
  ++(kind == OutboundKind::ping ? metrics_.pings_sent : metrics_.frames_out);
}

void BrokerObserver::written_directly() { ++metrics_.direct_writes; }

void BrokerObserver::write_failed(const RigSession& s) {
  FL_WARN_LIMITED(key("write failed", s), "rig=%s write failed: closing", rig_of(s));
}

void BrokerObserver::certificate_distrusted(const RigSession& /*s*/, std::string_view /*why*/) {
  ++metrics_.rigs_distrusted;  // the close itself is logged by closing()
}

void BrokerObserver::loaded(std::uint64_t wall_ms) {
  metrics_.reload_last_success_s = wall_ms / 1000;
  metrics_.reload_last_ok = true;
}

void BrokerObserver::reload_succeeded(std::string_view trigger, const std::vector<std::string>& changes,
                                      const std::vector<std::string>& warnings, std::uint64_t wall_ms) {
  ++metrics_.reloads_ok;
  loaded(wall_ms);
  if (changes.empty()) {
    FL_INFO("reload (%s): nothing changed", text(trigger).c_str());
  } else {
    for (const std::string& c : changes) FL_INFO("reload (%s): %s", text(trigger).c_str(), c.c_str());
  }
  for (const std::string& w : warnings) FL_WARN("reload (%s): %s", text(trigger).c_str(), w.c_str());
}

void BrokerObserver::reload_failed(std::string_view trigger, std::string_view detail) {
  ++metrics_.reloads_failed;
  metrics_.reload_last_ok = false;
  FL_ERROR("reload (%s) failed, nothing changed (the certificates, CAs, CRLs and operators in use stay): %s",
           text(trigger).c_str(), text(detail).c_str());
}

void BrokerObserver::frame_received(const RigSession& /*s*/) { ++metrics_.frames_in; }

void BrokerObserver::frame_refused(const RigSession& s, const FrameFault& fault, std::string_view detail) {
  if (!fault.close) {
    ++metrics_.unknown_types_ignored;
    FL_DEBUG("rig=%s %s: %s", rig_of(s), fault.reason.c_str(), text(detail).c_str());
    return;
  }
  ++metrics_.frames_rejected;
  if (fault.code == CloseCode::rate_limited) {
    FL_WARN_LIMITED(key("over the inbound rate limit", s), "rig=%s over the inbound rate limit (%.0f/s, burst %.0f)",
                    rig_of(s), limits_.rig_rate, limits_.rig_burst);
  } else if (!s.rig_id.empty()) {  // before HELLO, hello_unusable() said it
    FL_WARN_LIMITED(key("frame refused", s), "rig=%s %s%s%s", rig_of(s), fault.reason.c_str(),
                    detail.empty() ? "" : ": ", text(detail).c_str());
  }
}

void BrokerObserver::hello_unusable(std::string_view peer, std::string_view subject, const FrameFault& fault,
                                    std::string_view detail) {
  ++metrics_.hellos["malformed"];
  // By certificate subject: one misconfigured rig reconnecting in a loop is one key.
  FL_WARN_LIMITED("unusable HELLO subject=" + text(subject), "unusable HELLO from %s subject=%s: %s (%s)",
                  text(peer).c_str(), text(subject).c_str(), fault.reason.c_str(), text(detail).c_str());
}

void BrokerObserver::hello(const RigSession& /*s*/, const msg::Hello& hello, const HelloDecision& d,
                           const PeerAddress& peer, std::string_view subject) {
  ++metrics_.hellos[to_string(d.verdict)];
  if (d.verdict == HelloVerdict::accept || d.verdict == HelloVerdict::supersede_existing) {
    FL_INFO("hello rig=%s boot=%s version=%s peer=%s outcome=%s", hello.rig_id.c_str(), hello.boot_id.c_str(),
            hello.agent_version.c_str(), peer.text().c_str(), to_string(d.verdict));
  } else {
    FL_WARN_LIMITED("hello refused rig=" + hello.rig_id + " subject=" + text(subject),
                    "hello refused rig=%s boot=%s peer=%s subject=%s outcome=%s: %s", hello.rig_id.c_str(),
            hello.boot_id.c_str(), peer.text().c_str(), text(subject).c_str(), to_string(d.verdict), d.reason.c_str());
  }
}

void BrokerObserver::superseding(const RigSession& old, const msg::Hello& hello, std::string_view why) {
  FL_INFO("rig=%s superseded: old boot=%s new boot=%s (%s)", hello.rig_id.c_str(), old.boot_id.to_string().c_str(),
          hello.boot_id.c_str(), text(why).c_str());
}

void BrokerObserver::mesh_note(std::string_view kind, std::string_view /*from*/) {
  ++metrics_.mesh_notes[std::string(kind)];
}

void BrokerObserver::registry_unavailable(std::string_view rig_id, std::string_view why) {
  ++metrics_.registry_unavailable;
  FL_WARN_LIMITED("registry unavailable", "rig=%.*s registry unavailable (%.*s): served here, registered when it is back",
          static_cast<int>(rig_id.size()), rig_id.data(), static_cast<int>(why.size()), why.data());
}

void BrokerObserver::owner_gone(std::string_view rig_id, std::string_view broker_id) {
  ++metrics_.rigs_taken_over;
  FL_INFO("rig=%.*s its registry entry names broker %.*s, which is gone: taking the rig over",
          static_cast<int>(rig_id.size()), rig_id.data(), static_cast<int>(broker_id.size()), broker_id.data());
}

void BrokerObserver::superseded_elsewhere(const RigSession& s, std::string_view owner) {
  ++metrics_.superseded_elsewhere;
  FL_INFO("rig=%s the registry names another owner (%.*s): closing this connection 4410", rig_of(s),
          static_cast<int>(owner.size()), owner.data());
}

void BrokerObserver::probing(const RigSession& old) {
  FL_INFO("rig=%s another connection says HELLO: probing the current one now", rig_of(old));
}

void BrokerObserver::rig_registered(const RigSession& /*s*/) { ++metrics_.rigs_registered; }
void BrokerObserver::rig_unregistered(const RigSession& /*s*/) { --metrics_.rigs_registered; }

void BrokerObserver::pong_missed(const RigSession& s, unsigned missed, unsigned max_missed) {
  ++metrics_.pongs_missed;
  FL_INFO("rig=%s missed pong %u/%u", rig_of(s), missed, max_missed);
}

void BrokerObserver::command_enqueued(const RigSession& s, const CommandView& v, std::size_t outbox_depth) {
  ++metrics_.commands_enqueued;
  metrics_.outbox_depth.observe(static_cast<double>(outbox_depth));
  FL_DEBUG("enqueue rig=%s seq=%llu cmd=%s kind=%s", rig_of(s), ull(v.seq), v.cmd_id.c_str(), v.kind.c_str());
}

void BrokerObserver::enqueue_refused(const EnqueueFailure& f) {
  ++metrics_.commands_rejected;
  if (f.error == EnqueueError::rig_unresponsive)
    FL_WARN_LIMITED("enqueue refused rig=" + f.rig_id, "enqueue refused rig=%s: %s", f.rig_id.c_str(),
                    f.detail.c_str());
}

void BrokerObserver::acked(const RigSession& s, const msg::Ack& ack, std::uint64_t latency_ms) {
  ++metrics_.commands_acked;
  metrics_.ack_latency_seconds.observe(static_cast<double>(latency_ms) / 1000.0);
  FL_DEBUG("ack rig=%s seq=%llu cmd=%s%s", rig_of(s), ull(ack.seq), ack.cmd_id.c_str(),
           ack.duplicate ? " duplicate" : "");
}

void BrokerObserver::nacked(const RigSession& s, const msg::Nack& nack) {
  ++metrics_.commands_nacked;
  FL_INFO("nack rig=%s seq=%llu cmd=%s reason=%s %s", rig_of(s), ull(nack.seq), nack.cmd_id.c_str(),
          fleetlink::to_string(nack.reason), nack.detail.c_str());
}

void BrokerObserver::unknown_answer(const RigSession& s, std::string_view what, std::uint64_t seq,
                                    std::string_view cmd_id) {
  FL_WARN_LIMITED(key("answers for unknown commands", s), "rig=%s %s for unknown seq=%llu cmd=%s", rig_of(s),
                  text(what).c_str(), ull(seq), text(cmd_id).c_str());
}

void BrokerObserver::result(const RigSession& s, const msg::Result& r) {
  ++metrics_.commands_completed;
  FL_INFO("result rig=%s cmd=%s status=%s exit=%d bytes=%zu", rig_of(s), r.cmd_id.c_str(),
          fleetlink::to_string(r.status), r.exit_code, r.output.size());
}

void BrokerObserver::result_refused(const RigSession& s, std::string_view cmd_id, std::string_view why) {
  FL_WARN_LIMITED(key("results ignored", s), "rig=%s result for cmd=%s ignored: %s", rig_of(s),
                  text(cmd_id).c_str(), text(why).c_str());
}

void BrokerObserver::output_lost(const RigSession& s, const CommandView& v, std::uint64_t lost, std::uint64_t dropped) {
  FL_WARN_LIMITED(key("output lost in transit", s),
                  "rig=%s cmd=%s: %llu output bytes lost in transit (stream gaps %llu, rig counted %llu dropped)",
                  rig_of(s), v.cmd_id.c_str(), ull(lost), ull(v.stream_gap_bytes), ull(dropped));
}

void BrokerObserver::output_gap(const RigSession& s, std::string_view cmd_id, std::uint64_t expected,
                                std::uint64_t offset, std::uint64_t gap) {
  FL_DEBUG("output gap rig=%s cmd=%s: expected offset %llu, got %llu (%llu bytes not streamed)", rig_of(s),
           text(cmd_id).c_str(), ull(expected), ull(offset), ull(gap));
}

void BrokerObserver::command_unacked(const RigSession& s, const OutboxEntry& e) {
  ++metrics_.commands_unacked;
  // A frozen rig's connection ends with its whole outbox unacknowledged (128 by default).
  FL_INFO_LIMITED(key("commands unacknowledged", s),
                  "command unacknowledged rig=%s seq=%llu cmd=%s: the connection ended first; it goes again on the next one",
                  rig_of(s), ull(e.seq), e.cmd_id.c_str());
}

void BrokerObserver::command_finished(const CommandView& v) {
  ++metrics_.commands_finished[static_cast<std::size_t>(v.state)];
  FL_INFO("command %s rig=%s cmd=%s kind=%s%s%s", to_string(v.state), v.rig_id.c_str(), v.cmd_id.c_str(),
          v.kind.c_str(), v.detail.empty() ? "" : ": ", v.detail.c_str());
}

void BrokerObserver::store_failed(const Error& e) {
  ++metrics_.store_commit_errors;
  // The store logs each streak of failures once (and its end); a line per
  // batch would be dozens a second while a disk is full.
  FL_DEBUG("command store: a batch is not recorded yet: %s", e.detail.c_str());
}

void BrokerObserver::drain_started(std::size_t rigs, std::uint32_t window_ms, std::uint32_t deadline_ms) {
  FL_INFO("drain started: %zu rigs, window %u ms, deadline %u ms", rigs, window_ms, deadline_ms);
}

void BrokerObserver::drain_finished(std::size_t connections_left) {
  if (connections_left == 0) FL_INFO("drain complete: no connections left");
  else FL_WARN("drain deadline reached with %zu connections left", connections_left);
}

}  // namespace fleetlink::broker
