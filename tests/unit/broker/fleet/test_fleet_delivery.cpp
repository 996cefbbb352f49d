// The command record and at-least-once delivery, without sockets: commands
// held for offline rigs, redelivered after a restart, idempotent requests, the
// two deadlines, reboots confirmed by a new boot_id, interrupted commands,
// cancel, and two brokers sharing one store.
#include <doctest/doctest.h>

#include "fleet_core_fixture.hpp"

using namespace fleetlink;
using namespace fleetlink::broker;
using fleetlink::broker::testing::CoreFixture;

namespace {

void tick(CoreFixture& f, std::uint32_t ms, std::uint32_t step = 100) {
  for (std::uint32_t t = 0; t < ms; t += step) {
    f.clock.advance(step);
    f.core->sweep();
  }
}

std::vector<std::string> cancels_in(const std::vector<Outgoing>& frames) {
  std::vector<std::string> out;
  for (const Outgoing& o : frames)
    if (o.kind == OutboundKind::cancel) out.push_back(std::get<msg::Cancel>(o.message).cmd_id);
  return out;
}

}  // namespace

TEST_CASE("offline: a known rig's command is held and delivered on its WELCOME") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  f.core->force_reconnect("rig-1");
  f.closed(s);
  const RigView offline = *f.core->rig("rig-1");
  CHECK(offline.state == "offline");
  CHECK_FALSE(offline.connected);
  CHECK(offline.labels.at("lab") == "b2");
  const EnqueueOk held = f.enqueue_ok("rig-1");
  CHECK(held.held);
  CHECK(held.seq == 0);
  CHECK(f.core->rig("rig-1")->held == 1);
  f.clock.advance(30'000);
  RigSession& back = f.live_rig("rig-1");
  const std::vector<msg::Command> cmds = CoreFixture::commands_in(f.frames(back));
  REQUIRE(cmds.size() == 1);
  CHECK(cmds[0].cmd_id == held.cmd_id);
  CHECK(cmds[0].seq == 1);
  f.send(back, msg::Ack{1, held.cmd_id, false});
  f.send(back, CoreFixture::result_of(held.cmd_id));
  CHECK(f.state_of(held.cmd_id) == CommandState::succeeded);
}

TEST_CASE("offline: a never-seen rig is refused unknown_rig unless the request holds it") {
  CoreFixture f;
  CHECK(f.enqueue_refused(CoreFixture::request("rig-new")).error == EnqueueError::unknown_rig);
  CommandRequest r = CoreFixture::request("rig-new");
  r.hold = true;
  const EnqueueOk held = f.enqueue_ok(r);
  CHECK(held.held);
  RigSession& s = f.live_rig("rig-new");
  const std::vector<msg::Command> cmds = CoreFixture::commands_in(f.frames(s));
  REQUIRE(cmds.size() == 1);
  CHECK(cmds[0].cmd_id == held.cmd_id);
}

TEST_CASE("offline: the held queue is bounded, and refuses a kind the rig does not run") {
  FleetSettings settings;
  settings.outbox_capacity = 2;
  CoreFixture f(settings);
  RigSession& s = f.live_rig("rig-1");
  f.closed(s);
  f.enqueue_ok("rig-1");
  f.enqueue_ok("rig-1");
  CHECK(f.enqueue_refused(CoreFixture::request("rig-1")).error == EnqueueError::rig_unresponsive);
  CHECK(f.enqueue_refused(CoreFixture::request("rig-1", "suite")).error == EnqueueError::unsupported_kind);
}

TEST_CASE("restart: open commands come back from the store and go to their rig again; its results are taken") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const std::string boot = s.boot_id.to_string();
  const EnqueueOk acked = f.enqueue_ok("rig-1");
  const EnqueueOk sent = f.enqueue_ok("rig-1");
  f.frames(s);
  f.send(s, msg::Ack{acked.seq, acked.cmd_id, false});
  f.clock.advance(f.settings.store_commit_interval_ms);
  f.core->commit_if_due();
  f.crash_and_restart();
  CHECK(f.state_of(acked.cmd_id) == CommandState::acked);
  // Being written to a socket is not a step the store is told alone (its ACK carries
  // it): to the restarted broker it is queued, and sent again all the same.
  CHECK(f.state_of(sent.cmd_id) == CommandState::queued);
  CHECK(f.core->rig("rig-1")->state == "offline");  // the inventory survived
  // The same agent process reconnects: both are sent again; its dedup answers.
  RigSession& back = f.live_rig("rig-1", boot);
  const std::vector<msg::Command> cmds = CoreFixture::commands_in(f.frames(back));
  REQUIRE(cmds.size() == 2);
  CHECK(cmds[0].cmd_id == acked.cmd_id);
  CHECK(cmds[1].cmd_id == sent.cmd_id);
  f.send(back, msg::Ack{cmds[0].seq, acked.cmd_id, true});
  f.send(back, CoreFixture::result_of(acked.cmd_id));
  f.send(back, msg::Ack{cmds[1].seq, sent.cmd_id, false});
  f.send(back, CoreFixture::result_of(sent.cmd_id, msg::Status::failed));
  CHECK(f.state_of(acked.cmd_id) == CommandState::succeeded);
  CHECK(f.core->command(acked.cmd_id)->duplicate);
  CHECK(f.state_of(sent.cmd_id) == CommandState::failed);
}

