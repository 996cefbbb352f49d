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
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "fleet/clock.hpp"
#include "fleet/command_table.hpp"
#include "fleet/drain.hpp"
#include "fleet/events.hpp"
#include "fleet/fleet.hpp"
#include "fleet/observer.hpp"
#include "fleet/outbound.hpp"
#include "fleet/rig_registry.hpp"
#include "fleet/rig_session.hpp"
#include "fleet/transport.hpp"
#include "fleetlink/codec.hpp"
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
  std::uint32_t drain_deadline_ms = 15000;  // after a drain starts: stop even if rigs remain
  std::uint32_t command_history = 10000;
  Strictness strictness = Strictness::lenient;
  std::uint32_t registry_refresh_ms = 10000;  // registry entries (TTL 60 s) are refreshed this often
  std::uint32_t sweep_slice_ms = 10;          // the sweep visits a slice of the sessions per tick
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
            RegistryBackend& registry, std::uint64_t seed);
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

  // ---- the application ----
  // The listeners are up and the certificates loaded (part of ready()).
  void set_transport_ready(bool ready) noexcept { transport_ready_ = ready; }
  // Called once when a drain has finished (no connection left, or the deadline passed).
  void on_drained(std::function<void()> done) { on_drained_ = std::move(done); }
  std::size_t connection_count() const noexcept { return connection_count_; }

  // ---- Fleet (the control plane) ----
  EnqueueOutcome enqueue(std::string_view rig_id, std::string kind, StringMap args) override;
  std::vector<RigView> rigs() const override;
  void visit_rig_labels(const RigLabelsVisitor& visit) const override;
  std::optional<RigView> rig(std::string_view rig_id) const override;
  std::optional<CommandView> command(std::string_view cmd_id) const override;
  bool read_command(std::string_view cmd_id, const std::function<void(const CommandView&)>& read) const override;
  bool force_reconnect(std::string_view rig_id) override;
  bool cancel(std::string_view cmd_id) override;
  void start_drain(std::chrono::milliseconds window) override;
  bool draining() const override { return drain_.active; }
  bool ready() const override;
  std::string broker_id() const override { return settings_.broker_id; }
  EventBus& events() override { return bus_; }

 private:
  // One per inbound message kind (handle_*.cpp).
  void on_frame(RigSession& s, std::span<const std::uint8_t> frame);
  void on_hello(RigSession& s, msg::Hello hello);
  void on_ack(RigSession& s, const msg::Ack& ack);
  void on_nack(RigSession& s, const msg::Nack& nack);
  void on_result(RigSession& s, msg::Result result);
  void on_output(RigSession& s, const msg::OutputChunk& chunk);
  void on_event(RigSession& s, const msg::Event& event);

  void refuse_frame(RigSession& s, const FrameFault& fault, std::string_view detail);
  void close_session(RigSession& s, CloseCode code, std::string reason);
  // The session stops being its rig's connection; what it had not got acknowledged is lost.
  void unregister(RigSession& s, std::string_view why);
  void pause_reading(RigSession& s);
  void sweep_one(RigSession& s, std::uint32_t now, bool refresh);
  void check_drain_done();
  void emit(EventType type, std::string_view rig_id, std::string_view cmd_id, std::string detail);
  RigView view_of(const RigSession& s) const;
  std::string subject_of(const RigSession& s) const;

  FleetSettings settings_;
  RigTransport& transport_;
  FleetObserver& observer_;
  const Clock& clock_;
  RigRegistry registry_;
  CommandTable commands_;
  EventBus bus_;
  DrainPlan drain_;
  std::mt19937_64 rng_;
  std::function<void()> on_drained_;
  bool transport_ready_ = false;
  bool drained_ = false;

  RigSession* head_ = nullptr;          // every session
  std::size_t connection_count_ = 0;
  RigSession* sweep_cursor_ = nullptr;  // the next one the sweep visits; null: a new pass
  std::uint32_t sweep_slice_ms_ = 10;
  std::uint32_t sweep_slices_ = 1;      // ticks per pass
  bool refresh_pass_ = false;           // this pass also refreshes the registry entries
  std::uint32_t last_refresh_ms_ = 0;
  std::vector<RigSession*> paused_;     // reading paused by the inbound rate limit
  // CANCELs waiting to be written, per session: rare, so kept here rather than in every session.
  std::unordered_map<const RigSession*, std::vector<std::string>> pending_cancels_;
};

}  // namespace fleetlink::broker
