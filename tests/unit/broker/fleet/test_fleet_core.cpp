// The data plane's protocol behaviour, without sockets: HELLO outcomes, seq and
// write order, the command lifecycle, the outbox limit, keepalive, drain and the
// close code of every kind of bad frame.
#include <doctest/doctest.h>

#include "fleet/lifecycle.hpp"
#include "fleet_core_fixture.hpp"

using namespace fleetlink;
using namespace fleetlink::broker;
using fleetlink::broker::testing::CoreFixture;

namespace {

std::uint64_t seq_of(const Outgoing& f) { return std::get<msg::Command>(f.message).seq; }

// Hand-made msgpack for frames the SDK's encoder cannot produce.
Bytes unknown_type_frame() { return {0x82, 0xa1, 'v', 0x01, 0xa1, 't', 0xa3, 'f', 'o', 'o'}; }
Bytes version_2_frame() { return {0x82, 0xa1, 'v', 0x02, 0xa1, 't', 0xa5, 'h', 'e', 'l', 'l', 'o'}; }

}  // namespace

TEST_CASE("hello: accepted, registered, WELCOMEd first") {
  CoreFixture f;
  RigSession& s = f.connect();
  const std::string boot = uuid_v7().to_string();
  f.send(s, CoreFixture::hello_for("rig-1", boot));
  CHECK(s.phase == SessionPhase::live);
  CHECK(f.core->rig("rig-1").has_value());
  CHECK(f.core->rig("rig-1")->boot_id == boot);
  CHECK(f.core->rig("rig-1")->labels.at("lab") == "b2");
  const std::vector<Outgoing> out = f.frames(s);
  REQUIRE(out.size() == 1);
  CHECK(out[0].kind == OutboundKind::welcome);
  const auto& w = std::get<msg::Welcome>(out[0].message);
  CHECK(w.broker_id == f.settings.broker_id);
  CHECK(w.ping_interval_ms == f.settings.keepalive.ping_interval_ms);
  CHECK(w.max_frame_bytes == f.settings.max_frame_bytes);
  REQUIRE(f.log.events.size() == 1);
  CHECK(f.log.events[0].type == EventType::rig_connected);
  CHECK(f.log.events[0].detail == boot);
}

TEST_CASE("observer: a peer address is asked when its line is written, and a peer that left reads (gone)") {
  testing::FakeTransport transport;
  RigSession s(nullptr, false, 10.0, 0, 0);
  const PeerAddress peer(transport, s);
  CHECK(peer.text() == "127.0.0.1:40000");
  transport.peer.clear();
  CHECK(peer.text() == "(gone)");
}

TEST_CASE("hello: a HELLO that fails validation is closed 4400") {
  CoreFixture f;
  RigSession& s = f.connect();
  f.send(s, CoreFixture::hello_for("rig with spaces", uuid_v7().to_string()));
  REQUIRE(f.transport.close_of(s));
  CHECK(f.transport.close_of(s)->code == CloseCode::malformed);
  CHECK_FALSE(f.core->rig("rig with spaces"));
}

TEST_CASE("hello: a rig_id that is not the certificate's identity is closed 4401") {
  CoreFixture f;
  RigSession& s = f.connect("rig-b");
  f.send(s, CoreFixture::hello_for("rig-a", uuid_v7().to_string()));
  REQUIRE(f.transport.close_of(s));
  CHECK(f.transport.close_of(s)->code == CloseCode::identity_mismatch);
  RigSession& t = f.connect("rig-b");
  f.send(t, CoreFixture::hello_for("rig-b", uuid_v7().to_string()));
  CHECK_FALSE(f.transport.close_of(t));
  CHECK(t.phase == SessionPhase::live);
}

// A HELLO for a rig connected here, whatever its boot_id (the same agent, a
// restarted one, or a cloned configuration on a second machine): the current
// connection is pinged and the newcomer waits for the verdict.
struct Collision {
  explicit Collision(FleetSettings settings = {}) : f(settings) {}
  CoreFixture f;
  RigSession* old = nullptr;
  RigSession* fresh = nullptr;
  void start(const std::string& old_boot, const std::string& new_boot) {
    old = &f.live_rig("rig-1", old_boot);
    fresh = &f.connect();
    f.send(*fresh, CoreFixture::hello_for("rig-1", new_boot));
  }
};

TEST_CASE("hello collision: the old connection is probed and the newcomer waits, whatever the boot_id") {
  for (const bool newer : {true, false}) {
    CAPTURE(newer);
    Collision c;
    const std::string first = uuid_v7().to_string();
    const std::string second = uuid_v7().to_string();
    c.start(newer ? first : second, newer ? second : first);
    CHECK_FALSE(c.f.transport.close_of(*c.fresh));
    CHECK_FALSE(c.f.transport.close_of(*c.old));
    CHECK(c.fresh->phase == SessionPhase::awaiting_hello);  // no WELCOME yet
    const std::vector<Outgoing> probe = c.f.frames(*c.old);
    REQUIRE(probe.size() == 1);
    CHECK(probe[0].kind == OutboundKind::ping);
    // The old one answers: alive, so the newcomer is refused 4409 and nothing changes.
    c.f.core->on_pong(*c.old);
    REQUIRE(c.f.transport.close_of(*c.fresh));
    CHECK(c.f.transport.close_of(*c.fresh)->code == CloseCode::duplicate_connection);
    CHECK_FALSE(c.f.transport.close_of(*c.old));
    CHECK(c.f.core->rig("rig-1")->boot_id == (newer ? first : second));
  }
}