TEST_CASE("restart: a RESULT for a command only the store knows is accepted (results are never dropped)") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const std::string boot = s.boot_id.to_string();
  const EnqueueOk ok = f.enqueue_ok("rig-1");
  f.frames(s);
  f.send(s, msg::Ack{ok.seq, ok.cmd_id, false});
  f.clock.advance(f.settings.store_commit_interval_ms);
  f.core->commit_if_due();
  f.crash_and_restart();
  RigSession& back = f.connect();
  f.send(back, CoreFixture::hello_for("rig-1", boot));
  f.send(back, CoreFixture::result_of(ok.cmd_id));  // from the agent's spool, before anything else
  CHECK(f.state_of(ok.cmd_id) == CommandState::succeeded);
}

TEST_CASE("store: a new command is committed by persist(), its steps by the interval commit, as one row") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const EnqueueOk first = f.enqueue_ok("rig-1");
  f.frames(s);
  f.send(s, msg::Ack{first.seq, first.cmd_id, false});
  f.send(s, CoreFixture::result_of(first.cmd_id));
  const int commits_before = f.store->shared()->commits;
  // The next command's creation is committed before it is sent; the first
  // one's steps are not in that commit.
  const EnqueueOk second = f.enqueue_ok("rig-1");
  CHECK(f.store->shared()->commits == commits_before + 1);
  CHECK(f.store->shared()->commands.at(second.cmd_id).state == CommandState::queued);
  CHECK(f.store->shared()->commands.at(first.cmd_id).state == CommandState::queued);
  CHECK(f.state_of(first.cmd_id) == CommandState::succeeded);  // memory knows
  // A listing by state sees the step before the store has committed it.
  CommandQuery q;
  q.rig_id = "rig-1";
  q.state = CommandState::succeeded;
  const std::vector<CommandView> done = f.core->list_commands(q);
  REQUIRE(done.size() == 1);
  CHECK(done[0].cmd_id == first.cmd_id);
  // The interval commit writes its ACK and RESULT as one row, with the result.
  f.core->commit_if_due();
  const CommandView& stored = f.store->shared()->commands.at(first.cmd_id);
  CHECK(stored.state == CommandState::succeeded);
  CHECK(stored.acked_at_ms.has_value());
  CHECK(stored.result.has_value());
}

TEST_CASE("store: a crash before the interval commit loses steps, not commands; the rig tells them again") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const std::string boot = s.boot_id.to_string();
  const EnqueueOk ok = f.enqueue_ok("rig-1");
  f.frames(s);
  f.send(s, msg::Ack{ok.seq, ok.cmd_id, false});
  f.send(s, CoreFixture::result_of(ok.cmd_id));
  f.crash_and_restart();
  CHECK(f.state_of(ok.cmd_id) == CommandState::queued);
  // The same agent process: sent again; its dedup answers with the stored RESULT.
  RigSession& back = f.live_rig("rig-1", boot);
  const std::vector<msg::Command> cmds = CoreFixture::commands_in(f.frames(back));
  REQUIRE(cmds.size() == 1);
  CHECK(cmds[0].cmd_id == ok.cmd_id);
  f.send(back, msg::Ack{cmds[0].seq, ok.cmd_id, true});
  f.send(back, CoreFixture::result_of(ok.cmd_id));
  CHECK(f.state_of(ok.cmd_id) == CommandState::succeeded);
}

TEST_CASE("store: a finished command the store has not got yet is not evicted before the interval commit") {
  FleetSettings settings;
  settings.command_history = 1;
  CoreFixture f(settings);
  RigSession& s = f.live_rig("rig-1");
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    const EnqueueOk ok = f.enqueue_ok("rig-1");
    f.frames(s);
    f.send(s, msg::Ack{ok.seq, ok.cmd_id, false});
    f.send(s, CoreFixture::result_of(ok.cmd_id));
    ids.push_back(ok.cmd_id);
  }
  f.core->commit_if_due();
  for (const std::string& id : ids) {
    CHECK(f.store->shared()->commands.at(id).state == CommandState::succeeded);
    CHECK(f.store->shared()->commands.at(id).result.has_value());
  }
}

