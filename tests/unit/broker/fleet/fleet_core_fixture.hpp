#pragma once
// The fleet core without sockets: a transport that records what the core asks
// of it, a clock moved by hand, and rig sessions held by the test.
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fleet/fleet_core.hpp"
#include "fleetlink/codec.hpp"
#include "fleetlink/uuid.hpp"
#include "memory_store.hpp"
#include "store/embedded_registry.hpp"

namespace fleetlink::broker::testing {

struct FakeClock final : Clock {
  std::uint32_t mono = 1000;
  std::uint64_t wall = 1'800'000'000'000ULL;
  std::uint32_t mono_ms() const override { return mono; }
  std::uint64_t wall_ms() const override { return wall; }
  void advance(std::uint32_t ms) {
    mono += ms;
    wall += ms;
  }
};

struct FakeTransport final : RigTransport {
  struct Closed {
    const RigSession* session;
    CloseCode code;
    std::string reason;
  };
  std::vector<Closed> closes;
  std::vector<const RigSession*> wakes;        // write_soon and write_now
  std::vector<const RigSession*> direct;       // write_now only
  std::vector<const RigSession*> paused, resumed;
  bool stopped_accepting = false;
  std::map<const RigSession*, CertIdentity> identities;

  void write_soon(RigSession& s) override { wakes.push_back(&s); }
  void write_now(RigSession& s) override {
    wakes.push_back(&s);
    direct.push_back(&s);
  }
  void close(RigSession& s, CloseCode code, std::string_view reason) override {
    closes.push_back({&s, code, std::string(reason)});
  }
  void pause_reading(RigSession& s) override { paused.push_back(&s); }
  void resume_reading(RigSession& s) override { resumed.push_back(&s); }
  void stop_accepting() override { stopped_accepting = true; }
  std::string peer = "127.0.0.1:40000";  // "" as getpeername() gives for a peer that left
  std::string peer_address(const RigSession&) const override { return peer; }
  std::optional<CertIdentity> peer_identity(const RigSession& s) const override {
    const auto it = identities.find(&s);
    if (it == identities.end()) return std::nullopt;
    return it->second;
  }

  std::optional<Closed> close_of(const RigSession& s) const {
    for (const Closed& c : closes)
      if (c.session == &s) return c;
    return std::nullopt;
  }
};

// Every event the bus delivers, in order.
struct EventLog {
  std::vector<FleetEvent> events;
  std::vector<EventType> types() const {
    std::vector<EventType> out;
    for (const FleetEvent& e : events) out.push_back(e.type);
    return out;
  }
};

struct CoreFixture {
  FleetSettings settings;
  FakeClock clock;
  FakeTransport transport;
  FleetObserver observer;  // the no-op defaults
  EmbeddedRegistry registry{60000};
  std::unique_ptr<MemoryStore> store;
  std::unique_ptr<FleetCore> core;
  std::deque<std::unique_ptr<RigSession>> sessions;
  EventLog log;
  int drained = 0;

  // `wall_ms`: the wall clock when the core starts (and loads the store).
  explicit CoreFixture(FleetSettings s = {}, std::shared_ptr<MemoryStore::Shared> shared = {},
                       std::optional<std::uint64_t> wall_ms = std::nullopt)
      : settings(std::move(s)) {
    if (wall_ms) clock.wall = *wall_ms;
    store = std::make_unique<MemoryStore>(shared ? std::move(shared) : std::make_shared<MemoryStore::Shared>());
    start_core();
  }
  void start_core() {
    core = std::make_unique<FleetCore>(settings, transport, observer, clock, registry, *store, 42);
    if (!core->load()) throw std::runtime_error("load failed");
    core->set_transport_ready(true);
    core->on_drained([this] { ++drained; });
    core->events().subscribe(EventTypes::all(), [this](const FleetEvent& e) { log.events.push_back(e); });
  }
  // The broker process dies (kill -9: nothing uncommitted survives) and starts
  // again on the same store; the rigs' connections are gone with it.
  void crash_and_restart() {
    core.reset();
    sessions.clear();
    transport = FakeTransport{};
    registry = EmbeddedRegistry{60000};
    store = std::make_unique<MemoryStore>(store->shared());
    start_core();
  }

