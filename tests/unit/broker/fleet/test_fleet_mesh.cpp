// Several brokers, one fleet (fleet/broker_mesh.hpp, handle_hello.cpp,
// fleet_mesh.cpp): the HELLO's claim answered later, the owner on another
// broker asked to probe, routed commands / cancels / force-reconnects and their
// deadlines, what other brokers' notes do here. A registry and a mesh the test
// answers by hand, whenever it likes (as Redis would, later).
#include <doctest/doctest.h>

#include <algorithm>
#include <deque>

#include "fleet_core_fixture.hpp"

using namespace fleetlink;
using namespace fleetlink::broker;
using fleetlink::broker::testing::CoreFixture;
using fleetlink::broker::testing::EventLog;
using fleetlink::broker::testing::FakeClock;
using fleetlink::broker::testing::FakeTransport;
using fleetlink::broker::testing::MemoryStore;

namespace {

// A shared registry whose every answer the test gives, later.
struct FakeRegistry final : RegistryBackend {
  struct Claim {
    std::string rig_id, boot_id, broker_id;
    bool force = false;
    ClaimDone done;
  };
  struct Refresh {
    std::string rig_id, boot_id, broker_id;
    RefreshDone done;
  };
  struct Lookup {
    std::string rig_id;
    LookupDone done;
  };
  struct Release {
    std::string rig_id, boot_id, broker_id;
  };
  std::deque<Claim> claims;  // waiting for the test's answer, oldest first
  std::deque<Refresh> refreshes;
  std::deque<Lookup> lookups;
  std::vector<Release> releases;
  int claim_calls = 0, refresh_calls = 0, lookup_calls = 0;

  std::string_view name() const noexcept override { return "fake"; }
  bool up() const override { return true; }
  bool shared() const noexcept override { return true; }
  void claim(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id, bool force,
             std::uint64_t, ClaimDone done) override {
    ++claim_calls;
    claims.push_back({std::string(rig_id), std::string(boot_id), std::string(broker_id), force, std::move(done)});
  }
  void refresh(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id, std::uint64_t,
               RefreshDone done) override {
    ++refresh_calls;
    refreshes.push_back({std::string(rig_id), std::string(boot_id), std::string(broker_id), std::move(done)});
  }
  void release(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id) override {
    releases.push_back({std::string(rig_id), std::string(boot_id), std::string(broker_id)});
  }
  void lookup(std::string_view rig_id, std::uint64_t, LookupDone done) override {
    ++lookup_calls;
    lookups.push_back({std::string(rig_id), std::move(done)});
  }
  struct JobCall {
    std::string job_id, broker_id;
    bool force = false;
    ClaimDone claim;      // claim_job
    RefreshDone refresh;  // refresh_job
  };
  std::deque<JobCall> job_calls;
  void claim_job(std::string_view job_id, std::string_view broker_id, bool force, std::uint64_t,
                 ClaimDone done) override {
    job_calls.push_back({std::string(job_id), std::string(broker_id), force, std::move(done), {}});
  }
  void refresh_job(std::string_view job_id, std::string_view broker_id, std::uint64_t, RefreshDone done) override {
    job_calls.push_back({std::string(job_id), std::string(broker_id), false, {}, std::move(done)});
  }
  JobCall take_job_call() {
    REQUIRE_FALSE(job_calls.empty());
    JobCall c = std::move(job_calls.front());
    job_calls.pop_front();
    return c;
  }

  // The oldest waiting call gets its answer (taken out first: the answer may ask again).
  void answer_claim(Expected<ClaimResult> r) {
    REQUIRE_FALSE(claims.empty());
    Claim c = std::move(claims.front());
    claims.pop_front();
    c.done(std::move(r));
  }
  void answer_claim(ClaimOutcome o, std::optional<RegistryEntry> before = std::nullopt) {
    answer_claim(Expected<ClaimResult>(ClaimResult{o, std::move(before)}));
  }
  void answer_refresh(Expected<RefreshResult> r) {
    REQUIRE_FALSE(refreshes.empty());
    Refresh x = std::move(refreshes.front());
    refreshes.pop_front();
    x.done(std::move(r));
  }
  void answer_refresh(RefreshOutcome o, std::optional<RegistryEntry> owner = std::nullopt) {
    answer_refresh(Expected<RefreshResult>(RefreshResult{o, std::move(owner)}));
  }
  void answer_lookup(Expected<std::optional<RegistryEntry>> r) {
    REQUIRE_FALSE(lookups.empty());
    Lookup l = std::move(lookups.front());
    lookups.pop_front();
    l.done(std::move(r));
  }
  void answer_lookup_none() { answer_lookup(std::optional<RegistryEntry>{}); }
  void answer_lookup_owner(std::string boot_id, std::string broker_id) {
    answer_lookup(std::optional<RegistryEntry>(RegistryEntry{std::move(boot_id), std::move(broker_id)}));
  }
};

Error registry_down() { return make_error(Errc::io, "connection refused (test)"); }

// The mesh between brokers: what was sent, and its `Reached` for the test to call.
struct FakeMesh final : BrokerMesh {
  struct Sent {
    std::string to;  // a broker's id; "*" for a broadcast
    MeshNote note;
    Reached reached;
  };
  std::deque<Sent> sent;  // a deque: references stay valid while answers send more
  bool is_up = true;

  bool up() const override { return is_up; }
  void send(std::string_view broker_id, const MeshNote& note, Reached reached) override {
    sent.push_back({std::string(broker_id), note, std::move(reached)});
  }
  void broadcast(const MeshNote& note, Reached reached) override { sent.push_back({"*", note, std::move(reached)}); }

  std::vector<Sent*> of(MeshKind k) {
    std::vector<Sent*> out;
    for (Sent& s : sent)
      if (s.note.kind == k) out.push_back(&s);
    return out;
  }
  Sent& only(MeshKind k) {
    const std::vector<Sent*> all = of(k);
    REQUIRE(all.size() == 1);
    return *all.front();
  }
  // Its sender learns how many listened (or that the mesh is down).
  static void reach(Sent& s, Expected<std::size_t> listeners) {
    REQUIRE(s.reached);
    Reached r = std::move(s.reached);
    s.reached = nullptr;
    r(std::move(listeners));
  }
};

const std::string kMe = "broker-a";

struct MeshFixture {
  FleetSettings settings;
  FakeClock clock;
  FakeTransport transport;
  FleetObserver observer;
  FakeRegistry registry;
  FakeMesh mesh;
  std::unique_ptr<MemoryStore> store;
  std::unique_ptr<FleetCore> core;
  std::deque<std::unique_ptr<RigSession>> sessions;
  EventLog log;

  explicit MeshFixture(std::shared_ptr<MemoryStore::Shared> shared = std::make_shared<MemoryStore::Shared>()) {
    settings.broker_id = kMe;
    store = std::make_unique<MemoryStore>(std::move(shared));
    core = std::make_unique<FleetCore>(settings, transport, observer, clock, registry, *store, 42);
    if (!core->load()) throw std::runtime_error("load failed");
    core->set_transport_ready(true);
    core->set_mesh(&mesh);
    core->events().subscribe(EventTypes::all(), [this](const FleetEvent& e) { log.events.push_back(e); });
  }