TEST_CASE("store: a light interval's steps go in pieces, one commit each, in order; a later step joins behind") {
  CoreFixture f;
  f.store->slice_rows = 2;
  RigSession& s = f.live_rig("rig-1");
  std::vector<EnqueueOk> cmds;
  for (int i = 0; i < 5; ++i) cmds.push_back(f.enqueue_ok("rig-1"));
  f.frames(s);
  for (const EnqueueOk& c : cmds) f.send(s, msg::Ack{c.seq, c.cmd_id, false});
  auto stored_acked = [&] {
    std::vector<bool> out;
    for (const EnqueueOk& c : cmds) out.push_back(f.store->stored(c.cmd_id)->state == CommandState::acked);
    return out;
  };
  CHECK(stored_acked() == std::vector<bool>{false, false, false, false, false});
  const int commits = f.store->shared()->commits;
  CHECK(f.core->commit_if_due());  // steps are left
  CHECK(stored_acked() == std::vector<bool>{true, true, false, false, false});
  CHECK(f.core->commit_more());
  CHECK(stored_acked() == std::vector<bool>{true, true, true, true, false});
  // The first command ends meanwhile: its step goes behind the ones waiting.
  f.send(s, CoreFixture::result_of(cmds[0].cmd_id));
  CHECK_FALSE(f.core->commit_more());  // the last ACK and that end: nothing is left
  CHECK(stored_acked() == std::vector<bool>{false, true, true, true, true});
  CHECK(f.store->stored(cmds[0].cmd_id)->state == CommandState::succeeded);
  CHECK(f.store->stored(cmds[0].cmd_id)->result.has_value());
  CHECK(f.store->shared()->commits == commits + 3);
  CHECK_FALSE(f.core->commit_more());  // nothing to do: no commit
  CHECK(f.store->shared()->commits == commits + 3);
}

TEST_CASE("store: an interval of more steps than its pieces would take goes in one commit") {
  CoreFixture f;
  f.store->slice_rows = 1;  // at most 16 pieces of one: 17 steps go together
  std::vector<EnqueueOk> cmds;
  for (int r = 0; r < 17; ++r) {
    const std::string rig = "rig-" + std::to_string(r);
    RigSession& s = f.live_rig(rig);
    cmds.push_back(f.enqueue_ok(rig));
    f.frames(s);
    f.send(s, msg::Ack{cmds.back().seq, cmds.back().cmd_id, false});
  }
  const int commits = f.store->shared()->commits;
  CHECK_FALSE(f.core->commit_if_due());
  CHECK(f.store->shared()->commits == commits + 1);
  for (const EnqueueOk& c : cmds) CHECK(f.store->stored(c.cmd_id)->state == CommandState::acked);
}

TEST_CASE("store: what is left of a sliced interval is committed by a shutdown's flush") {
  CoreFixture f;
  f.store->slice_rows = 1;
  RigSession& s = f.live_rig("rig-1");
  const EnqueueOk a = f.enqueue_ok("rig-1");
  const EnqueueOk b = f.enqueue_ok("rig-1");
  f.frames(s);
  f.send(s, msg::Ack{a.seq, a.cmd_id, false});
  f.send(s, msg::Ack{b.seq, b.cmd_id, false});
  CHECK(f.core->commit_if_due());
  CHECK(f.store->stored(b.cmd_id)->state == CommandState::queued);
  f.core->flush_store();
  CHECK(f.store->stored(a.cmd_id)->state == CommandState::acked);
  CHECK(f.store->stored(b.cmd_id)->state == CommandState::acked);
}

TEST_CASE("store with a writer: a keyed command goes once its batch is durable, a plain one at once; answers wait") {
  CoreFixture f;
  f.store->manual = true;
  RigSession& s = f.live_rig("rig-1");
  CommandRequest keyed = CoreFixture::request("rig-1");
  keyed.idempotency_key = "nightly-7";
  const std::string held = std::get<EnqueueOk>(f.core->enqueue(keyed)).cmd_id;
  const std::uint64_t first = f.core->persist();
  std::vector<std::string> answered;
  f.core->when_recorded(first, [&](const Expected<void>& kept) { answered.push_back(kept ? "ok" : "failed"); });
  CHECK(CoreFixture::commands_in(f.frames(s)).empty());  // not before its record
  CHECK(answered.empty());
  // On another rig, one no client named goes while its record is written.
  RigSession& other = f.live_rig("rig-2");
  const std::string plain = std::get<EnqueueOk>(f.core->enqueue(CoreFixture::request("rig-2"))).cmd_id;
  const std::uint64_t second = f.core->persist();
  CHECK(second == first + 1);
  std::vector<msg::Command> cmds = CoreFixture::commands_in(f.frames(other));
  REQUIRE(cmds.size() == 1);
  CHECK(cmds[0].cmd_id == plain);
  // Its rig answers before the store has it: the steps wait in memory.
  f.send(other, msg::Ack{cmds[0].seq, plain, false});
  f.send(other, CoreFixture::result_of(plain));
  CHECK(f.state_of(plain) == CommandState::succeeded);
  // The first batch fails once: nothing is answered ok, the keyed command is withdrawn.
  f.store->finish_next(false);
  f.core->on_store_progress();
  CHECK(answered == std::vector<std::string>{"failed"});
  CHECK(f.state_of(held) == CommandState::undeliverable);
  CHECK(CoreFixture::commands_in(f.frames(s)).empty());
  // It is tried again and lands; then the second.
  f.store->finish_next();
  f.store->finish_next();
  f.core->on_store_progress();
  std::optional<bool> second_ok;
  f.core->when_recorded(second, [&](const Expected<void>& kept) { second_ok = kept.has_value(); });
  CHECK(second_ok == true);
  CHECK(f.store->stored(plain)->state == CommandState::queued);  // its steps come with the interval commit
  f.core->commit_if_due();
  f.store->finish_next();
  CHECK(f.store->stored(plain)->state == CommandState::succeeded);
  CHECK(f.store->stored(held)->state == CommandState::undeliverable);
}