  // A new connection; `cn` set: TLS with a certificate for that common name.
  RigSession& connect(std::optional<std::string> cn = std::nullopt) {
    sessions.push_back(std::make_unique<RigSession>(nullptr, cn.has_value(), settings.rig_burst, clock.mono_ms(),
                                                    clock.wall_ms()));
    RigSession& s = *sessions.back();
    if (cn) transport.identities[&s] = CertIdentity{"CN=" + *cn, *cn, {}};
    core->on_open(s);
    return s;
  }
  void send_bytes(RigSession& s, const Bytes& frame) { core->on_data(s, frame, 0, true); }
  void send(RigSession& s, const Message& m) { send_bytes(s, encode(m)); }

  static msg::Hello hello_for(const std::string& rig_id, const std::string& boot_id,
                              std::vector<std::string> kinds = {"dmesg", "reboot"}) {
    msg::Hello h;
    h.rig_id = rig_id;
    h.agent_version = "0.1.0";
    h.boot_id = boot_id;
    h.labels = {{"lab", "b2"}};
    h.kinds = std::move(kinds);
    return h;
  }
  // A connection that said HELLO and was WELCOMEd (the WELCOME taken).
  RigSession& live_rig(const std::string& rig_id, std::string boot_id = uuid_v7().to_string()) {
    RigSession& s = connect();
    send(s, hello_for(rig_id, boot_id));
    const std::optional<Outgoing> w = core->next_frame(s);
    if (!w || w->kind != OutboundKind::welcome) throw std::runtime_error("no WELCOME for " + rig_id);
    return s;
  }
  // Every frame the core has for s now, most urgent first.
  std::vector<Outgoing> frames(RigSession& s) {
    std::vector<Outgoing> out;
    while (std::optional<Outgoing> f = core->next_frame(s)) out.push_back(std::move(*f));
    return out;
  }
  // The transport finished a close the core asked for (or the socket went away).
  void closed(RigSession& s) { core->on_closed(s); }

  static CommandRequest request(const std::string& rig_id, const std::string& kind = "dmesg", StringMap args = {}) {
    CommandRequest r;
    r.rig_id = rig_id;
    r.kind = kind;
    r.args = std::move(args);
    return r;
  }
  // What the core says of a batch now (the memory store has no thread: known at once).
  bool recorded(std::uint64_t batch) {
    std::optional<Expected<void>> kept;
    core->when_recorded(batch, [&](const Expected<void>& k) { kept = k; });
    if (!kept) throw std::runtime_error("batch outcome not known");
    return kept->has_value();
  }
  EnqueueOutcome enqueue(CommandRequest r) {
    EnqueueOutcome o = core->enqueue(std::move(r));
    if (std::holds_alternative<EnqueueOk>(o) && !recorded(core->persist())) throw std::runtime_error("persist failed");
    return o;
  }
  // Enqueued and recorded (persist), as the control plane does it.
  EnqueueOk enqueue_ok(CommandRequest r) {
    EnqueueOutcome o = enqueue(std::move(r));
    if (auto* f = std::get_if<EnqueueFailure>(&o)) throw std::runtime_error("enqueue refused: " + f->detail);
    return std::get<EnqueueOk>(o);
  }
  EnqueueOk enqueue_ok(const std::string& rig_id, const std::string& kind = "dmesg", StringMap args = {}) {
    return enqueue_ok(request(rig_id, kind, std::move(args)));
  }
  EnqueueFailure enqueue_refused(CommandRequest r) {
    EnqueueOutcome o = core->enqueue(std::move(r));
    if (!std::holds_alternative<EnqueueFailure>(o)) throw std::runtime_error("enqueue was accepted");
    return std::get<EnqueueFailure>(o);
  }
  CommandState state_of(const std::string& cmd_id) const {
    const std::optional<CommandView> v = core->command(cmd_id);
    if (!v) throw std::runtime_error("no command " + cmd_id);
    return v->state;
  }
  static msg::Result result_of(const std::string& cmd_id, msg::Status status = msg::Status::ok) {
    msg::Result r;
    r.cmd_id = cmd_id;
    r.status = status;
    return r;
  }
  // The commands among s's frames, by seq.
  static std::vector<msg::Command> commands_in(const std::vector<Outgoing>& frames) {
    std::vector<msg::Command> out;
    for (const Outgoing& f : frames)
      if (f.kind == OutboundKind::command) out.push_back(std::get<msg::Command>(f.message));
    return out;
  }
};

}  // namespace fleetlink::broker::testing