  RigSession& connect() {
    sessions.push_back(
        std::make_unique<RigSession>(nullptr, false, settings.rig_burst, clock.mono_ms(), clock.wall_ms()));
    core->on_open(*sessions.back());
    return *sessions.back();
  }
  void send(RigSession& s, const Message& m) {
    const Bytes frame = encode(m);
    core->on_data(s, frame, 0, true);
  }
  // A connection whose HELLO is sent (its lookup and claim not answered).
  RigSession& hello(const std::string& rig_id, const std::string& boot_id) {
    RigSession& s = connect();
    send(s, CoreFixture::hello_for(rig_id, boot_id));
    return s;
  }
  // HELLO, nobody else owns it, the claim won, the WELCOME taken.
  RigSession& live_rig(const std::string& rig_id, const std::string& boot_id = uuid_v7().to_string()) {
    RigSession& s = hello(rig_id, boot_id);
    registry.answer_lookup_none();
    registry.answer_claim(ClaimOutcome::won);
    const std::optional<Outgoing> w = core->next_frame(s);
    if (!w || w->kind != OutboundKind::welcome) throw std::runtime_error("no WELCOME for " + rig_id);
    return s;
  }
  std::vector<Outgoing> frames(RigSession& s) {
    std::vector<Outgoing> out;
    while (std::optional<Outgoing> f = core->next_frame(s)) out.push_back(std::move(*f));
    return out;
  }
  bool has_ping(RigSession& s) {
    const std::vector<Outgoing> out = frames(s);
    return std::any_of(out.begin(), out.end(), [](const Outgoing& o) { return o.kind == OutboundKind::ping; });
  }
  std::optional<CloseCode> close_code(const RigSession& s) const {
    const auto c = transport.close_of(s);
    return c ? std::optional<CloseCode>(c->code) : std::nullopt;
  }
  std::string close_reason(const RigSession& s) const {
    const auto c = transport.close_of(s);
    return c ? c->reason : std::string();
  }
  std::size_t count_rig(const std::string& rig_id) const {
    const std::vector<RigView> all = core->rigs();
    return static_cast<std::size_t>(
        std::count_if(all.begin(), all.end(), [&](const RigView& r) { return r.rig_id == rig_id; }));
  }
};

MeshNote note_of(MeshKind kind, std::string from, std::string rig_id = {}, std::string boot_id = {}) {
  MeshNote n;
  n.kind = kind;
  n.from = std::move(from);
  n.rig_id = std::move(rig_id);
  n.boot_id = std::move(boot_id);
  return n;
}

MeshNote event_note(std::string from, EventType type, std::string rig_id, std::string detail, std::uint64_t at) {
  MeshNote n = note_of(MeshKind::event, std::move(from), rig_id);
  n.event = FleetEvent{type, std::move(rig_id), {}, std::move(detail), at};
  return n;
}

MeshNote rig_seen_note(std::string from, const std::string& rig_id, const std::string& boot_id, std::uint64_t at) {
  MeshNote n = note_of(MeshKind::rig_seen, from, rig_id);
  RigRecord r;
  r.rig_id = rig_id;
  r.boot_id = boot_id;
  r.agent_version = "0.2.0";
  r.labels = {{"lab", "c3"}};
  r.kinds = {"dmesg"};
  r.broker_id = std::move(from);
  r.first_seen_ms = at;
  r.last_seen_ms = at;
  n.rig = std::move(r);
  return n;
}

bool is_uuid_v7(const std::string& id) {
  const std::optional<Uuid> u = parse_uuid(id);
  return u && u->version() == 7 && u->to_string() == id;
}

}  // namespace

// ---------------------------------------------------------------------------------
// HELLO: the claim on its way

TEST_CASE("mesh hello: no WELCOME while the claim is pending; `won` WELCOMEs, registers and announces the rig") {
  MeshFixture f;
  const std::string boot = uuid_v7().to_string();
  RigSession& s = f.hello("rig-1", boot);
  // Several brokers: the rig is looked up first, and nothing is claimed before the answer.
  REQUIRE(f.registry.lookups.size() == 1);
  CHECK(f.registry.lookups.front().rig_id == "rig-1");
  CHECK(f.registry.claim_calls == 0);
  f.registry.answer_lookup_none();
  REQUIRE(f.registry.claims.size() == 1);
  const FakeRegistry::Claim& c = f.registry.claims.front();
  CHECK(c.rig_id == "rig-1");
  CHECK(c.boot_id == boot);
  CHECK(c.broker_id == kMe);
  CHECK_FALSE(c.force);

  CHECK(s.claiming);
  CHECK(s.phase == SessionPhase::awaiting_hello);
  CHECK(f.frames(s).empty());
  CHECK_FALSE(f.core->rig("rig-1"));
  CHECK(f.mesh.of(MeshKind::rig_seen).empty());
  CHECK(f.log.events.empty());

  f.registry.answer_claim(ClaimOutcome::won);
  CHECK_FALSE(s.claiming);
  CHECK(s.phase == SessionPhase::live);
  const std::vector<Outgoing> out = f.frames(s);
  REQUIRE_FALSE(out.empty());
  CHECK(out[0].kind == OutboundKind::welcome);
  const std::optional<RigView> v = f.core->rig("rig-1");
  REQUIRE(v);
  CHECK(v->connected);
  CHECK(v->boot_id == boot);
  CHECK(v->broker_id == kMe);
  CHECK_FALSE(f.core->routes_elsewhere("rig-1"));
  // Every broker hears of it: the rig_seen, and its rig_connected event.
  FakeMesh::Sent& seen = f.mesh.only(MeshKind::rig_seen);
  CHECK(seen.to == "*");
  CHECK(seen.note.from == kMe);
  REQUIRE(seen.note.rig);
  CHECK(seen.note.rig->rig_id == "rig-1");
  CHECK(seen.note.rig->boot_id == boot);
  CHECK(seen.note.rig->broker_id == kMe);
  FakeMesh::Sent& ev = f.mesh.only(MeshKind::event);
  CHECK(ev.to == "*");
  REQUIRE(ev.note.event);
  CHECK(ev.note.event->type == EventType::rig_connected);
  CHECK(ev.note.event->rig_id == "rig-1");
  REQUIRE(f.log.events.size() == 1);
  CHECK(f.log.events[0].type == EventType::rig_connected);
}

TEST_CASE("mesh hello: a lookup error still claims the rig") {
  MeshFixture f;
  RigSession& s = f.hello("rig-1", uuid_v7().to_string());
  f.registry.answer_lookup(registry_down());
  REQUIRE(f.registry.claims.size() == 1);
  CHECK_FALSE(f.registry.claims.front().force);
  f.registry.answer_claim(ClaimOutcome::won);
  CHECK(s.phase == SessionPhase::live);
}

TEST_CASE("mesh hello: the session closes while its claim is pending; the late answer registers nothing") {
  MeshFixture f;
  const std::string boot = uuid_v7().to_string();
  RigSession& s = f.hello("rig-1", boot);
  f.registry.answer_lookup_none();
  REQUIRE(f.registry.claims.size() == 1);
  f.core->on_closed(s);  // the socket went away
  CHECK(f.core->connection_count() == 0);

  SUBCASE("won: the entry it won is released") {
    f.registry.answer_claim(ClaimOutcome::won);
    CHECK_FALSE(f.core->rig("rig-1"));
    REQUIRE(f.registry.releases.size() == 1);
    CHECK(f.registry.releases[0].rig_id == "rig-1");
    CHECK(f.registry.releases[0].boot_id == boot);
    CHECK(f.registry.releases[0].broker_id == kMe);
    CHECK(f.mesh.of(MeshKind::rig_seen).empty());
    CHECK(f.log.events.empty());
    CHECK(s.phase != SessionPhase::live);
  }
  SUBCASE("superseded: released too") {
    f.registry.answer_claim(ClaimOutcome::superseded, RegistryEntry{uuid_v7().to_string(), kMe});
    CHECK_FALSE(f.core->rig("rig-1"));
    REQUIRE(f.registry.releases.size() == 1);
    CHECK(f.registry.releases[0].boot_id == boot);
  }
  SUBCASE("lost: nothing was won, nothing to release") {
    f.registry.answer_claim(ClaimOutcome::lost, RegistryEntry{uuid_v7().to_string(), "broker-b"});
    CHECK(f.registry.releases.empty());
    CHECK_FALSE(f.core->rig("rig-1"));
  }
}