TEST_CASE("hello collision: no pong within the pong timeout supersedes the old one (4410), the newcomer is admitted") {
  FleetSettings settings;
  settings.keepalive.pong_timeout_ms = 300;
  settings.hello_timeout_ms = 200;  // shorter than the probe: a waiting HELLO is not a missing one
  Collision c(settings);
  const std::string old_boot = uuid_v7().to_string();
  const std::string new_boot = uuid_v7().to_string();
  c.start(old_boot, new_boot);
  c.f.clock.advance(299);
  for (int i = 0; i < 50; ++i) c.f.core->sweep();
  CHECK_FALSE(c.f.transport.close_of(*c.fresh));
  CHECK_FALSE(c.f.transport.close_of(*c.old));
  c.f.clock.advance(1);
  c.f.core->sweep();
  REQUIRE(c.f.transport.close_of(*c.old));
  CHECK(c.f.transport.close_of(*c.old)->code == CloseCode::superseded);
  CHECK_FALSE(c.f.transport.close_of(*c.fresh));
  CHECK(c.fresh->phase == SessionPhase::live);
  CHECK(c.f.core->rig("rig-1")->boot_id == new_boot);
  c.f.closed(*c.old);  // the old socket going away must not take the new registration with it
  CHECK(c.f.core->rig("rig-1")->boot_id == new_boot);
  // A late pong from the old socket changes nothing.
  CHECK(c.f.core->rig("rig-1")->state == "connected");
}

TEST_CASE("hello collision: the old connection closing (a reboot: its peer is gone) lets the newcomer in at once") {
  Collision c;
  const std::string new_boot = uuid_v7().to_string();
  c.start(uuid_v7().to_string(), new_boot);
  CHECK_FALSE(c.f.transport.close_of(*c.fresh));
  c.f.closed(*c.old);  // the probe met a reset: the socket is gone
  CHECK_FALSE(c.f.transport.close_of(*c.fresh));
  CHECK(c.fresh->phase == SessionPhase::live);
  CHECK(c.f.core->rig("rig-1")->boot_id == new_boot);
}

TEST_CASE("hello collision: an old connection that already missed a pong is superseded at once") {
  Collision c;
  RigSession& old = c.f.live_rig("rig-1");
  old.keepalive.missed = 1;
  RigSession& fresh = c.f.connect();
  c.f.send(fresh, CoreFixture::hello_for("rig-1", uuid_v7().to_string()));
  REQUIRE(c.f.transport.close_of(old));
  CHECK(c.f.transport.close_of(old)->code == CloseCode::superseded);
  CHECK(fresh.phase == SessionPhase::live);
}

TEST_CASE("hello collision: one newcomer at a time; a newcomer that leaves frees the old one from the verdict") {
  Collision c;
  c.start(uuid_v7().to_string(), uuid_v7().to_string());
  RigSession& third = c.f.connect();
  c.f.send(third, CoreFixture::hello_for("rig-1", uuid_v7().to_string()));
  REQUIRE(c.f.transport.close_of(third));
  CHECK(c.f.transport.close_of(third)->code == CloseCode::duplicate_connection);
  // The waiting newcomer goes away: the probe's timeout does not close the old one.
  c.f.closed(*c.fresh);
  c.f.clock.advance(c.f.settings.keepalive.pong_timeout_ms);
  c.f.core->sweep();
  const bool superseded = c.f.transport.close_of(*c.old) && c.f.transport.close_of(*c.old)->code == CloseCode::superseded;
  CHECK_FALSE(superseded);
}

TEST_CASE("hello: the WELCOME is written at once, before what waits for the rig") {
  CoreFixture f;
  RigSession& s = f.connect();
  CHECK(f.transport.direct.empty());
  f.send(s, CoreFixture::hello_for("rig-1", uuid_v7().to_string()));
  REQUIRE(f.transport.direct.size() == 1);
  CHECK(f.transport.direct[0] == &s);
  const std::optional<Outgoing> w = f.core->next_frame(s);
  REQUIRE(w);
  CHECK(w->kind == OutboundKind::welcome);
}

TEST_CASE("hello: no HELLO within the hello timeout is closed 4008") {
  FleetSettings settings;
  settings.hello_timeout_ms = 200;
  CoreFixture f(settings);
  RigSession& s = f.connect();
  f.clock.advance(199);
  for (int i = 0; i < 100; ++i) f.core->sweep();
  CHECK_FALSE(f.transport.close_of(s));
  f.clock.advance(1);
  for (int i = 0; i < 100; ++i) f.core->sweep();
  REQUIRE(f.transport.close_of(s));
  CHECK(f.transport.close_of(s)->code == CloseCode::hello_timeout);
}