TEST_CASE("store with a writer: a keyed command waits, then goes in its order") {
  CoreFixture f;
  f.store->manual = true;
  RigSession& s = f.live_rig("rig-1");
  CommandRequest keyed = CoreFixture::request("rig-1");
  keyed.idempotency_key = "k-9";
  const std::string first = std::get<EnqueueOk>(f.core->enqueue(keyed)).cmd_id;
  const std::uint64_t batch = f.core->persist();
  const std::string behind = std::get<EnqueueOk>(f.core->enqueue(CoreFixture::request("rig-1"))).cmd_id;
  (void)f.core->persist();
  CHECK(CoreFixture::commands_in(f.frames(s)).empty());  // the one behind waits in order
  f.store->finish_next();
  f.core->on_store_progress();
  CHECK(f.store->durable_through() == batch);
  const std::vector<msg::Command> cmds = CoreFixture::commands_in(f.frames(s));
  REQUIRE(cmds.size() == 2);
  CHECK(cmds[0].cmd_id == first);
  CHECK(cmds[1].cmd_id == behind);
}

TEST_CASE("idempotency: a repeated request returns the existing command, a different one is a conflict") {
  CoreFixture f;
  f.live_rig("rig-1");
  CommandRequest r = CoreFixture::request("rig-1", "dmesg", {{"lines", "5"}});
  r.idempotency_key = "nightly-2026-12-01";
  const EnqueueOk first = f.enqueue_ok(r);
  const EnqueueOk again = f.enqueue_ok(r);
  CHECK(again.existing);
  CHECK(again.cmd_id == first.cmd_id);
  CHECK(f.core->list_commands({}).size() == 1);
  CommandRequest other = r;
  other.args = {{"lines", "6"}};
  const EnqueueFailure conflict = f.enqueue_refused(other);
  CHECK(conflict.error == EnqueueError::conflict);
  CHECK(conflict.cmd_id == first.cmd_id);
  // The client's own cmd_id works the same way, also after a restart.
  CommandRequest named = CoreFixture::request("rig-1");
  named.cmd_id = uuid_v7_at(f.clock.wall_ms()).to_string();
  const EnqueueOk made = f.enqueue_ok(named);
  CHECK(made.cmd_id == named.cmd_id);
  f.crash_and_restart();
  CHECK(f.enqueue_ok(named).existing);
  CHECK(f.enqueue_ok(r).existing);
  CommandRequest bad = CoreFixture::request("rig-1");
  bad.cmd_id = "not-a-uuid";
  CHECK(f.enqueue_refused(bad).error == EnqueueError::bad_request);
  bad.cmd_id = named.cmd_id;
  for (char& c : bad.cmd_id) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  CHECK(f.enqueue_refused(bad).error == EnqueueError::bad_request);
  // Not a UUIDv7, or not made now: its time would misplace it in history and retention.
  bad.cmd_id = "9b2c4a5e-1f3d-4c6b-8a7e-2d4f6b8c0e1a";  // version 4
  EnqueueFailure v4 = f.enqueue_refused(bad);
  CHECK(v4.error == EnqueueError::bad_request);
  CHECK(v4.detail.find("UUIDv7") != std::string::npos);
  for (const std::uint64_t at : {f.clock.wall_ms() - 2 * 24 * 3600 * 1000ULL, f.clock.wall_ms() + 2 * 3600 * 1000ULL}) {
    bad.cmd_id = uuid_v7_at(at).to_string();
    EnqueueFailure skewed = f.enqueue_refused(bad);
    CHECK(skewed.error == EnqueueError::bad_request);
    CHECK(skewed.detail.find("clock") != std::string::npos);
  }
  bad.cmd_id = uuid_v7_at(f.clock.wall_ms() - 3600 * 1000ULL).to_string();  // an hour old: fine
  CHECK(std::holds_alternative<EnqueueOk>(f.core->enqueue(bad)));
}