TEST_CASE("mesh hello: the session closes while its lookup is pending; nothing is claimed after") {
  MeshFixture f;
  RigSession& s = f.hello("rig-1", uuid_v7().to_string());
  f.core->on_closed(s);
  f.registry.answer_lookup_none();
  CHECK(f.registry.claim_calls == 0);
  CHECK_FALSE(f.core->rig("rig-1"));
}

// Regression (found by this test, since fixed): (handle_hello.cpp, claim_answered ~line 114, admit ~lines 164-183): a
// session the broker closed while its claim was on its way (here a second HELLO
// -> 4400; also the hello timeout, which the sweep applies to a claiming session,
// or a drain) stays in claiming_ until the transport's on_closed, which comes
// later (RigProtocol::close closes politely). A claim answered in between finds
// it by serial and admit()s it: phase goes from closing back to live, it is
// registered, put_rig, rig_connected is emitted and rig_seen broadcast, and a
// WELCOME is queued on a connection that is closing. claim_answered (or
// close_session) should treat a session in SessionPhase::closing as gone.
TEST_CASE("mesh hello: a session closed (not yet gone) while its claim is pending is not admitted by the answer") {
  MeshFixture f;
  const std::string boot = uuid_v7().to_string();
  RigSession& s = f.hello("rig-1", boot);
  f.registry.answer_lookup_none();
  // A second HELLO before the WELCOME: closed 4400 (the transport's on_closed comes later).
  f.send(s, CoreFixture::hello_for("rig-1", boot));
  REQUIRE(f.close_code(s) == CloseCode::malformed);
  f.registry.answer_claim(ClaimOutcome::won);
  CHECK(s.phase == SessionPhase::closing);
  CHECK_FALSE(f.core->rig("rig-1"));
  CHECK(f.mesh.of(MeshKind::rig_seen).empty());
  CHECK(f.log.events.empty());
  // ...and the entry it won is nobody's: released.
  CHECK(f.registry.releases.size() == 1);
}

TEST_CASE("mesh hello: the owner on another broker is asked to probe; it answers 4409, or is gone and the rig claimed") {
  MeshFixture f;
  const std::string boot = uuid_v7().to_string();
  const std::string owner_boot = uuid_v7().to_string();
  RigSession& s = f.hello("rig-1", boot);
  f.registry.answer_lookup_owner(owner_boot, "broker-b");
  CHECK(f.registry.claim_calls == 0);  // not before broker-b is asked
  FakeMesh::Sent& probe = f.mesh.only(MeshKind::probe);
  CHECK(probe.to == "broker-b");
  CHECK(probe.note.from == kMe);
  CHECK(probe.note.rig_id == "rig-1");
  CHECK(probe.note.boot_id == owner_boot);
  CHECK(f.frames(s).empty());

  SUBCASE("broker-b listens: refused 4409, naming it") {
    FakeMesh::reach(probe, std::size_t{1});
    CHECK(f.close_code(s) == CloseCode::duplicate_connection);
    CHECK(f.close_reason(s).find("broker-b") != std::string::npos);
    CHECK(f.registry.claim_calls == 0);
    CHECK_FALSE(f.core->rig("rig-1"));
    CHECK_FALSE(s.claiming);
  }
  SUBCASE("the mesh is down: refused 4409 (broker-b keeps the rig while it may be alive)") {
    FakeMesh::reach(probe, Expected<std::size_t>(make_error(Errc::io, "mesh down")));
    CHECK(f.close_code(s) == CloseCode::duplicate_connection);
    CHECK(f.registry.claim_calls == 0);
  }
  SUBCASE("nobody listens for broker-b: it is gone, the rig is claimed with force") {
    FakeMesh::reach(probe, std::size_t{0});
    REQUIRE(f.registry.claims.size() == 1);
    CHECK(f.registry.claims.front().force);
    CHECK(f.registry.claims.front().boot_id == boot);
    CHECK(f.frames(s).empty());  // still claiming
    f.registry.answer_claim(ClaimOutcome::superseded, RegistryEntry{owner_boot, "broker-b"});
    CHECK_FALSE(f.close_code(s));
    CHECK(s.phase == SessionPhase::live);
    const std::vector<Outgoing> out = f.frames(s);
    REQUIRE_FALSE(out.empty());
    CHECK(out[0].kind == OutboundKind::welcome);
    REQUIRE(f.core->rig("rig-1"));
    CHECK(f.core->rig("rig-1")->broker_id == kMe);
  }
  SUBCASE("the session goes while broker-b is asked: its answer does nothing") {
    f.core->on_closed(s);
    FakeMesh::reach(probe, std::size_t{0});
    CHECK(f.registry.claim_calls == 0);
    CHECK_FALSE(f.core->rig("rig-1"));
  }
}

TEST_CASE("mesh hello: a claim lost to broker-b asks it to probe; a supersede of broker-b's entry tells it") {
  MeshFixture f;
  const std::string old_boot = uuid_v7().to_string();
  RigSession& s = f.hello("rig-1", uuid_v7().to_string());
  f.registry.answer_lookup_none();  // nobody then; broker-b won meanwhile
  SUBCASE("lost") {
    f.registry.answer_claim(ClaimOutcome::lost, RegistryEntry{old_boot, "broker-b"});
    FakeMesh::Sent& probe = f.mesh.only(MeshKind::probe);
    CHECK(probe.to == "broker-b");
    CHECK(probe.note.boot_id == old_boot);
    FakeMesh::reach(probe, std::size_t{1});
    CHECK(f.close_code(s) == CloseCode::duplicate_connection);
  }
  SUBCASE("superseded") {
    f.registry.answer_claim(ClaimOutcome::superseded, RegistryEntry{old_boot, "broker-b"});
    CHECK(s.phase == SessionPhase::live);
    FakeMesh::Sent& told = f.mesh.only(MeshKind::superseded);
    CHECK(told.to == "broker-b");
    CHECK(told.note.rig_id == "rig-1");
    CHECK(told.note.boot_id == old_boot);
  }
  SUBCASE("lost to this broker's own stale entry (an earlier process): claimed again with force") {
    f.registry.answer_claim(ClaimOutcome::lost, RegistryEntry{old_boot, kMe});
    REQUIRE(f.registry.claims.size() == 1);
    CHECK(f.registry.claims.front().force);
    f.registry.answer_claim(ClaimOutcome::superseded, RegistryEntry{old_boot, kMe});
    CHECK(s.phase == SessionPhase::live);
    CHECK(f.mesh.of(MeshKind::superseded).empty());  // nobody else to tell
  }
}

// ---------------------------------------------------------------------------------
// refreshes