TEST_CASE("commands: seq from 1 per connection, written in seq order, most urgent frame first") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const std::size_t direct_before = f.transport.direct.size();  // the WELCOME's
  CHECK(f.enqueue_ok("rig-1").seq == 1);
  CHECK(f.enqueue_ok("rig-1").seq == 2);
  const EnqueueOk third = f.enqueue_ok("rig-1");
  CHECK(third.seq == 3);
  CHECK(f.transport.direct.size() - direct_before == 3);  // a command is written at once when nothing is buffered
  std::vector<Outgoing> out = f.frames(s);
  REQUIRE(out.size() == 3);
  CHECK(seq_of(out[0]) == 1);
  CHECK(seq_of(out[1]) == 2);
  CHECK(seq_of(out[2]) == 3);
  CHECK(std::get<msg::Command>(out[2].message).cmd_id == third.cmd_id);
  // A ping and a cancel jump the queue; commands keep their order.
  const EnqueueOk fourth = f.enqueue_ok("rig-1");
  const EnqueueOk fifth = f.enqueue_ok("rig-1");
  s.outbound.ping = true;
  REQUIRE(f.core->cancel(third.cmd_id) == CancelOutcome::requested);
  out = f.frames(s);
  REQUIRE(out.size() == 4);
  CHECK(out[0].kind == OutboundKind::ping);
  CHECK(out[1].kind == OutboundKind::cancel);
  CHECK(std::get<msg::Cancel>(out[1].message).cmd_id == third.cmd_id);
  CHECK(std::get<msg::Command>(out[2].message).cmd_id == fourth.cmd_id);
  CHECK(seq_of(out[2]) == 4);
  CHECK(std::get<msg::Command>(out[3].message).cmd_id == fifth.cmd_id);
  CHECK_FALSE(f.core->has_more_to_write(s));
}

TEST_CASE("commands: nothing is written before the store has it") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const std::size_t direct_before = f.transport.direct.size();  // the WELCOME's
  EnqueueOutcome o = f.core->enqueue(CoreFixture::request("rig-1"));
  REQUIRE(std::holds_alternative<EnqueueOk>(o));
  const std::string id = std::get<EnqueueOk>(o).cmd_id;
  CHECK(f.frames(s).empty());
  CHECK_FALSE(f.core->has_more_to_write(s));
  CHECK_FALSE(f.store->stored(id).has_value());
  REQUIRE(f.core->persist());
  CHECK(f.store->stored(id)->state == CommandState::queued);
  CHECK(f.transport.direct.size() - direct_before == 1);  // written at once once recorded
  const std::vector<msg::Command> cmds = CoreFixture::commands_in(f.frames(s));
  REQUIRE(cmds.size() == 1);
  CHECK(cmds[0].cmd_id == id);
}

TEST_CASE("commands: queued -> sent -> acked -> running -> succeeded, each step timed") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const EnqueueOk ok = f.enqueue_ok("rig-1", "dmesg", {{"lines", "5"}});
  CHECK(f.core->command(ok.cmd_id)->state == CommandState::queued);
  f.clock.advance(5);
  const std::vector<Outgoing> out = f.frames(s);
  REQUIRE(out.size() == 1);
  CHECK(std::get<msg::Command>(out[0].message).args.at("lines") == "5");
  CHECK(f.core->command(ok.cmd_id)->state == CommandState::sent);
  CHECK(f.core->command(ok.cmd_id)->sent_at_ms == f.clock.wall);
  f.clock.advance(5);
  f.send(s, msg::Ack{ok.seq, ok.cmd_id, false});
  CHECK(f.core->command(ok.cmd_id)->state == CommandState::acked);
  CHECK(f.core->command(ok.cmd_id)->acked_at_ms == f.clock.wall);
  CHECK(f.core->rig("rig-1")->last_ack_seq == ok.seq);
  CHECK(f.core->rig("rig-1")->unacked.empty());
  f.send(s, msg::OutputChunk{ok.cmd_id, 0, Bytes{'h', 'i', '\n'}});
  CHECK(f.core->command(ok.cmd_id)->state == CommandState::running);
  CHECK(f.core->command(ok.cmd_id)->running_at_ms == f.clock.wall);
  CHECK(f.core->command(ok.cmd_id)->streamed_output == "hi\n");
  f.clock.advance(5);
  msg::Result r;
  r.cmd_id = ok.cmd_id;
  r.status = msg::Status::ok;
  r.output = Bytes{'h', 'i', '\n'};
  f.send(s, r);
  const CommandView v = *f.core->command(ok.cmd_id);
  CHECK(v.state == CommandState::succeeded);
  CHECK(v.finished_at_ms == f.clock.wall);
  CHECK(v.attempts == 1);
  REQUIRE(v.result);
  CHECK(v.result->status == msg::Status::ok);
  CHECK(f.log.types() == std::vector<EventType>{EventType::rig_connected, EventType::command_acked,
                                                EventType::command_running, EventType::command_output,
                                                EventType::command_done});
  CHECK(f.log.events.back().detail == "succeeded");
  // Every step is in the store (committed at the next interval).
  f.clock.advance(f.settings.store_commit_interval_ms);
  f.core->commit_if_due();
  const std::optional<CommandView> stored = f.store->stored(ok.cmd_id);
  REQUIRE(stored);
  CHECK(stored->state == CommandState::succeeded);
  CHECK(stored->acked_at_ms == v.acked_at_ms);
  REQUIRE(stored->result);
  CHECK(stored->result->output == Bytes{'h', 'i', '\n'});
}