TEST_CASE("store: a failed batch withdraws the commands that wait for their record; the others went") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  f.store->shared()->fail_commits = true;
  CommandRequest keyed = CoreFixture::request("rig-1");
  keyed.idempotency_key = "nightly-1";
  EnqueueOutcome o = f.core->enqueue(keyed);
  REQUIRE(std::holds_alternative<EnqueueOk>(o));
  CHECK_FALSE(f.recorded(f.core->persist()));
  const std::string id = std::get<EnqueueOk>(o).cmd_id;
  CHECK(f.state_of(id) == CommandState::undeliverable);
  CHECK(CoreFixture::commands_in(f.frames(s)).empty());  // never sent
  CHECK(s.outbox.size() == 0);
  // One no client named goes while its record is written, and stays when that fails.
  EnqueueOutcome plain = f.core->enqueue(CoreFixture::request("rig-1"));
  REQUIRE(std::holds_alternative<EnqueueOk>(plain));
  CHECK_FALSE(f.recorded(f.core->persist()));
  const std::string sent = std::get<EnqueueOk>(plain).cmd_id;
  const std::vector<msg::Command> cmds = CoreFixture::commands_in(f.frames(s));
  REQUIRE(cmds.size() == 1);
  CHECK(cmds[0].cmd_id == sent);
  CHECK(f.state_of(sent) == CommandState::sent);
  f.store->shared()->fail_commits = false;
  f.core->flush_store();  // the store now records them: the end of one, the other as it is
  CHECK(f.store->stored(id)->state == CommandState::undeliverable);
  CHECK(f.store->stored(sent).has_value());
}

TEST_CASE("store: a command that waits for its record goes once the store has it; one behind it waits too") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  f.store->shared()->fail_commits = true;
  CommandRequest keyed = CoreFixture::request("rig-1");
  keyed.idempotency_key = "k-1";
  const std::string first = std::get<EnqueueOk>(f.core->enqueue(keyed)).cmd_id;
  const std::uint64_t batch = f.core->persist();
  CHECK_FALSE(f.recorded(batch));
  CHECK(f.state_of(first) == CommandState::undeliverable);
  f.store->shared()->fail_commits = false;
  keyed.idempotency_key = "k-2";
  const std::string second = std::get<EnqueueOk>(f.core->enqueue(keyed)).cmd_id;
  const std::string third = std::get<EnqueueOk>(f.core->enqueue(CoreFixture::request("rig-1"))).cmd_id;
  CHECK(f.recorded(f.core->persist()));
  const std::vector<msg::Command> cmds = CoreFixture::commands_in(f.frames(s));
  REQUIRE(cmds.size() == 2);  // in order: the keyed one first
  CHECK(cmds[0].cmd_id == second);
  CHECK(cmds[1].cmd_id == third);
}

TEST_CASE("deadlines: not delivered in time -> undeliverable; it never reached the rig") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  f.closed(s);
  CommandRequest r = CoreFixture::request("rig-1");
  r.deliver_within_s = 5;
  const EnqueueOk ok = f.enqueue_ok(r);
  tick(f, 4900);
  CHECK(f.state_of(ok.cmd_id) == CommandState::queued);
  tick(f, 200);
  CHECK(f.state_of(ok.cmd_id) == CommandState::undeliverable);
  RigSession& back = f.live_rig("rig-1");
  CHECK(CoreFixture::commands_in(f.frames(back)).empty());
}

TEST_CASE("deadlines: written but never acknowledged by the deadline -> the rig's next connection is asked") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  CommandRequest r = CoreFixture::request("rig-1");
  r.deliver_within_s = 5;
  const EnqueueOk ok = f.enqueue_ok(r);
  f.frames(s);
  f.closed(s);
  tick(f, 6000);
  CHECK(f.state_of(ok.cmd_id) == CommandState::sent);  // the rig may have it: not decided yet
  RigSession& back = f.live_rig("rig-1");
  const std::vector<Outgoing> frames = f.frames(back);
  CHECK(CoreFixture::commands_in(frames).empty());  // not sent again past its deadline
  CHECK(cancels_in(frames) == std::vector<std::string>{ok.cmd_id});
  msg::Result never = CoreFixture::result_of(ok.cmd_id, msg::Status::cancelled);
  never.detail = "not running on this rig: never received";
  f.send(back, never);
  CHECK(f.state_of(ok.cmd_id) == CommandState::undeliverable);
}