TEST_CASE("mesh registry: a claim error admits the rig here; registry_recovered() refreshes it; superseded -> 4410") {
  MeshFixture f;
  const std::string boot = uuid_v7().to_string();
  RigSession& s = f.hello("rig-1", boot);
  f.registry.answer_lookup_none();
  f.registry.answer_claim(Expected<ClaimResult>(registry_down()));
  const std::vector<Outgoing> out = f.frames(s);
  REQUIRE_FALSE(out.empty());
  CHECK(out[0].kind == OutboundKind::welcome);
  REQUIRE(f.core->rig("rig-1"));
  CHECK(f.core->rig("rig-1")->connected);
  CHECK(f.registry.refresh_calls == 0);

  f.core->registry_recovered();
  REQUIRE(f.registry.refreshes.size() == 1);
  CHECK(f.registry.refreshes.front().rig_id == "rig-1");
  CHECK(f.registry.refreshes.front().boot_id == boot);
  CHECK(f.registry.refreshes.front().broker_id == kMe);

  SUBCASE("superseded: closed 4410, naming the owner") {
    f.registry.answer_refresh(RefreshOutcome::superseded, RegistryEntry{uuid_v7().to_string(), "broker-b"});
    CHECK(f.close_code(s) == CloseCode::superseded);
    CHECK(f.close_reason(s).find("broker-b") != std::string::npos);
    CHECK_FALSE(f.core->rig("rig-1")->connected);
  }
  SUBCASE("extended: kept") {
    f.registry.answer_refresh(RefreshOutcome::extended);
    CHECK_FALSE(f.close_code(s));
    CHECK(f.core->rig("rig-1")->connected);
  }
  SUBCASE("restored: kept") {
    f.registry.answer_refresh(RefreshOutcome::restored);
    CHECK_FALSE(f.close_code(s));
  }
  SUBCASE("still unreachable: kept") {
    f.registry.answer_refresh(Expected<RefreshResult>(registry_down()));
    CHECK_FALSE(f.close_code(s));
  }
  SUBCASE("the connection went meanwhile, and another of the rig came: the old answer closes nothing") {
    f.core->on_closed(s);
    RigSession& again = f.live_rig("rig-1");
    f.registry.answer_refresh(RefreshOutcome::superseded, RegistryEntry{uuid_v7().to_string(), "broker-b"});
    CHECK_FALSE(f.close_code(again));
  }
}

TEST_CASE("mesh registry: the sweep's refresh pass refreshes every live rig; superseded -> 4410") {
  MeshFixture f;
  const std::string boot = uuid_v7().to_string();
  RigSession& s = f.live_rig("rig-1", boot);
  RigSession& t = f.live_rig("rig-2");
  for (int i = 0; i < 50; ++i) f.core->sweep();
  CHECK(f.registry.refresh_calls == 0);  // not due yet
  f.clock.advance(f.settings.registry_refresh_ms);
  for (int i = 0; i < 50; ++i) f.core->sweep();
  REQUIRE(f.registry.refreshes.size() == 2);  // one pass: each once
  // The order is the sweep's; answer rig-1's superseded, the other extended.
  for (int i = 0; i < 2; ++i) {
    if (f.registry.refreshes.front().rig_id == "rig-1") {
      CHECK(f.registry.refreshes.front().boot_id == boot);
      f.registry.answer_refresh(RefreshOutcome::superseded, RegistryEntry{uuid_v7().to_string(), "broker-c"});
    } else {
      f.registry.answer_refresh(RefreshOutcome::extended);
    }
  }
  CHECK(f.close_code(s) == CloseCode::superseded);
  CHECK(f.close_reason(s).find("broker-c") != std::string::npos);
  CHECK_FALSE(f.close_code(t));
  // The next pass is due another registry_refresh_ms later.
  for (int i = 0; i < 50; ++i) f.core->sweep();
  CHECK(f.registry.refresh_calls == 2);
}

// ---------------------------------------------------------------------------------
// what other brokers say about rigs

TEST_CASE("mesh notes: a probe pings the rig's connection here; for a rig not here the stale entry is released") {
  MeshFixture f;
  const std::string boot = uuid_v7().to_string();
  RigSession& s = f.live_rig("rig-1", boot);
  CHECK_FALSE(f.has_ping(s));
  SUBCASE("the same boot: pinged now") {
    f.core->on_mesh(note_of(MeshKind::probe, "broker-b", "rig-1", boot));
    CHECK(f.has_ping(s));
    CHECK(f.registry.releases.empty());
    CHECK_FALSE(f.close_code(s));
  }
  SUBCASE("another boot: not pinged") {
    f.core->on_mesh(note_of(MeshKind::probe, "broker-b", "rig-1", uuid_v7().to_string()));
    CHECK_FALSE(f.has_ping(s));
  }
  SUBCASE("a rig not here: its entry of this broker's is released") {
    const std::string stale = uuid_v7().to_string();
    f.core->on_mesh(note_of(MeshKind::probe, "broker-b", "rig-2", stale));
    REQUIRE(f.registry.releases.size() == 1);
    CHECK(f.registry.releases[0].rig_id == "rig-2");
    CHECK(f.registry.releases[0].boot_id == stale);
    CHECK(f.registry.releases[0].broker_id == kMe);
    CHECK_FALSE(f.has_ping(s));
  }
}

TEST_CASE("mesh notes: superseded for the rig's boot closes it 4410; for another boot nothing") {
  MeshFixture f;
  const std::string boot = uuid_v7().to_string();
  RigSession& s = f.live_rig("rig-1", boot);
  f.core->on_mesh(note_of(MeshKind::superseded, "broker-b", "rig-1", uuid_v7().to_string()));
  CHECK_FALSE(f.close_code(s));
  CHECK(f.core->rig("rig-1")->connected);
  f.core->on_mesh(note_of(MeshKind::superseded, "broker-b", "rig-1", boot));
  CHECK(f.close_code(s) == CloseCode::superseded);
  CHECK(f.close_reason(s).find("broker-b") != std::string::npos);
  CHECK_FALSE(f.core->rig("rig-1")->connected);
}

// ---------------------------------------------------------------------------------
// routed commands