TEST_CASE("commands: each RESULT status is its final state") {
  struct Case {
    msg::Status status;
    bool interrupted;
    CommandState state;
  };
  for (const Case c : {Case{msg::Status::ok, false, CommandState::succeeded},
                       Case{msg::Status::failed, false, CommandState::failed},
                       Case{msg::Status::failed, true, CommandState::interrupted},
                       Case{msg::Status::cancelled, false, CommandState::cancelled},
                       Case{msg::Status::timeout, false, CommandState::timed_out},
                       Case{msg::Status::scheduled, false, CommandState::succeeded},
                       Case{msg::Status::duplicate, false, CommandState::failed}}) {
    CoreFixture f;
    RigSession& s = f.live_rig("rig-1");
    const EnqueueOk ok = f.enqueue_ok("rig-1");
    f.frames(s);
    f.send(s, msg::Ack{ok.seq, ok.cmd_id, false});
    msg::Result r = CoreFixture::result_of(ok.cmd_id, c.status);
    r.interrupted = c.interrupted;
    f.send(s, r);
    CHECK(f.state_of(ok.cmd_id) == c.state);
  }
}

TEST_CASE("commands: a NACK ends the command rejected; an answer for an unknown seq changes nothing") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const EnqueueOk ok = f.enqueue_ok("rig-1");
  f.frames(s);
  f.send(s, msg::Ack{99, ok.cmd_id, false});
  CHECK(f.core->command(ok.cmd_id)->state == CommandState::sent);
  f.send(s, msg::Nack{ok.seq, ok.cmd_id, msg::NackReason::not_allowed, "policy", 0});
  const CommandView v = *f.core->command(ok.cmd_id);
  CHECK(v.state == CommandState::rejected);
  CHECK(v.detail == "not_allowed: policy");
  REQUIRE(v.nack);
  CHECK(v.nack->reason == msg::NackReason::not_allowed);
  CHECK(f.log.events.back().type == EventType::command_done);
  CHECK(f.log.events.back().detail == "rejected");
  CHECK(s.outbox.size() == 0);
}

TEST_CASE("commands: a seq_gap NACK leaves the command pending; it goes again on the next connection") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const std::string boot = s.boot_id.to_string();
  const EnqueueOk first = f.enqueue_ok("rig-1");
  const EnqueueOk second = f.enqueue_ok("rig-1");
  f.frames(s);
  for (const EnqueueOk* ok : {&first, &second})
    f.send(s, msg::Nack{ok->seq, ok->cmd_id, msg::NackReason::seq_gap, "expected seq 7", 7});
  CHECK(f.state_of(first.cmd_id) == CommandState::sent);
  CHECK(f.state_of(second.cmd_id) == CommandState::sent);
  CHECK(s.outbox.size() == 0);
  f.closed(s);  // the rig closes 4412 and reconnects
  RigSession& back = f.live_rig("rig-1", boot);
  const auto again = CoreFixture::commands_in(f.frames(back));
  REQUIRE(again.size() == 2);
  CHECK(again[0].cmd_id == first.cmd_id);
  CHECK(again[1].cmd_id == second.cmd_id);
  CHECK(again[0].seq == 1);
}

TEST_CASE("commands: a RESULT without an ACK settles the command (also after OUTPUT made it running)") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const EnqueueOk ok = f.enqueue_ok("rig-1");
  f.frames(s);
  f.send(s, msg::OutputChunk{ok.cmd_id, 0, Bytes{'x'}});
  CHECK(f.core->command(ok.cmd_id)->state == CommandState::running);
  msg::Result r;
  r.cmd_id = ok.cmd_id;
  f.send(s, r);
  CHECK(f.core->command(ok.cmd_id)->state == CommandState::succeeded);
  CHECK(s.outbox.size() == 0);
  f.core->force_reconnect("rig-1");
  f.closed(s);
  RigSession& again = f.live_rig("rig-1");
  CHECK(f.frames(again).empty());  // finished: nothing to send again
  CHECK(f.core->command(ok.cmd_id)->state == CommandState::succeeded);
}

TEST_CASE("commands: a RESULT of another rig's command is refused") {
  CoreFixture f;
  RigSession& a = f.live_rig("rig-a");
  RigSession& b = f.live_rig("rig-b");
  const EnqueueOk ok = f.enqueue_ok("rig-a");
  f.frames(a);
  msg::Result r;
  r.cmd_id = ok.cmd_id;
  f.send(b, r);
  CHECK(f.core->command(ok.cmd_id)->state == CommandState::sent);
}