TEST_CASE("deadlines: no RESULT within timeout_s -> CANCEL to the rig, timed_out; a late RESULT is kept") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  CommandRequest r = CoreFixture::request("rig-1");
  r.timeout_s = 2;
  const EnqueueOk ok = f.enqueue_ok(r);
  f.frames(s);
  f.send(s, msg::Ack{ok.seq, ok.cmd_id, false});
  tick(f, 1900);
  CHECK(f.state_of(ok.cmd_id) == CommandState::acked);
  tick(f, 200);
  CHECK(f.state_of(ok.cmd_id) == CommandState::timed_out);
  CHECK(cancels_in(f.frames(s)) == std::vector<std::string>{ok.cmd_id});
  f.send(s, CoreFixture::result_of(ok.cmd_id, msg::Status::cancelled));
  const CommandView v = *f.core->command(ok.cmd_id);
  CHECK(v.state == CommandState::timed_out);
  REQUIRE(v.result);
  CHECK(v.result->status == msg::Status::cancelled);
}

TEST_CASE("deadlines: timed out while the rig is away -> its CANCEL goes after the rig's next WELCOME") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const std::string boot = s.boot_id.to_string();
  CommandRequest r = CoreFixture::request("rig-1");
  r.timeout_s = 2;
  const EnqueueOk ok = f.enqueue_ok(r);
  f.frames(s);
  f.send(s, msg::Ack{ok.seq, ok.cmd_id, false});
  f.closed(s);  // the rig goes away while it runs the command
  tick(f, 2100);
  CHECK(f.state_of(ok.cmd_id) == CommandState::timed_out);
  CHECK(f.core->command(ok.cmd_id)->detail.find("CANCEL goes when it reconnects") != std::string::npos);
  RigSession& back = f.live_rig("rig-1", boot);
  CHECK(cancels_in(f.frames(back)) == std::vector<std::string>{ok.cmd_id});
  f.send(back, CoreFixture::result_of(ok.cmd_id, msg::Status::cancelled));
  CHECK(f.state_of(ok.cmd_id) == CommandState::timed_out);  // the answer is kept; the state stays
  // Owed once: the next connection gets nothing more.
  f.closed(back);
  RigSession& again = f.live_rig("rig-1", boot);
  CHECK(cancels_in(f.frames(again)).empty());
}

TEST_CASE("deadlines: a CANCEL queued for a timed-out command but not written before the close is owed") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const std::string boot = s.boot_id.to_string();
  CommandRequest r = CoreFixture::request("rig-1");
  r.timeout_s = 2;
  const EnqueueOk ok = f.enqueue_ok(r);
  f.frames(s);
  f.send(s, msg::Ack{ok.seq, ok.cmd_id, false});
  tick(f, 2100);
  CHECK(f.state_of(ok.cmd_id) == CommandState::timed_out);
  f.closed(s);  // before the CANCEL was written
  RigSession& back = f.live_rig("rig-1", boot);
  CHECK(cancels_in(f.frames(back)) == std::vector<std::string>{ok.cmd_id});
}

TEST_CASE("reboot: done only when the rig comes back with a new boot_id") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const EnqueueOk ok = f.enqueue_ok("rig-1", "reboot");
  f.frames(s);
  f.send(s, msg::Ack{ok.seq, ok.cmd_id, false});
  f.send(s, CoreFixture::result_of(ok.cmd_id, msg::Status::scheduled));
  CHECK(f.state_of(ok.cmd_id) == CommandState::running);
  const std::string boot = s.boot_id.to_string();
  f.closed(s);
  // The same boot again (a network blip, not the reboot): still waiting, not sent again.
  RigSession& blip = f.live_rig("rig-1", boot);
  CHECK(CoreFixture::commands_in(f.frames(blip)).empty());
  CHECK(f.state_of(ok.cmd_id) == CommandState::running);
  f.closed(blip);
  RigSession& rebooted = f.live_rig("rig-1");
  CHECK(f.state_of(ok.cmd_id) == CommandState::succeeded);
  CHECK(f.core->command(ok.cmd_id)->detail.find(rebooted.boot_id.to_string()) != std::string::npos);
}

TEST_CASE("reboot: its ACK lost with the connection, the new boot's duplicate answer confirms it") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const EnqueueOk ok = f.enqueue_ok("rig-1", "reboot");
  REQUIRE(CoreFixture::commands_in(f.frames(s)).size() == 1);
  // The agent accepted it and rebooted; its ACK never reached the broker.
  f.closed(s);  // still `sent`: it goes again on the next connection
  CHECK(f.state_of(ok.cmd_id) == CommandState::sent);
  RigSession& rebooted = f.live_rig("rig-1");
  const auto again = CoreFixture::commands_in(f.frames(rebooted));
  REQUIRE(again.size() == 1);
  // The new process finds it in its persisted dedup: a duplicate, with the stored RESULT.
  f.send(rebooted, msg::Ack{again[0].seq, ok.cmd_id, true});
  CHECK(f.state_of(ok.cmd_id) == CommandState::acked);
  f.send(rebooted, CoreFixture::result_of(ok.cmd_id, msg::Status::scheduled));
  CHECK(f.state_of(ok.cmd_id) == CommandState::succeeded);
  CHECK(f.core->command(ok.cmd_id)->detail.find(rebooted.boot_id.to_string()) != std::string::npos);
}