TEST_CASE("mesh enqueue_routed: the owner broker takes it, or the deadline answers route_timeout") {
  MeshFixture f;
  std::optional<Fleet::RoutedOutcome> got;
  int calls = 0;
  CHECK(f.core->routes_elsewhere("rig-9"));
  f.core->enqueue_routed(CoreFixture::request("rig-9"), [&](Fleet::RoutedOutcome o) {
    ++calls;
    got = std::move(o);
  });
  REQUIRE(f.registry.lookups.size() == 1);
  CHECK(f.registry.lookups.front().rig_id == "rig-9");
  CHECK(f.mesh.sent.empty());
  f.registry.answer_lookup_owner(uuid_v7().to_string(), "broker-b");
  FakeMesh::Sent& cmd = f.mesh.only(MeshKind::command);
  CHECK(cmd.to == "broker-b");
  CHECK(cmd.note.from == kMe);
  CHECK(cmd.note.rig_id == "rig-9");
  CHECK(cmd.note.ask != 0);
  REQUIRE(cmd.note.command);
  const std::string cmd_id = cmd.note.command->cmd_id;
  CHECK(is_uuid_v7(cmd_id));  // fixed here: a lost answer can be asked after
  CHECK(cmd.note.command->rig_id == "rig-9");
  CHECK(cmd.note.command->kind == "dmesg");
  CHECK(calls == 0);
  CHECK(f.core->mesh_asks() == 1);
  const std::uint64_t ask = cmd.note.ask;

  SUBCASE("its answer settles it, with the owner's id") {
    FakeMesh::reach(cmd, std::size_t{1});
    CHECK(calls == 0);
    MeshNote wrong = note_of(MeshKind::command_answer, "broker-b", "rig-9");
    wrong.ask = ask + 100;
    wrong.outcome = EnqueueOk{};
    f.core->on_mesh(wrong);
    CHECK(calls == 0);
    MeshNote answer = note_of(MeshKind::command_answer, "broker-b", "rig-9");
    answer.ask = ask;
    answer.outcome = EnqueueOk{cmd_id, "rig-9", 4, CommandState::queued, false, false, 123};
    f.core->on_mesh(answer);
    REQUIRE(calls == 1);
    CHECK(got->broker_id == "broker-b");
    CHECK_FALSE(got->unrecorded);
    const auto* ok = std::get_if<EnqueueOk>(&got->outcome);
    REQUIRE(ok);
    CHECK(ok->cmd_id == cmd_id);
    CHECK(ok->seq == 4);
    CHECK(f.core->mesh_asks() == 0);
    // A repeat (or the deadline) does nothing more.
    f.core->on_mesh(answer);
    f.clock.advance(f.settings.mesh_answer_ms);
    f.core->sweep();
    CHECK(calls == 1);
    CHECK_FALSE(f.core->command(cmd_id));  // not this broker's
  }
  SUBCASE("an answer its store has not recorded says so") {
    MeshNote answer = note_of(MeshKind::command_answer, "broker-b", "rig-9");
    answer.ask = ask;
    answer.outcome = EnqueueOk{cmd_id, "rig-9", 0, CommandState::queued, false, false, 0};
    answer.unrecorded = "disk full";
    f.core->on_mesh(answer);
    REQUIRE(got);
    REQUIRE(got->unrecorded);
    CHECK(got->unrecorded->detail.find("disk full") != std::string::npos);
  }
  SUBCASE("no answer within mesh_answer_ms: route_timeout naming the cmd_id") {
    FakeMesh::reach(cmd, std::size_t{1});
    f.clock.advance(f.settings.mesh_answer_ms - 1);
    f.core->sweep();
    CHECK(calls == 0);
    f.clock.advance(1);
    f.core->sweep();
    REQUIRE(calls == 1);
    const auto* fail = std::get_if<EnqueueFailure>(&got->outcome);
    REQUIRE(fail);
    CHECK(fail->error == EnqueueError::route_timeout);
    CHECK(fail->cmd_id == cmd_id);
    CHECK(fail->rig_id == "rig-9");
    CHECK(fail->detail.find("broker-b") != std::string::npos);
    CHECK(f.core->mesh_asks() == 0);
    // Its late answer is ignored.
    MeshNote late = note_of(MeshKind::command_answer, "broker-b", "rig-9");
    late.ask = ask;
    late.outcome = EnqueueOk{cmd_id, "rig-9", 1, CommandState::queued, false, false, 0};
    f.core->on_mesh(late);
    CHECK(calls == 1);
  }
  SUBCASE("nobody listens for broker-b: held here under the same cmd_id") {
    FakeMesh::reach(cmd, std::size_t{0});
    REQUIRE(calls == 1);
    const auto* ok = std::get_if<EnqueueOk>(&got->outcome);
    REQUIRE(ok);
    CHECK(ok->cmd_id == cmd_id);
    CHECK(ok->held);
    CHECK_FALSE(got->unrecorded);
    CHECK(f.core->mesh_asks() == 0);
    REQUIRE(f.core->command(cmd_id));
    CHECK(f.core->command(cmd_id)->state == CommandState::queued);
    CHECK(f.store->stored(cmd_id));  // recorded before the answer
  }
  SUBCASE("too large for the mesh: refused at once (400), neither held here nor timed out") {
    FakeMesh::reach(cmd, Expected<std::size_t>(make_error(Errc::too_large, "a command note of 300000 bytes")));
    REQUIRE(calls == 1);
    const auto* failure = std::get_if<EnqueueFailure>(&got->outcome);
    REQUIRE(failure);
    CHECK(failure->error == EnqueueError::bad_request);
    CHECK(failure->detail.find("broker-b") != std::string::npos);
    CHECK(f.core->mesh_asks() == 0);
    CHECK_FALSE(f.core->command(cmd_id));
  }
  SUBCASE("the mesh is down when it is sent: held here") {
    FakeMesh::reach(cmd, Expected<std::size_t>(make_error(Errc::io, "mesh down")));
    REQUIRE(calls == 1);
    const auto* ok = std::get_if<EnqueueOk>(&got->outcome);
    REQUIRE(ok);
    CHECK(ok->held);
    CHECK(f.core->command(cmd_id));
  }
}

// Regression (found by this test, since fixed): (fleet_mesh.cpp, enqueue_routed, ~line 100 with ~lines 120-135): when the
// owner broker is gone (Reached 0, or the mesh down) the command is held HERE,
// but it settles the ask whose `done` builds RoutedOutcome{..., owner_id}: the
// answer names broker-b as the broker that took it. routes_rigs.cpp then drops
// the client's ?wait hold (out.broker_id != here) and answers "broker": "broker-b"
// for a command broker-b never saw. The fallback should answer with this
// broker's id (settings_.broker_id).
TEST_CASE("mesh enqueue_routed: held here when the owner is gone, the answer names this broker") {
  MeshFixture f;
  std::optional<Fleet::RoutedOutcome> got;
  f.core->enqueue_routed(CoreFixture::request("rig-9"), [&](Fleet::RoutedOutcome o) { got = std::move(o); });
  f.registry.answer_lookup_owner(uuid_v7().to_string(), "broker-b");
  FakeMesh::reach(f.mesh.only(MeshKind::command), std::size_t{0});
  REQUIRE(got);
  REQUIRE(std::holds_alternative<EnqueueOk>(got->outcome));
  CHECK(got->broker_id == kMe);
}

TEST_CASE("mesh enqueue_routed: the registry cannot say, says nobody, or says this broker") {
  MeshFixture f;
  std::optional<Fleet::RoutedOutcome> got;
  auto route = [&](CommandRequest r) {
    got.reset();
    f.core->enqueue_routed(std::move(r), [&](Fleet::RoutedOutcome o) { got = std::move(o); });
  };
  SUBCASE("a lookup error: registry_unavailable") {
    route(CoreFixture::request("rig-9"));
    f.registry.answer_lookup(registry_down());
    REQUIRE(got);
    const auto* fail = std::get_if<EnqueueFailure>(&got->outcome);
    REQUIRE(fail);
    CHECK(fail->error == EnqueueError::registry_unavailable);
    CHECK(fail->rig_id == "rig-9");
    CHECK(f.mesh.of(MeshKind::command).empty());
  }
  SUBCASE("nobody owns a never-seen rig: unknown_rig, as for one broker") {
    route(CoreFixture::request("rig-9"));
    f.registry.answer_lookup_none();
    REQUIRE(got);
    const auto* fail = std::get_if<EnqueueFailure>(&got->outcome);
    REQUIRE(fail);
    CHECK(fail->error == EnqueueError::unknown_rig);
    CHECK(f.mesh.of(MeshKind::command).empty());
  }
  SUBCASE("nobody owns a never-seen rig, the request holds it: held here") {
    CommandRequest r = CoreFixture::request("rig-9");
    r.hold = true;
    route(r);
    f.registry.answer_lookup_none();
    REQUIRE(got);
    const auto* ok = std::get_if<EnqueueOk>(&got->outcome);
    REQUIRE(ok);
    CHECK(ok->held);
    CHECK(got->broker_id == kMe);
    CHECK(f.core->command(ok->cmd_id));
  }
  SUBCASE("a rig seen here before, owned by nobody now: held here") {
    RigSession& s = f.live_rig("rig-1");
    f.core->on_closed(s);
    CHECK(f.core->routes_elsewhere("rig-1"));
    route(CoreFixture::request("rig-1"));
    f.registry.answer_lookup_none();
    REQUIRE(got);
    const auto* ok = std::get_if<EnqueueOk>(&got->outcome);
    REQUIRE(ok);
    CHECK(ok->held);
    CHECK(f.mesh.of(MeshKind::command).empty());
  }
  SUBCASE("the registry names this broker: here") {
    CommandRequest r = CoreFixture::request("rig-9");
    r.hold = true;
    route(r);
    f.registry.answer_lookup_owner(uuid_v7().to_string(), kMe);
    REQUIRE(got);
    CHECK(std::holds_alternative<EnqueueOk>(got->outcome));
    CHECK(f.mesh.of(MeshKind::command).empty());
  }
  SUBCASE("a rig connected here is not routed: enqueued at once, no lookup") {
    RigSession& s = f.live_rig("rig-1");
    const int lookups = f.registry.lookup_calls;
    CHECK_FALSE(f.core->routes_elsewhere("rig-1"));
    route(CoreFixture::request("rig-1"));
    CHECK(f.registry.lookup_calls == lookups);
    REQUIRE(got);
    const auto* ok = std::get_if<EnqueueOk>(&got->outcome);
    REQUIRE(ok);
    CHECK_FALSE(ok->held);
    CHECK(ok->seq == 1);
    CHECK(CoreFixture::commands_in(f.frames(s)).size() == 1);
  }
}