TEST_CASE("commands: the connection ends before the ACK -> sent again on the next one, same cmd_id, new seq") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const EnqueueOk first = f.enqueue_ok("rig-1");
  const EnqueueOk second = f.enqueue_ok("rig-1");
  f.frames(s);
  f.send(s, msg::Ack{first.seq, first.cmd_id, false});  // the first one is the rig's now
  s.outbound = {};
  const EnqueueOk third = f.enqueue_ok("rig-1");          // in the outbox, not written yet
  f.closed(s);
  CHECK(f.state_of(second.cmd_id) == CommandState::sent);
  CHECK(f.state_of(third.cmd_id) == CommandState::queued);
  CHECK(f.core->rig("rig-1")->state == "offline");
  const std::vector<EventType> types = f.log.types();
  CHECK(std::count(types.begin(), types.end(), EventType::rig_disconnected) == 1);
  CHECK(std::count(types.begin(), types.end(), EventType::command_done) == 0);
  // The same agent process again: the unacknowledged ones, in order, with new seqs,
  // and the acknowledged one too (its result may have been lost with the broker).
  RigSession& again = f.live_rig("rig-1", s.boot_id.to_string());
  const std::vector<msg::Command> cmds = CoreFixture::commands_in(f.frames(again));
  REQUIRE(cmds.size() == 3);
  CHECK(cmds[0].cmd_id == first.cmd_id);
  CHECK(cmds[1].cmd_id == second.cmd_id);
  CHECK(cmds[2].cmd_id == third.cmd_id);
  CHECK(cmds[0].seq == 1);
  CHECK(cmds[1].seq == 2);
  CHECK(cmds[2].seq == 3);
  CHECK(f.core->command(second.cmd_id)->attempts == 2);
}