TEST_CASE("reboot: a duplicate answer from the same boot still waits for a new one") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const std::string boot = s.boot_id.to_string();
  const EnqueueOk ok = f.enqueue_ok("rig-1", "reboot");
  f.frames(s);
  f.closed(s);  // a blip before the ACK: the same agent process comes back
  RigSession& blip = f.live_rig("rig-1", boot);
  const auto again = CoreFixture::commands_in(f.frames(blip));
  REQUIRE(again.size() == 1);
  f.send(blip, msg::Ack{again[0].seq, ok.cmd_id, true});
  f.send(blip, CoreFixture::result_of(ok.cmd_id, msg::Status::scheduled));
  CHECK(f.state_of(ok.cmd_id) == CommandState::running);
}

TEST_CASE("reboot: no new boot_id within its timeout -> timed_out") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  CommandRequest r = CoreFixture::request("rig-1", "reboot");
  r.timeout_s = 3;
  const EnqueueOk ok = f.enqueue_ok(r);
  f.frames(s);
  f.send(s, msg::Ack{ok.seq, ok.cmd_id, false});
  f.send(s, CoreFixture::result_of(ok.cmd_id, msg::Status::scheduled));
  tick(f, 3100);
  CHECK(f.state_of(ok.cmd_id) == CommandState::timed_out);
  CHECK(f.core->command(ok.cmd_id)->detail.find("new boot_id") != std::string::npos);
}

TEST_CASE("new boot: what the old boot acknowledged and never answered ends interrupted") {
  FleetSettings settings;
  settings.reconcile_grace_ms = 2000;
  CoreFixture f(settings);
  RigSession& s = f.live_rig("rig-1");
  const EnqueueOk reported = f.enqueue_ok("rig-1");
  const EnqueueOk silent = f.enqueue_ok("rig-1");
  const EnqueueOk spooled = f.enqueue_ok("rig-1");
  f.frames(s);
  for (const EnqueueOk* ok : {&reported, &silent, &spooled}) f.send(s, msg::Ack{ok->seq, ok->cmd_id, false});
  f.closed(s);
  RigSession& restarted = f.live_rig("rig-1");  // a new boot_id
  CHECK(CoreFixture::commands_in(f.frames(restarted)).empty());  // never run again
  msg::Result interrupted = CoreFixture::result_of(reported.cmd_id, msg::Status::failed);
  interrupted.interrupted = true;
  interrupted.detail = "interrupted: accepted by an earlier agent process";
  f.send(restarted, interrupted);
  f.send(restarted, CoreFixture::result_of(spooled.cmd_id));  // it finished before the restart
  CHECK(f.state_of(reported.cmd_id) == CommandState::interrupted);
  CHECK(f.state_of(spooled.cmd_id) == CommandState::succeeded);
  CHECK(f.state_of(silent.cmd_id) == CommandState::acked);
  tick(f, 2100);
  CHECK(f.state_of(silent.cmd_id) == CommandState::interrupted);
}

TEST_CASE("cancel: before delivery at once; after it by the rig's answer, or cancelled when none comes") {
  FleetSettings settings;
  settings.cancel_grace_ms = 1000;
  CoreFixture f(settings);
  RigSession& s = f.live_rig("rig-1");
  f.closed(s);
  const EnqueueOk held = f.enqueue_ok("rig-1");
  CHECK(f.core->cancel(held.cmd_id) == CancelOutcome::cancelled);
  CHECK(f.state_of(held.cmd_id) == CommandState::cancelled);
  RigSession& back = f.live_rig("rig-1");
  CHECK(CoreFixture::commands_in(f.frames(back)).empty());
  const EnqueueOk running = f.enqueue_ok("rig-1");
  f.frames(back);
  f.send(back, msg::Ack{1, running.cmd_id, false});
  CHECK(f.core->cancel(running.cmd_id) == CancelOutcome::requested);
  CHECK(cancels_in(f.frames(back)) == std::vector<std::string>{running.cmd_id});
  tick(f, 1100);
  CHECK(f.state_of(running.cmd_id) == CommandState::cancelled);
  CHECK(f.core->command(running.cmd_id)->detail.find("did not answer") != std::string::npos);
}

