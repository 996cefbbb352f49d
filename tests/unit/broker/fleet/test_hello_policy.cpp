#include <doctest/doctest.h>

#include "fleetlink/uuid.hpp"
#include "fleet/hello_policy.hpp"

using namespace fleetlink;
using namespace fleetlink::broker;

namespace {
msg::Hello hello(const std::string& rig, const std::string& boot) {
  msg::Hello h;
  h.rig_id = rig;
  h.agent_version = "1.0";
  h.boot_id = boot;
  h.kinds = {"dmesg"};
  return h;
}
CertIdentity cert(const std::string& cn, std::vector<std::string> sans = {}) {
  return CertIdentity{"/CN=" + cn, cn, std::move(sans)};
}
}  // namespace

TEST_CASE("hello: clean accept with a matching CN or DNS SAN") {
  auto boot = uuid_v7().to_string();
  CHECK(decide_hello(hello("rig-1", boot), cert("rig-1"), std::nullopt).verdict == HelloVerdict::accept);
  CHECK(decide_hello(hello("rig-1", boot), cert("other", {"x", "rig-1"}), std::nullopt).verdict ==
        HelloVerdict::accept);
  // No authenticating listener (plain ws, bench/dev): identity is not checked.
  CHECK(decide_hello(hello("rig-1", boot), std::nullopt, std::nullopt).verdict == HelloVerdict::accept);
}

TEST_CASE("hello: identity mismatch is 4401") {
  auto d = decide_hello(hello("rig-2", uuid_v7().to_string()), cert("rig-1", {"rig-1"}), std::nullopt);
  CHECK(d.verdict == HelloVerdict::reject_identity);
  CHECK(close_code_for(d.verdict) == CloseCode::identity_mismatch);
  CHECK(d.reason.size() <= 123);
  // A TLS peer without any identity matches nothing.
  CHECK(decide_hello(hello("rig-2", uuid_v7().to_string()), CertIdentity{}, std::nullopt).verdict ==
        HelloVerdict::reject_identity);
}

TEST_CASE("hello: invalid fields are malformed (4400)") {
  CHECK(decide_hello(hello("", uuid_v7().to_string()), std::nullopt, std::nullopt).verdict ==
        HelloVerdict::reject_malformed);
  CHECK(decide_hello(hello("rig 1", uuid_v7().to_string()), std::nullopt, std::nullopt).verdict ==
        HelloVerdict::reject_malformed);
  CHECK(decide_hello(hello("rig-1", "not-a-uuid"), std::nullopt, std::nullopt).verdict ==
        HelloVerdict::reject_malformed);
  CHECK(close_code_for(HelloVerdict::reject_malformed) == CloseCode::malformed);
}

TEST_CASE("hello: an existing connection that may be alive is probed first, whatever the boot_id") {
  auto older = uuid_v7_at(1'700'000'000'000).to_string();
  auto newer = uuid_v7_at(1'700'000'001'000).to_string();
  // Same boot, an older one, a newer one (a cloned configuration starts with a newer
  // boot_id): never taken over on the boot_id's word.
  for (const auto& [mine, theirs] : {std::pair{older, older}, std::pair{older, newer}, std::pair{newer, older}}) {
    auto d = decide_hello(hello("rig-1", mine), cert("rig-1"), ExistingConnection{theirs, false, 0});
    CHECK(d.verdict == HelloVerdict::probe_existing);
  }
  CHECK(close_code_for(HelloVerdict::reject_duplicate) == CloseCode::duplicate_connection);
}

TEST_CASE("hello: an existing connection that missed a pong is superseded (old closed 4410)") {
  auto older = uuid_v7_at(1'700'000'000'000).to_string();
  auto newer = uuid_v7_at(1'700'000'001'000).to_string();
  auto d = decide_hello(hello("rig-1", older), cert("rig-1"), ExistingConnection{older, false, 1});
  CHECK(d.verdict == HelloVerdict::supersede_existing);
  CHECK(close_code_for(d.verdict) == CloseCode::superseded);
  // Old already closing: plain accept.
  CHECK(decide_hello(hello("rig-1", older), cert("rig-1"), ExistingConnection{newer, true, 0}).verdict ==
        HelloVerdict::accept);
}

TEST_CASE("boot_id text order is time order") {
  auto a = uuid_v7_at(1'700'000'000'000).to_string();
  auto b = uuid_v7_at(1'700'000'000'001).to_string();
  CHECK(boot_id_older(a, b));
  CHECK_FALSE(boot_id_older(b, a));
  CHECK_FALSE(boot_id_older(a, a));
}