TEST_CASE("enqueue: a full outbox is refused rig_unresponsive with the contract's detail") {
  FleetSettings settings;
  settings.outbox_capacity = 2;
  CoreFixture f(settings);
  RigSession& s = f.live_rig("rig-1");
  const EnqueueOk first = f.enqueue_ok("rig-1");
  f.enqueue_ok("rig-1");
  f.frames(s);
  f.send(s, msg::Ack{first.seq, first.cmd_id, false});
  f.enqueue_ok("rig-1");
  f.clock.advance(47'000);
  EnqueueOutcome o = f.core->enqueue(CoreFixture::request("rig-1"));
  REQUIRE(std::holds_alternative<EnqueueFailure>(o));
  const auto& failure = std::get<EnqueueFailure>(o);
  CHECK(failure.error == EnqueueError::rig_unresponsive);
  CHECK(failure.detail == "outbox full (2/2), oldest queued cmd age 47s");
  CHECK(failure.last_ack_seq == first.seq);
  CHECK(failure.last_ack_at_ms.has_value());
  CHECK(failure.suggested_action == "force_reconnect");
}

TEST_CASE("enqueue: unknown rig, unsupported kind, draining, and the SDK's own argument rules") {
  CoreFixture f;
  f.live_rig("rig-1");
  auto error_of = [&](std::string rig, std::string kind, StringMap args = {}) {
    EnqueueOutcome o = f.core->enqueue(CoreFixture::request(rig, kind, std::move(args)));
    REQUIRE(std::holds_alternative<EnqueueFailure>(o));
    return std::get<EnqueueFailure>(o);
  };
  CHECK(error_of("rig-2", "dmesg").error == EnqueueError::unknown_rig);
  CHECK(error_of("rig-1", "suite").error == EnqueueError::unsupported_kind);
  CHECK(error_of("rig-1", "").error == EnqueueError::bad_request);
  CHECK(error_of("rig-1", "bad kind").error == EnqueueError::bad_request);
  CHECK(error_of("rig-1", "dmesg", {{"", "x"}}).error == EnqueueError::bad_request);
  CHECK(error_of("rig-1", "dmesg", {{"k", std::string(kMaxMapValueBytes + 1, 'x')}}).error ==
        EnqueueError::bad_request);
  StringMap many;
  for (std::size_t i = 0; i <= kMaxMapEntries; ++i) many["k" + std::to_string(i)] = "v";
  CHECK(error_of("rig-1", "dmesg", many).error == EnqueueError::bad_request);
  // Values up to the SDK's limit pass (the limit is per value, as the rig decodes them).
  CHECK(std::holds_alternative<EnqueueOk>(
      f.core->enqueue(CoreFixture::request("rig-1", "dmesg", {{"k", std::string(kMaxMapValueBytes, 'x')}}))));
  f.core->start_drain(std::chrono::milliseconds(100));
  CHECK(error_of("rig-1", "dmesg").error == EnqueueError::draining);
}

TEST_CASE("keepalive: pings on the interval, 4002 after max_missed pongs in a row; a pong resets the count") {
  FleetSettings settings;
  settings.keepalive = {100, 50, 3};
  CoreFixture f(settings);
  RigSession& s = f.live_rig("rig-1");
  auto tick = [&](std::uint32_t ms) {
    for (std::uint32_t t = 0; t < ms; t += 5) {
      f.clock.advance(5);
      f.core->sweep();
    }
  };
  tick(100);
  std::vector<Outgoing> out = f.frames(s);
  REQUIRE(out.size() == 1);
  CHECK(out[0].kind == OutboundKind::ping);
  f.core->on_pong(s);
  CHECK(s.keepalive.missed == 0);
  tick(160);  // the next ping, unanswered past its timeout
  CHECK(s.keepalive.missed == 1);
  CHECK(f.core->rig("rig-1")->state == "unresponsive");
  f.core->on_pong(s);
  CHECK(f.core->rig("rig-1")->state == "connected");
  tick(600);
  REQUIRE(f.transport.close_of(s));
  CHECK(f.transport.close_of(s)->code == CloseCode::keepalive_timeout);
  CHECK(f.core->rig("rig-1")->state == "offline");
}

TEST_CASE("drain: GOAWAY after the commands, delays within the window; hello-less connections closed 1001") {
  FleetSettings settings;
  settings.drain_deadline_ms = 5000;
  CoreFixture f(settings);
  RigSession& a = f.live_rig("rig-a");
  RigSession& b = f.live_rig("rig-b");
  RigSession& pending = f.connect();
  const EnqueueOk ok = f.enqueue_ok("rig-a");
  f.core->start_drain(std::chrono::milliseconds(1000));
  CHECK(f.transport.stopped_accepting);
  CHECK(f.core->draining());
  CHECK_FALSE(f.core->ready());
  REQUIRE(f.transport.close_of(pending));
  CHECK(f.transport.close_of(pending)->code == CloseCode::going_away);
  std::vector<Outgoing> out = f.frames(a);
  REQUIRE(out.size() == 2);
  CHECK(std::get<msg::Command>(out[0].message).cmd_id == ok.cmd_id);
  CHECK(out[1].kind == OutboundKind::goaway);
  CHECK(std::get<msg::Goaway>(out[1].message).reconnect_after_ms <= 1000);
  out = f.frames(b);
  REQUIRE(out.size() == 1);
  CHECK(out[0].kind == OutboundKind::goaway);
  CHECK(f.core->rig("rig-a")->state == "draining");
  CHECK(f.log.events.back().type == EventType::drain_started);
  // A connection arriving now is sent away at once.
  RigSession& late = f.connect();
  REQUIRE(f.transport.close_of(late));
  CHECK(f.transport.close_of(late)->code == CloseCode::going_away);
  f.closed(pending);
  f.closed(late);
  f.closed(a);
  CHECK(f.drained == 0);
  f.closed(b);
  CHECK(f.drained == 1);
}

TEST_CASE("drain: at the deadline the rigs left are closed 1001, then it ends") {
  FleetSettings settings;
  settings.drain_deadline_ms = 2000;
  CoreFixture f(settings);
  RigSession& a = f.live_rig("rig-a");
  RigSession& b = f.live_rig("rig-b");
  f.core->start_drain(std::chrono::milliseconds(500));
  f.clock.advance(1999);
  f.core->sweep();
  CHECK(f.drained == 0);
  CHECK_FALSE(f.transport.close_of(a));
  f.clock.advance(1);
  f.core->sweep();
  // A close frame for each, not a socket that vanishes with the process (1006).
  REQUIRE(f.transport.close_of(a));
  CHECK(f.transport.close_of(a)->code == CloseCode::going_away);
  REQUIRE(f.transport.close_of(b));
  CHECK(f.transport.close_of(b)->code == CloseCode::going_away);
  CHECK(f.drained == 0);  // the closes get a moment to leave

  SUBCASE("both closes done: it ends at once") {
    f.closed(a);
    CHECK(f.drained == 0);
    f.closed(b);
    CHECK(f.drained == 1);
  }
  SUBCASE("a rig that never lets its close finish: it ends after the flush time anyway") {
    f.closed(a);
    f.clock.advance(kDrainCloseFlushMs - 1);
    f.core->sweep();
    CHECK(f.drained == 0);
    f.clock.advance(1);
    f.core->sweep();
    CHECK(f.drained == 1);
  }
}

TEST_CASE("drain: the deadline follows the drain's own window") {
  // 0 (the default): each drain's window + 5 s, also a window asked for through the API.
  CHECK(drain_deadline(0, 1000) == 6000);
  CHECK(drain_deadline(0, 60000) == 65000);
  // Configured: used as given, but never before the window + 1 s.
  CHECK(drain_deadline(15000, 1000) == 15000);
  CHECK(drain_deadline(15000, 30000) == 31000);
  CHECK(drain_deadline(0, UINT32_MAX) == UINT32_MAX);

  FleetSettings settings;  // drain_deadline_ms 0
  CoreFixture f(settings);
  RigSession& a = f.live_rig("rig-a");
  f.core->start_drain(std::chrono::milliseconds(1000));
  f.clock.advance(5999);
  f.core->sweep();
  CHECK_FALSE(f.transport.close_of(a));
  f.clock.advance(1);
  f.core->sweep();
  REQUIRE(f.transport.close_of(a));
  CHECK(f.transport.close_of(a)->code == CloseCode::going_away);
}

TEST_CASE("frame errors: each kind of bad frame has its close code") {
  SUBCASE("undecodable bytes: 4400") {
    CoreFixture f;
    RigSession& s = f.live_rig("rig-1");
    f.send_bytes(s, Bytes{0xc1, 0x00});
    REQUIRE(f.transport.close_of(s));
    CHECK(f.transport.close_of(s)->code == CloseCode::malformed);
  }
  SUBCASE("an unknown type: ignored (lenient), 4422 (strict)") {
    CoreFixture lenient;
    RigSession& s = lenient.live_rig("rig-1");
    lenient.send_bytes(s, unknown_type_frame());
    CHECK_FALSE(lenient.transport.close_of(s));
    FleetSettings settings;
    settings.strictness = Strictness::strict;
    CoreFixture strict(settings);
    RigSession& t = strict.live_rig("rig-1");
    strict.send_bytes(t, unknown_type_frame());
    REQUIRE(strict.transport.close_of(t));
    CHECK(strict.transport.close_of(t)->code == CloseCode::unknown_type);
  }
  SUBCASE("an unknown type before HELLO: 4400") {
    CoreFixture f;
    RigSession& s = f.connect();
    f.send_bytes(s, unknown_type_frame());
    REQUIRE(f.transport.close_of(s));
    CHECK(f.transport.close_of(s)->code == CloseCode::malformed);
  }
  SUBCASE("another protocol version: 4426") {
    CoreFixture f;
    RigSession& s = f.connect();
    f.send_bytes(s, version_2_frame());
    REQUIRE(f.transport.close_of(s));
    CHECK(f.transport.close_of(s)->code == CloseCode::unsupported_version);
  }
  SUBCASE("a frame over max_frame_bytes, in pieces: 1009") {
    FleetSettings settings;
    settings.max_frame_bytes = 1024;
    CoreFixture f(settings);
    RigSession& s = f.live_rig("rig-1");
    const Bytes piece(600, 0x00);
    f.core->on_data(s, piece, 0, false);  // a first WebSocket fragment
    CHECK_FALSE(f.transport.close_of(s));
    f.core->on_data(s, piece, 0, true);
    REQUIRE(f.transport.close_of(s));
    CHECK(f.transport.close_of(s)->code == CloseCode::message_too_big);
  }
  SUBCASE("a frame in pieces within the limit is reassembled") {
    CoreFixture f;
    RigSession& s = f.live_rig("rig-1");
    const EnqueueOk ok = f.enqueue_ok("rig-1");
    f.frames(s);
    const Bytes ack = encode(msg::Ack{ok.seq, ok.cmd_id, false});
    const std::size_t half = ack.size() / 2;
    f.core->on_data(s, std::span<const std::uint8_t>(ack.data(), half), ack.size() - half, false);
    CHECK(f.core->command(ok.cmd_id)->state == CommandState::sent);
    f.core->on_data(s, std::span<const std::uint8_t>(ack.data() + half, ack.size() - half), 0, true);
    CHECK(f.core->command(ok.cmd_id)->state == CommandState::acked);
  }
  SUBCASE("a first frame that is not HELLO: 4400") {
    CoreFixture f;
    RigSession& s = f.connect();
    f.send(s, msg::Event{"boot", {}, 0});
    REQUIRE(f.transport.close_of(s));
    CHECK(f.transport.close_of(s)->code == CloseCode::malformed);
    CHECK(f.transport.close_of(s)->reason == "expected hello");
  }
  SUBCASE("a frame only brokers send: 4400") {
    CoreFixture f;
    RigSession& s = f.live_rig("rig-1");
    f.send(s, msg::Goaway{"no", 0});
    REQUIRE(f.transport.close_of(s));
    CHECK(f.transport.close_of(s)->code == CloseCode::malformed);
    CHECK(f.transport.close_of(s)->reason == "unexpected goaway");
  }
  SUBCASE("over the inbound rate: answers pause reading, anything else is a flood (4429)") {
    FleetSettings settings;
    settings.rig_rate = 1;
    settings.rig_burst = 2;
    CoreFixture f(settings);
    RigSession& s = f.live_rig("rig-1");  // the HELLO took one token
    const EnqueueOk a = f.enqueue_ok("rig-1");
    const EnqueueOk b = f.enqueue_ok("rig-1");
    f.frames(s);
    f.send(s, msg::Ack{a.seq, a.cmd_id, false});
    f.send(s, msg::Ack{b.seq, b.cmd_id, false});  // over the bucket: still accepted, reading paused
    CHECK(f.core->command(b.cmd_id)->state == CommandState::acked);
    CHECK(f.transport.paused.size() == 1);
    CHECK(f.core->has_paused());
    f.clock.advance(1000);
    CHECK(f.core->resume_paused() == 1);
    CHECK(f.transport.resumed.size() == 1);
    f.send(s, msg::Event{"chatter", {}, 0});
    f.send(s, msg::Event{"chatter", {}, 0});
    REQUIRE(f.transport.close_of(s));
    CHECK(f.transport.close_of(s)->code == CloseCode::rate_limited);
  }
}

TEST_CASE("frame errors: input after a close was asked for is ignored") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const EnqueueOk ok = f.enqueue_ok("rig-1");
  f.frames(s);
  f.core->force_reconnect("rig-1");
  REQUIRE(f.transport.close_of(s));
  CHECK(f.transport.close_of(s)->code == CloseCode::forced_reconnect);
  f.send(s, msg::Ack{ok.seq, ok.cmd_id, false});
  CHECK(f.core->command(ok.cmd_id)->state == CommandState::sent);  // waits for the next connection
  CHECK_FALSE(f.core->next_frame(s).has_value());
}