TEST_CASE("mesh notes: a command for a rig here is enqueued and answered to its sender once recorded") {
  MeshFixture f;
  f.store->manual = true;  // batches become durable when the test says
  RigSession& s = f.live_rig("rig-1");
  CommandRequest r = CoreFixture::request("rig-1");
  r.cmd_id = uuid_v7_at(f.clock.wall_ms()).to_string();
  r.idempotency_key = "routed-1";  // goes to the rig only once recorded
  MeshNote note = note_of(MeshKind::command, "broker-b", "rig-1");
  note.ask = 77;
  note.command = r;
  f.core->on_mesh(note);
  REQUIRE(f.core->command(r.cmd_id));
  CHECK(f.core->command(r.cmd_id)->rig_id == "rig-1");
  CHECK(CoreFixture::commands_in(f.frames(s)).empty());  // not before its record
  CHECK(f.mesh.of(MeshKind::command_answer).empty());    // nor its answer

  SUBCASE("recorded: written to the rig, and answered") {
    f.store->finish_next();
    f.core->on_store_progress();
    const std::vector<msg::Command> cmds = CoreFixture::commands_in(f.frames(s));
    REQUIRE(cmds.size() == 1);
    CHECK(cmds[0].cmd_id == r.cmd_id);
    FakeMesh::Sent& answer = f.mesh.only(MeshKind::command_answer);
    CHECK(answer.to == "broker-b");
    CHECK(answer.note.from == kMe);
    CHECK(answer.note.ask == 77);
    CHECK(answer.note.unrecorded.empty());
    REQUIRE(answer.note.outcome);
    const auto* ok = std::get_if<EnqueueOk>(&*answer.note.outcome);
    REQUIRE(ok);
    CHECK(ok->cmd_id == r.cmd_id);
    CHECK(ok->seq == cmds[0].seq);
    CHECK_FALSE(ok->held);
  }
  SUBCASE("not recorded: withdrawn, and the answer says why") {
    f.store->finish_next(false);
    f.core->on_store_progress();
    CHECK(CoreFixture::commands_in(f.frames(s)).empty());
    FakeMesh::Sent& answer = f.mesh.only(MeshKind::command_answer);
    CHECK(answer.note.ask == 77);
    CHECK_FALSE(answer.note.unrecorded.empty());
  }
}

// ---------------------------------------------------------------------------------
// routed cancel and force-reconnect

TEST_CASE("mesh cancel_routed: broadcast; whoever holds it answers, else this broker's own answer") {
  auto shared = std::make_shared<MemoryStore::Shared>();
  MeshFixture f(shared);
  // A command only the store has, finished: this broker's own cancel() says `finished`.
  const std::string done_id = uuid_v7_at(f.clock.wall_ms()).to_string();
  CommandView v;
  v.cmd_id = done_id;
  v.rig_id = "rig-9";
  v.kind = "dmesg";
  v.state = CommandState::succeeded;
  v.enqueued_at_ms = f.clock.wall_ms();
  shared->commands.emplace(done_id, v);
  const std::string unknown_id = uuid_v7_at(f.clock.wall_ms()).to_string();

  std::vector<CancelOutcome> got;
  auto cancel = [&](const std::string& id) {
    f.core->cancel_routed(id, [&](CancelOutcome o) { got.push_back(o); });
    std::vector<FakeMesh::Sent*> all = f.mesh.of(MeshKind::cancel);
    REQUIRE_FALSE(all.empty());
    FakeMesh::Sent& b = *all.back();
    CHECK(b.to == "*");
    CHECK(b.note.from == kMe);
    CHECK(b.note.cmd_id == id);
    return &b;
  };
  auto answer = [&](FakeMesh::Sent* asked, const std::string& from, bool held, CancelOutcome o) {
    MeshNote a = note_of(MeshKind::cancel_answer, from);
    a.ask = asked->note.ask;
    a.cmd_id = asked->note.cmd_id;
    a.held = held;
    a.cancel = o;
    f.core->on_mesh(a);
  };

  SUBCASE("three listening (itself among them): not mine, then held -> its answer") {
    FakeMesh::Sent* b = cancel(unknown_id);
    FakeMesh::reach(*b, std::size_t{3});
    CHECK(got.empty());
    answer(b, "broker-b", false, CancelOutcome::unknown);
    CHECK(got.empty());
    answer(b, "broker-c", true, CancelOutcome::requested);
    CHECK(got == std::vector<CancelOutcome>{CancelOutcome::requested});
    CHECK(f.core->mesh_asks() == 0);
  }
  SUBCASE("held by the first to answer: its answer at once") {
    FakeMesh::Sent* b = cancel(unknown_id);
    FakeMesh::reach(*b, std::size_t{3});
    answer(b, "broker-b", true, CancelOutcome::cancelled);
    CHECK(got == std::vector<CancelOutcome>{CancelOutcome::cancelled});
  }
  SUBCASE("every other broker says not mine: this broker's own answer, after the last of them") {
    FakeMesh::Sent* b = cancel(done_id);
    FakeMesh::reach(*b, std::size_t{3});
    answer(b, "broker-b", false, CancelOutcome::unknown);
    CHECK(got.empty());  // two others were listening: one more answer is due
    answer(b, "broker-c", false, CancelOutcome::unknown);
    CHECK(got == std::vector<CancelOutcome>{CancelOutcome::finished});
  }
  SUBCASE("nobody else listens: this broker's own answer at once") {
    FakeMesh::Sent* b = cancel(done_id);
    FakeMesh::reach(*b, std::size_t{1});
    CHECK(got == std::vector<CancelOutcome>{CancelOutcome::finished});
    CHECK(f.core->mesh_asks() == 0);
  }
  SUBCASE("the mesh is down: this broker's own answer") {
    FakeMesh::Sent* b = cancel(unknown_id);
    FakeMesh::reach(*b, Expected<std::size_t>(make_error(Errc::io, "mesh down")));
    CHECK(got == std::vector<CancelOutcome>{CancelOutcome::unknown});
  }
  SUBCASE("no answer in time: this broker's own answer") {
    FakeMesh::Sent* b = cancel(done_id);
    FakeMesh::reach(*b, std::size_t{2});
    f.clock.advance(f.settings.mesh_answer_ms);
    f.core->sweep();
    CHECK(got == std::vector<CancelOutcome>{CancelOutcome::finished});
  }
}

