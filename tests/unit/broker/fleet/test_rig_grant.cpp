// Rig tokens as the core sees them (fleet/rig_grant.hpp): the policy at HELLO,
// kinds refused at enqueue, held commands a new grant does not allow, expiry.
#include <doctest/doctest.h>

#include "fleet/rig_grant.hpp"
#include "fleet_core_fixture.hpp"

using namespace fleetlink;
using namespace fleetlink::broker;
using fleetlink::broker::testing::CoreFixture;

namespace {

std::unique_ptr<RigGrant> grant(std::string sub, std::vector<std::string> kinds, std::uint64_t expires_at_ms = 0,
                                std::string problem = {}) {
  auto g = std::make_unique<RigGrant>();
  g->subject = std::move(sub);
  std::sort(kinds.begin(), kinds.end());
  g->kinds = std::move(kinds);
  g->expires_at_ms = expires_at_ms;
  g->problem = std::move(problem);
  return g;
}

FleetSettings with_tokens(RigTokenMode m) {
  FleetSettings s;
  s.rig_token = m;
  return s;
}

// A connection with this grant (null: no token) says HELLO for rig_id.
RigSession& hello_with(CoreFixture& f, const std::string& rig_id, std::unique_ptr<RigGrant> g) {
  RigSession& s = f.connect();
  s.set_grant(std::move(g));
  f.send(s, CoreFixture::hello_for(rig_id, uuid_v7().to_string()));
  return s;
}

}  // namespace

TEST_CASE("token policy: off ignores, optional limits only who has one, required refuses without") {
  const auto g = grant("rig-1", {"dmesg"});
  CHECK_FALSE(token_problem(RigTokenMode::off, nullptr, "rig-1"));
  CHECK_FALSE(token_problem(RigTokenMode::optional, nullptr, "rig-1"));
  CHECK(token_problem(RigTokenMode::required, nullptr, "rig-1")->find("required") != std::string::npos);
  CHECK_FALSE(token_problem(RigTokenMode::required, g.get(), "rig-1"));
  CHECK(token_problem(RigTokenMode::optional, g.get(), "rig-2")->find("is for 'rig-1'") != std::string::npos);
  const auto bad = grant("", {}, 0, "expired 5 s ago");
  CHECK(token_problem(RigTokenMode::optional, bad.get(), "rig-1")->find("expired 5 s ago") != std::string::npos);
  CHECK(kind_granted(nullptr, "suite"));
  CHECK(kind_granted(g.get(), "dmesg"));
  CHECK_FALSE(kind_granted(g.get(), "suite"));
  CHECK(rig_token_mode_from_string("required") == RigTokenMode::required);
  CHECK_FALSE(rig_token_mode_from_string("yes"));
}

TEST_CASE("HELLO: a missing, refused or foreign token closes 4401 with the reason") {
  CoreFixture f(with_tokens(RigTokenMode::required));
  RigSession& none = hello_with(f, "rig-1", nullptr);
  REQUIRE(f.transport.close_of(none));
  CHECK(f.transport.close_of(none)->code == CloseCode::identity_mismatch);
  CHECK(f.transport.close_of(none)->reason.find("rig token required") != std::string::npos);
  RigSession& refused = hello_with(f, "rig-1", grant("", {}, 0, "bad signature (key 'lab')"));
  CHECK(f.transport.close_of(refused)->reason == "rig token refused: bad signature (key 'lab')");
  RigSession& foreign = hello_with(f, "rig-1", grant("rig-2", {"dmesg"}));
  CHECK(f.transport.close_of(foreign)->code == CloseCode::identity_mismatch);
  RigSession& good = hello_with(f, "rig-1", grant("rig-1", {"dmesg"}));
  CHECK_FALSE(f.transport.close_of(good));
  CHECK(good.phase == SessionPhase::live);
}

TEST_CASE("enqueue: a kind the rig's token does not grant is refused kind_not_allowed, never sent") {
  CoreFixture f(with_tokens(RigTokenMode::optional));
  RigSession& limited = hello_with(f, "rig-1", grant("rig-1", {"dmesg"}));
  (void)f.frames(limited);  // the WELCOME
  const EnqueueFailure no = f.enqueue_refused(CoreFixture::request("rig-1", "reboot"));
  CHECK(no.error == EnqueueError::kind_not_allowed);
  CHECK(no.detail.find("'reboot'") != std::string::npos);
  CHECK(no.detail.find("rig-1") != std::string::npos);
  CHECK(CoreFixture::commands_in(f.frames(limited)).empty());
  f.enqueue_ok("rig-1", "dmesg");
  CHECK(CoreFixture::commands_in(f.frames(limited)).size() == 1);
  // No token under optional: not limited.
  RigSession& open = hello_with(f, "rig-2", nullptr);
  (void)f.frames(open);
  f.enqueue_ok("rig-2", "reboot");
  CHECK(CoreFixture::commands_in(f.frames(open)).size() == 1);
}

TEST_CASE("a command held while the rig was away ends rejected if the token it comes back with does not allow it") {
  CoreFixture f(with_tokens(RigTokenMode::required));
  CommandRequest r = CoreFixture::request("rig-9", "reboot");
  r.hold = true;
  const EnqueueOk held = f.enqueue_ok(r);
  RigSession& s = hello_with(f, "rig-9", grant("rig-9", {"dmesg"}));
  CHECK(CoreFixture::commands_in(f.frames(s)).empty());
  CHECK(f.state_of(held.cmd_id) == CommandState::rejected);
  CHECK(f.core->command(held.cmd_id)->detail.find("kind_not_allowed") != std::string::npos);
}

TEST_CASE("a live connection's grant ends with its token: closed 4401 at expiry") {
  CoreFixture f(with_tokens(RigTokenMode::required));
  RigSession& s = hello_with(f, "rig-1", grant("rig-1", {"dmesg"}, f.clock.wall_ms() + 5000));
  (void)f.frames(s);
  for (int i = 0; i < 40 && !f.transport.close_of(s); ++i) {
    f.clock.advance(100);
    f.core->sweep();
  }
  CHECK_FALSE(f.transport.close_of(s));  // 4 s: still valid
  for (int i = 0; i < 40 && !f.transport.close_of(s); ++i) {
    f.clock.advance(100);
    f.core->sweep();
  }
  REQUIRE(f.transport.close_of(s));
  CHECK(f.transport.close_of(s)->code == CloseCode::identity_mismatch);
  CHECK(f.transport.close_of(s)->reason.find("expired") != std::string::npos);
}