TEST_CASE("cancel: CANCEL for a command at its rig, at most once; finished ones are not cancelled") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const EnqueueOk ok = f.enqueue_ok("rig-1");
  f.frames(s);
  CHECK(f.core->cancel(uuid_v7().to_string()) == CancelOutcome::unknown);
  CHECK(f.core->cancel(ok.cmd_id) == CancelOutcome::requested);
  CHECK(f.core->cancel(ok.cmd_id) == CancelOutcome::pending);
  std::vector<Outgoing> out = f.frames(s);
  REQUIRE(out.size() == 1);
  CHECK(out[0].kind == OutboundKind::cancel);
  f.send(s, msg::Ack{ok.seq, ok.cmd_id, false});
  f.send(s, CoreFixture::result_of(ok.cmd_id, msg::Status::cancelled));
  CHECK(f.state_of(ok.cmd_id) == CommandState::cancelled);
  CHECK(f.core->cancel(ok.cmd_id) == CancelOutcome::finished);
}

TEST_CASE("events: nobody listening, nothing is built; a command subscription sees only its command") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const EnqueueOk a = f.enqueue_ok("rig-1");
  const EnqueueOk b = f.enqueue_ok("rig-1");
  f.frames(s);
  std::vector<std::string> seen;
  f.core->events().subscribe_command(b.cmd_id, [&](const FleetEvent& e) { seen.push_back(e.cmd_id); });
  f.send(s, msg::Ack{a.seq, a.cmd_id, false});
  f.send(s, msg::Ack{b.seq, b.cmd_id, true});
  CHECK(seen == std::vector<std::string>{b.cmd_id});
  CHECK(f.log.events.back().detail == "duplicate");
  CHECK(f.core->command(b.cmd_id)->duplicate);
}