TEST_CASE("mesh cancel: a command whose rig is here is not routed; a cancel note is answered by whoever holds it") {
  MeshFixture f;
  f.live_rig("rig-1");
  const EnqueueOutcome o = f.core->enqueue(CoreFixture::request("rig-1"));
  REQUIRE(std::holds_alternative<EnqueueOk>(o));
  (void)f.core->persist();
  const std::string cmd_id = std::get<EnqueueOk>(o).cmd_id;
  CHECK_FALSE(f.core->cancel_routes_elsewhere(cmd_id));
  CHECK(f.core->cancel_routes_elsewhere(uuid_v7().to_string()));  // not known here

  SUBCASE("cancel_routed here: at once, no broadcast") {
    std::optional<CancelOutcome> got;
    f.core->cancel_routed(cmd_id, [&](CancelOutcome c) { got = c; });
    CHECK(got == CancelOutcome::cancelled);
    CHECK(f.mesh.of(MeshKind::cancel).empty());
  }
  SUBCASE("another broker's cancel note: held, cancelled, answered") {
    MeshNote n = note_of(MeshKind::cancel, "broker-b");
    n.ask = 5;
    n.cmd_id = cmd_id;
    f.core->on_mesh(n);
    FakeMesh::Sent& a = f.mesh.only(MeshKind::cancel_answer);
    CHECK(a.to == "broker-b");
    CHECK(a.note.ask == 5);
    CHECK(a.note.held);
    CHECK(a.note.cancel == CancelOutcome::cancelled);
    CHECK(f.core->command(cmd_id)->state == CommandState::cancelled);
  }
  SUBCASE("a cancel note for a command not here: answered not mine") {
    MeshNote n = note_of(MeshKind::cancel, "broker-b");
    n.ask = 6;
    n.cmd_id = uuid_v7().to_string();
    f.core->on_mesh(n);
    FakeMesh::Sent& a = f.mesh.only(MeshKind::cancel_answer);
    CHECK(a.note.ask == 6);
    CHECK_FALSE(a.note.held);
    CHECK(f.core->command(cmd_id)->state == CommandState::queued);
  }
}

TEST_CASE("mesh force_reconnect_routed: broadcast; the broker holding the rig closes it") {
  MeshFixture f;
  std::vector<std::pair<bool, bool>> got;
  auto ask = [&](const std::string& rig_id) {
    f.core->force_reconnect_routed(rig_id, [&](bool closed, bool known) { got.emplace_back(closed, known); });
    std::vector<FakeMesh::Sent*> all = f.mesh.of(MeshKind::reconnect);
    REQUIRE_FALSE(all.empty());
    FakeMesh::Sent& b = *all.back();
    CHECK(b.to == "*");
    CHECK(b.note.rig_id == rig_id);
    return &b;
  };
  auto answer = [&](FakeMesh::Sent* asked, const std::string& from, bool held) {
    MeshNote a = note_of(MeshKind::reconnect_answer, from, asked->note.rig_id);
    a.ask = asked->note.ask;
    a.held = held;
    f.core->on_mesh(a);
  };
  using Got = std::vector<std::pair<bool, bool>>;

  SUBCASE("not mine, then closed") {
    FakeMesh::Sent* b = ask("rig-9");
    FakeMesh::reach(*b, std::size_t{3});
    answer(b, "broker-b", false);
    CHECK(got.empty());
    answer(b, "broker-c", true);
    CHECK(got == Got{{true, true}});
  }
  SUBCASE("nobody holds an unknown rig: not closed, not known") {
    FakeMesh::Sent* b = ask("rig-9");
    FakeMesh::reach(*b, std::size_t{3});
    answer(b, "broker-b", false);
    CHECK(got.empty());
    answer(b, "broker-c", false);
    CHECK(got == Got{{false, false}});
  }
  SUBCASE("nobody holds a rig seen here before: not closed, known") {
    RigSession& s = f.live_rig("rig-1");
    f.core->on_closed(s);
    FakeMesh::Sent* b = ask("rig-1");
    FakeMesh::reach(*b, std::size_t{2});
    answer(b, "broker-b", false);
    CHECK(got == Got{{false, true}});
  }
  SUBCASE("nobody else listens: answered at once") {
    FakeMesh::Sent* b = ask("rig-9");
    FakeMesh::reach(*b, std::size_t{1});
    CHECK(got == Got{{false, false}});
  }
  SUBCASE("no answer in time") {
    FakeMesh::Sent* b = ask("rig-9");
    FakeMesh::reach(*b, std::size_t{3});
    f.clock.advance(f.settings.mesh_answer_ms);
    f.core->sweep();
    CHECK(got == Got{{false, false}});
  }
  SUBCASE("a rig here is not routed: closed at once, 4403") {
    RigSession& s = f.live_rig("rig-1");
    f.core->force_reconnect_routed("rig-1", [&](bool closed, bool known) { got.emplace_back(closed, known); });
    CHECK(got == Got{{true, true}});
    CHECK(f.close_code(s) == CloseCode::forced_reconnect);
    CHECK(f.mesh.of(MeshKind::reconnect).empty());
  }
  SUBCASE("another broker's reconnect note: the rig here is closed 4403 and the answer says so") {
    RigSession& s = f.live_rig("rig-1");
    MeshNote n = note_of(MeshKind::reconnect, "broker-b", "rig-1");
    n.ask = 9;
    f.core->on_mesh(n);
    CHECK(f.close_code(s) == CloseCode::forced_reconnect);
    FakeMesh::Sent& a = f.mesh.only(MeshKind::reconnect_answer);
    CHECK(a.to == "broker-b");
    CHECK(a.note.ask == 9);
    CHECK(a.note.held);
    MeshNote m = note_of(MeshKind::reconnect, "broker-b", "rig-2");
    m.ask = 10;
    f.core->on_mesh(m);
    const std::vector<FakeMesh::Sent*> answers = f.mesh.of(MeshKind::reconnect_answer);
    REQUIRE(answers.size() == 2);
    CHECK(answers[1]->note.ask == 10);
    CHECK_FALSE(answers[1]->note.held);
  }
}

// ---------------------------------------------------------------------------------
// the fleet view and the event stream

TEST_CASE("mesh notes: events are re-emitted here; rig_seen shows the rig connected on its broker until it leaves") {
  MeshFixture f;
  const std::size_t sent_before = f.mesh.sent.size();
  f.core->on_mesh(event_note("broker-b", EventType::rig_event, "rig-7", "door open", f.clock.wall_ms()));
  REQUIRE(f.log.events.size() == 1);
  CHECK(f.log.events[0].type == EventType::rig_event);
  CHECK(f.log.events[0].rig_id == "rig-7");
  CHECK(f.log.events[0].detail == "door open");
  CHECK(f.mesh.sent.size() == sent_before);  // not relayed again (no echo between brokers)

  const std::string boot = uuid_v7().to_string();
  CHECK_FALSE(f.core->rig("rig-7"));
  f.core->on_mesh(rig_seen_note("broker-b", "rig-7", boot, f.clock.wall_ms()));
  const std::optional<RigView> v = f.core->rig("rig-7");
  REQUIRE(v);
  CHECK(v->connected);
  CHECK(v->state == "connected");
  CHECK(v->broker_id == "broker-b");
  CHECK(v->boot_id == boot);
  CHECK(v->labels.at("lab") == "c3");
  CHECK(f.count_rig("rig-7") == 1);
  const std::vector<RigView> all = f.core->rigs();
  REQUIRE(all.size() == 1);
  CHECK(all[0].connected);
  CHECK(all[0].broker_id == "broker-b");
  std::vector<std::string> visited;
  f.core->visit_rig_labels([&](std::string_view id, const Fleet::LabelList&) { visited.emplace_back(id); });
  CHECK(visited == std::vector<std::string>{"rig-7"});
  CHECK(f.core->routes_elsewhere("rig-7"));

  // Another broker's disconnect of it says nothing about broker-b's connection.
  f.core->on_mesh(event_note("broker-c", EventType::rig_disconnected, "rig-7", "gone", f.clock.wall_ms()));
  CHECK(f.core->rig("rig-7")->connected);
  // broker-b's: offline now.
  f.clock.advance(500);
  f.core->on_mesh(event_note("broker-b", EventType::rig_disconnected, "rig-7", "connection closed", f.clock.wall_ms()));
  REQUIRE(f.core->rig("rig-7"));
  CHECK_FALSE(f.core->rig("rig-7")->connected);
  CHECK(f.core->rig("rig-7")->state == "offline");
  CHECK(f.core->rig("rig-7")->last_seen_ms == f.clock.wall_ms());
  CHECK(f.count_rig("rig-7") == 1);
  CHECK(f.log.events.size() == 3);  // both disconnects re-emitted too
}

