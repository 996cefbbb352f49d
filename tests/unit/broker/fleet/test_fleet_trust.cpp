// A reload's re-check of open connections (FleetCore::start_recheck,
// recheck_slice, distrust): who is asked, in slices, and who is closed 4401.
#include <doctest/doctest.h>

#include <set>

#include "fleet_core_fixture.hpp"

using namespace fleetlink;
using namespace fleetlink::broker;
using namespace fleetlink::broker::testing;

namespace {

// A TLS rig past its WELCOME.
RigSession& tls_rig(CoreFixture& f, const std::string& rig_id) {
  RigSession& s = f.connect(rig_id);
  f.send(s, CoreFixture::hello_for(rig_id, uuid_v7().to_string()));
  const std::optional<Outgoing> w = f.core->next_frame(s);
  REQUIRE(w);
  REQUIRE(w->kind == OutboundKind::welcome);
  return s;
}

}  // namespace

TEST_CASE("re-check: a refused certificate is closed 4401 with the verifier's reason; the others stay") {
  CoreFixture f;
  RigSession& good = tls_rig(f, "rig-1");
  RigSession& revoked = tls_rig(f, "rig-2");
  RigSession& plain = f.live_rig("rig-3");  // plain ws: no certificate to check
  std::vector<std::string> asked;
  f.core->start_recheck([&](const RigSession& s) -> std::optional<std::string> {
    asked.push_back(s.rig_id);
    if (s.rig_id == "rig-2") return std::string("certificate revoked");
    return std::nullopt;
  });
  CHECK(f.core->rechecking());
  CHECK_FALSE(f.core->recheck_slice(100));
  CHECK_FALSE(f.core->rechecking());
  CHECK(std::set<std::string>(asked.begin(), asked.end()) == std::set<std::string>{"rig-1", "rig-2"});

  const auto closed = f.transport.close_of(revoked);
  REQUIRE(closed);
  CHECK(closed->code == CloseCode::identity_mismatch);
  CHECK(closed->reason == "certificate no longer trusted: certificate revoked");
  CHECK_FALSE(f.transport.close_of(good));
  CHECK_FALSE(f.transport.close_of(plain));
  // It is no longer its rig's connection: the rig is offline at once.
  const std::optional<RigView> v = f.core->rig("rig-2");
  REQUIRE(v);
  CHECK_FALSE(v->connected);
  CHECK(f.core->rig("rig-1")->connected);
}

TEST_CASE("re-check: a slice at a time, every connection open at the start once, none opened later") {
  CoreFixture f;
  for (int i = 0; i < 5; ++i) f.connect("rig-" + std::to_string(i));  // before HELLO: checked too
  std::multiset<const RigSession*> asked;
  f.core->start_recheck([&](const RigSession& s) -> std::optional<std::string> {
    asked.insert(&s);
    return std::nullopt;
  });
  CHECK(f.core->recheck_slice(2));
  CHECK(asked.size() == 2);
  RigSession& late = f.connect("rig-late");  // verified under the new trust by its handshake
  CHECK(f.core->recheck_slice(2));
  CHECK_FALSE(f.core->recheck_slice(2));
  CHECK(asked.size() == 5);
  CHECK(asked.count(&late) == 0);
  for (const auto& s : f.sessions)
    if (s.get() != &late) CHECK(asked.count(s.get()) == 1);
  CHECK(f.transport.closes.empty());
}

TEST_CASE("re-check: a connection that goes away meanwhile is skipped, the walk goes on") {
  CoreFixture f;
  for (int i = 0; i < 4; ++i) f.connect("rig-" + std::to_string(i));
  // Sessions are walked newest first: the next one after the first slice is sessions[2].
  std::vector<const RigSession*> asked;
  f.core->start_recheck([&](const RigSession& s) -> std::optional<std::string> {
    asked.push_back(&s);
    return std::string("unable to get local issuer certificate");
  });
  CHECK(f.core->recheck_slice(1));
  REQUIRE(asked.size() == 1);
  RigSession& next = *f.sessions[2];
  f.closed(next);  // the cursor's session leaves
  CHECK_FALSE(f.core->recheck_slice(10));
  CHECK(asked.size() == 3);
  CHECK(std::find(asked.begin(), asked.end(), &next) == asked.end());
  CHECK(f.transport.closes.size() == 3);
  for (const auto& c : f.transport.closes) CHECK(c.code == CloseCode::identity_mismatch);
}

TEST_CASE("re-check: a second reload starts over with its own check; a closing connection is not asked") {
  CoreFixture f;
  RigSession& a = tls_rig(f, "rig-a");
  RigSession& b = tls_rig(f, "rig-b");
  int first = 0;
  f.core->start_recheck([&](const RigSession&) -> std::optional<std::string> {
    ++first;
    return std::nullopt;
  });
  CHECK(f.core->recheck_slice(1));
  std::vector<std::string> second;
  f.core->distrust(a, "certificate revoked");  // e.g. refused when it opened
  f.core->start_recheck([&](const RigSession& s) -> std::optional<std::string> {
    second.push_back(s.rig_id);
    return std::nullopt;
  });
  CHECK_FALSE(f.core->recheck_slice(10));
  CHECK(first == 1);
  CHECK(second == std::vector<std::string>{"rig-b"});
  CHECK(f.transport.closes.size() == 1);
  CHECK_FALSE(f.transport.close_of(b));
}