TEST_CASE("commands: each OUTPUT chunk's new bytes are a command_output event at their offset, once") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const EnqueueOk ok = f.enqueue_ok("rig-1", "dmesg", {});
  (void)f.frames(s);
  f.send(s, msg::Ack{ok.seq, ok.cmd_id, false});
  f.log.events.clear();
  auto outputs = [&] {
    std::vector<FleetEvent> out;
    for (const FleetEvent& e : f.log.events)
      if (e.type == EventType::command_output) out.push_back(e);
    return out;
  };
  f.send(s, msg::OutputChunk{ok.cmd_id, 0, Bytes{'a', 'b', 'c'}});
  f.send(s, msg::OutputChunk{ok.cmd_id, 3, Bytes{'d', 'e'}});
  // Sent again after a reconnect, overlapping: only its new byte.
  f.send(s, msg::OutputChunk{ok.cmd_id, 2, Bytes{'c', 'd', 'e', 'f'}});
  // All old: nothing.
  f.send(s, msg::OutputChunk{ok.cmd_id, 0, Bytes{'a', 'b'}});
  // Past a gap: at its own offset.
  f.send(s, msg::OutputChunk{ok.cmd_id, 10, Bytes{'z'}});
  const std::vector<FleetEvent> got = outputs();
  REQUIRE(got.size() == 4);
  CHECK((got[0].offset == 0 && got[0].detail == "abc"));
  CHECK((got[1].offset == 3 && got[1].detail == "de"));
  CHECK((got[2].offset == 5 && got[2].detail == "f"));
  CHECK((got[3].offset == 10 && got[3].detail == "z"));
  for (const FleetEvent& e : got) {
    CHECK(e.rig_id == "rig-1");
    CHECK(e.cmd_id == ok.cmd_id);
  }
}

TEST_CASE("health: a rig whose oldest unacknowledged command waits too long is unresponsive, and says why") {
  FleetSettings settings;
  settings.unresponsive_after_ms = 5000;
  settings.outbox_capacity = 4;
  CoreFixture f(settings);
  RigSession& s = f.live_rig("rig-1");
  CHECK(f.core->rig("rig-1")->state == "connected");
  CHECK(f.core->rig("rig-1")->unresponsive_because.empty());
  const EnqueueOk first = f.enqueue_ok("rig-1");
  f.enqueue_ok("rig-1");
  (void)f.frames(s);  // both written; the rig reads nothing (frozen)
  f.clock.advance(5000);
  CHECK(f.core->rig("rig-1")->state == "connected");  // at the threshold, not past it
  f.clock.advance(1);
  std::optional<RigView> v = f.core->rig("rig-1");
  CHECK(v->state == "unresponsive");
  CHECK(v->unresponsive_because.find("oldest unacknowledged command has waited 5 s") != std::string::npos);
  // The depth shown is the one a POST is refused at: sent-unacknowledged ones count.
  CHECK(v->outbox_depth == 2);
  CHECK(v->unsent == 0);
  CHECK(v->unacked.size() == 2);
  // Filtered as such (what GET /v1/rigs?state=unresponsive and fleetctl read).
  f.send(s, msg::Ack{first.seq, first.cmd_id, false});
  CHECK(f.core->rig("rig-1")->state == "unresponsive");  // the second is still old
  f.send(s, msg::Ack{first.seq + 1, f.core->rig("rig-1")->unacked.front().cmd_id, false});
  v = f.core->rig("rig-1");
  CHECK(v->state == "connected");
  CHECK(v->outbox_depth == 0);
}

TEST_CASE("health: a full outbox shows as full, and the POST is refused at exactly that depth") {
  FleetSettings settings;
  settings.outbox_capacity = 3;
  CoreFixture f(settings);
  RigSession& s = f.live_rig("rig-1");
  for (int i = 0; i < 3; ++i) f.enqueue_ok("rig-1");
  (void)f.frames(s);
  const std::optional<RigView> v = f.core->rig("rig-1");
  CHECK(v->outbox_depth == v->outbox_capacity);
  const EnqueueOutcome o = f.core->enqueue(CoreFixture::request("rig-1"));
  REQUIRE(std::holds_alternative<EnqueueFailure>(o));
  CHECK(std::get<EnqueueFailure>(o).error == EnqueueError::rig_unresponsive);
}