TEST_CASE("mesh notes: rig_seen of a rig connected here changes nothing") {
  MeshFixture f;
  const std::string boot = uuid_v7().to_string();
  f.live_rig("rig-1", boot);
  f.core->on_mesh(rig_seen_note("broker-b", "rig-1", uuid_v7().to_string(), f.clock.wall_ms()));
  CHECK(f.core->rig("rig-1")->broker_id == kMe);
  CHECK(f.core->rig("rig-1")->boot_id == boot);
  CHECK(f.count_rig("rig-1") == 1);
}

// Regression (found by this test, since fixed): (fleet_mesh.cpp, heard_of, ~lines 285-297, with fleet_core.cpp rigs() /
// visit_rig_labels ~lines 450-469): a rig moves from broker-b to this broker
// (broker-b's entry superseded); broker-b then closes its old connection 4410 and
// relays rig_disconnected. heard_of finds the rig in remote_ (from broker-b's
// earlier rig_seen; admit() never drops it) and moves it into offline_ although
// it is connected here. rigs() and visit_rig_labels() list offline_ entries
// without checking registry_, so the rig is listed twice (connected here, and
// offline): GET /v1/rigs shows it twice and a label-selected job targets it
// twice. heard_of should skip a rig registered here (and admit() could erase
// remote_'s entry).
TEST_CASE("mesh notes: a rig that moved here is listed once after its old broker's disconnect") {
  MeshFixture f;
  const std::string old_boot = uuid_v7().to_string();
  f.core->on_mesh(rig_seen_note("broker-b", "rig-1", old_boot, f.clock.wall_ms()));
  RigSession& s = f.hello("rig-1", uuid_v7().to_string());
  f.registry.answer_lookup_none();
  f.registry.answer_claim(ClaimOutcome::superseded, RegistryEntry{old_boot, "broker-b"});
  REQUIRE(s.phase == SessionPhase::live);
  f.core->on_mesh(event_note("broker-b", EventType::rig_disconnected, "rig-1", "superseded", f.clock.wall_ms()));
  CHECK(f.count_rig("rig-1") == 1);
  std::size_t visits = 0;
  f.core->visit_rig_labels([&](std::string_view id, const Fleet::LabelList&) { visits += id == "rig-1"; });
  CHECK(visits == 1);
  REQUIRE(f.core->rig("rig-1"));
  CHECK(f.core->rig("rig-1")->broker_id == kMe);
}

TEST_CASE("mesh notes: this broker's own notes are ignored") {
  MeshFixture f;
  const std::string boot = uuid_v7().to_string();
  RigSession& s = f.live_rig("rig-1", boot);
  const std::size_t events = f.log.events.size();
  const std::size_t sent = f.mesh.sent.size();

  f.core->on_mesh(note_of(MeshKind::probe, kMe, "rig-1", boot));
  CHECK_FALSE(f.has_ping(s));
  f.core->on_mesh(note_of(MeshKind::probe, kMe, "rig-2", boot));
  CHECK(f.registry.releases.empty());
  f.core->on_mesh(note_of(MeshKind::superseded, kMe, "rig-1", boot));
  CHECK_FALSE(f.close_code(s));
  MeshNote cmd = note_of(MeshKind::command, kMe, "rig-1");
  cmd.ask = 3;
  cmd.command = CoreFixture::request("rig-1");
  f.core->on_mesh(cmd);
  CHECK(CoreFixture::commands_in(f.frames(s)).empty());
  MeshNote rc = note_of(MeshKind::reconnect, kMe, "rig-1");
  rc.ask = 4;
  f.core->on_mesh(rc);
  CHECK_FALSE(f.close_code(s));
  f.core->on_mesh(event_note(kMe, EventType::rig_event, "rig-1", "echo", f.clock.wall_ms()));
  CHECK(f.log.events.size() == events);
  f.core->on_mesh(rig_seen_note(kMe, "rig-5", uuid_v7().to_string(), f.clock.wall_ms()));
  CHECK_FALSE(f.core->rig("rig-5"));
  CHECK(f.mesh.sent.size() == sent);  // nothing answered

  // Its own answers do not settle its asks either.
  std::optional<CancelOutcome> got;
  f.core->cancel_routed(uuid_v7().to_string(), [&](CancelOutcome o) { got = o; });
  FakeMesh::Sent& b = f.mesh.only(MeshKind::cancel);
  FakeMesh::reach(b, std::size_t{2});
  MeshNote own = note_of(MeshKind::cancel_answer, kMe);
  own.ask = b.note.ask;
  own.held = true;
  own.cancel = CancelOutcome::requested;
  f.core->on_mesh(own);
  CHECK_FALSE(got);
  CHECK(f.core->mesh_asks() == 1);
}

TEST_CASE("mesh: a job's hold -- claimed, renewed, taken at once from a broker whose channel is empty") {
  MeshFixture f;
  CHECK(f.core->shares_jobs());
  std::vector<Fleet::JobHold> got;
  auto keep = [&](Fleet::JobHold h) { got.push_back(std::move(h)); };

  // A free hold: won.
  f.core->hold_job("job-1", true, keep);
  FakeRegistry::JobCall c = f.registry.take_job_call();
  CHECK(c.job_id == "job-1");
  CHECK(c.broker_id == kMe);
  CHECK_FALSE(c.force);
  c.claim(ClaimResult{ClaimOutcome::won, std::nullopt});
  REQUIRE(got.size() == 1);
  CHECK(got[0].held);

  // Held by a live broker: its channel has a listener, so the claim stays lost.
  f.core->hold_job("job-2", true, keep);
  f.registry.take_job_call().claim(ClaimResult{ClaimOutcome::lost, RegistryEntry{"job", "broker-b"}});
  FakeMesh::Sent& ping = f.mesh.only(MeshKind::ping);
  CHECK(ping.to == "broker-b");
  FakeMesh::reach(ping, std::size_t{1});
  REQUIRE(got.size() == 2);
  CHECK_FALSE(got[1].held);
  CHECK(got[1].holder == "broker-b");
  CHECK(f.registry.job_calls.empty());

  // Held by a broker that is gone (nobody listens): claimed again, forced.
  f.mesh.sent.clear();
  f.core->hold_job("job-3", true, keep);
  f.registry.take_job_call().claim(ClaimResult{ClaimOutcome::lost, RegistryEntry{"job", "broker-c"}});
  FakeMesh::reach(f.mesh.only(MeshKind::ping), std::size_t{0});
  FakeRegistry::JobCall forced = f.registry.take_job_call();
  CHECK(forced.force);
  forced.claim(ClaimResult{ClaimOutcome::superseded, RegistryEntry{"job", "broker-c"}});
  REQUIRE(got.size() == 3);
  CHECK(got[2].held);

  // A renewal another broker's claim superseded: not held any more, and by whom.
  f.core->hold_job("job-1", false, keep);
  FakeRegistry::JobCall renew = f.registry.take_job_call();
  REQUIRE(renew.refresh);
  renew.refresh(RefreshResult{RefreshOutcome::superseded, RegistryEntry{"job", "broker-c"}});
  REQUIRE(got.size() == 4);
  CHECK_FALSE(got[3].held);
  CHECK(got[3].holder == "broker-c");
  // The registry away: no answer, an error (the job goes on where it is).
  f.core->hold_job("job-1", false, keep);
  f.registry.take_job_call().refresh(Expected<RefreshResult>(make_error(Errc::io, "redis down")));
  REQUIRE(got.size() == 5);
  CHECK(got[4].error.has_value());
}