TEST_CASE("cancel: a rig not connected gets the CANCEL when it comes back") {
  CoreFixture f;
  RigSession& s = f.live_rig("rig-1");
  const std::string boot = s.boot_id.to_string();
  const EnqueueOk ok = f.enqueue_ok("rig-1");
  f.frames(s);
  f.send(s, msg::Ack{ok.seq, ok.cmd_id, false});
  f.closed(s);
  CHECK(f.core->cancel(ok.cmd_id) == CancelOutcome::requested);
  RigSession& back = f.live_rig("rig-1", boot);
  const std::vector<Outgoing> frames = f.frames(back);
  CHECK(cancels_in(frames) == std::vector<std::string>{ok.cmd_id});
  CHECK(CoreFixture::commands_in(frames).empty());
  f.send(back, CoreFixture::result_of(ok.cmd_id, msg::Status::cancelled));
  CHECK(f.state_of(ok.cmd_id) == CommandState::cancelled);
}

TEST_CASE("backlog: more waiting than the outbox holds go as the ACKs make room, in order") {
  FleetSettings settings;
  settings.outbox_capacity = 3;
  CoreFixture f(settings);
  RigSession& s = f.live_rig("rig-1");
  const std::string boot = s.boot_id.to_string();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(f.enqueue_ok("rig-1").cmd_id);
  f.frames(s);
  for (int i = 0; i < 3; ++i) f.send(s, msg::Ack{static_cast<std::uint64_t>(i + 1), ids[i], false});
  for (int i = 0; i < 3; ++i) ids.push_back(f.enqueue_ok("rig-1").cmd_id);  // the outbox is free again
  f.frames(s);
  f.closed(s);
  // Six open (three acked, three not): the outbox takes three now, in order.
  RigSession& back = f.live_rig("rig-1", boot);
  std::vector<msg::Command> cmds = CoreFixture::commands_in(f.frames(back));
  REQUIRE(cmds.size() == 3);
  CHECK(cmds[0].cmd_id == ids[0]);
  CHECK(cmds[2].cmd_id == ids[2]);
  CHECK(f.core->rig("rig-1")->held == 3);
  CHECK(f.enqueue_refused(CoreFixture::request("rig-1")).error == EnqueueError::rig_unresponsive);
  f.send(back, msg::Ack{cmds[0].seq, cmds[0].cmd_id, true});
  f.send(back, msg::Ack{cmds[1].seq, cmds[1].cmd_id, true});
  cmds = CoreFixture::commands_in(f.frames(back));
  REQUIRE(cmds.size() == 2);
  CHECK(cmds[0].cmd_id == ids[3]);
  CHECK(cmds[1].cmd_id == ids[4]);
  CHECK(cmds[1].seq == 5);
}

TEST_CASE("shared store: a rig that moves to another broker gets what the first one recorded") {
  auto shared = std::make_shared<testing::MemoryStore::Shared>();
  CoreFixture a({}, shared);
  CoreFixture b({}, shared);
  RigSession& on_a = a.live_rig("rig-1");
  const std::string boot = on_a.boot_id.to_string();
  const EnqueueOk queued_on_a = a.enqueue_ok("rig-1");
  a.frames(on_a);
  a.closed(on_a);  // drained away from broker a
  RigSession& on_b = b.live_rig("rig-1", boot);
  const std::vector<msg::Command> cmds = CoreFixture::commands_in(b.frames(on_b));
  REQUIRE(cmds.size() == 1);
  CHECK(cmds[0].cmd_id == queued_on_a.cmd_id);
  b.send(on_b, msg::Ack{cmds[0].seq, queued_on_a.cmd_id, false});
  b.send(on_b, CoreFixture::result_of(queued_on_a.cmd_id));
  b.core->flush_store();
  CHECK(b.store->stored(queued_on_a.cmd_id)->state == CommandState::succeeded);
  // Broker a writing its older view later changes nothing.
  a.core->flush_store();
  CHECK(a.store->stored(queued_on_a.cmd_id)->state == CommandState::succeeded);
}

TEST_CASE("history: list_commands filters by rig and state, newest first") {
  CoreFixture f;
  RigSession& s1 = f.live_rig("rig-1");
  f.live_rig("rig-2");
  const EnqueueOk a = f.enqueue_ok("rig-1");
  const EnqueueOk b = f.enqueue_ok("rig-2");
  const EnqueueOk c = f.enqueue_ok("rig-1");
  f.frames(s1);
  f.send(s1, msg::Ack{a.seq, a.cmd_id, false});
  f.send(s1, CoreFixture::result_of(a.cmd_id));
  f.core->flush_store();
  CommandQuery q;
  q.rig_id = "rig-1";
  std::vector<CommandView> list = f.core->list_commands(q);
  REQUIRE(list.size() == 2);
  CHECK(list[0].cmd_id == c.cmd_id);
  CHECK(list[1].cmd_id == a.cmd_id);
  q.state = CommandState::succeeded;
  list = f.core->list_commands(q);
  REQUIRE(list.size() == 1);
  CHECK(list[0].cmd_id == a.cmd_id);
  CHECK(f.core->list_commands({}).size() == 3);
  (void)b;
}
