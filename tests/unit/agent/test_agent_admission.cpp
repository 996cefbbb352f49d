// Command admission: seq / allow list / dedup -> ack, nack, duplicate, ignore.
#include <doctest/doctest.h>

#include "admission.hpp"

using namespace fleetlink;
using namespace fleetlink::agent;

namespace {
msg::Command cmd(std::uint64_t seq, std::string id, std::string kind = "dmesg") {
  msg::Command c;
  c.seq = seq;
  c.cmd_id = std::move(id);
  c.kind = std::move(kind);
  return c;
}
CommandAdmission make() { return CommandAdmission({"dmesg", "reboot", "suite"}, {"dmesg", "reboot"}); }
const DedupWindow kEmpty(100, std::chrono::hours(1));
}  // namespace

TEST_CASE("in-order commands of an allowed, known kind run and are acked") {
  auto a = make();
  auto d = a.decide(cmd(1, "c1"), kEmpty, 1000);
  CHECK(d.action == Admission::run);
  CHECK(d.ack.seq == 1);
  CHECK(d.ack.cmd_id == "c1");
  CHECK_FALSE(d.ack.duplicate);
  CHECK(a.decide(cmd(2, "c2", "reboot"), kEmpty, 1000).action == Admission::run);
}

TEST_CASE("a repeated seq on the same connection is ignored") {
  auto a = make();
  REQUIRE(a.decide(cmd(1, "c1"), kEmpty, 0).action == Admission::run);
  auto d = a.decide(cmd(1, "c1"), kEmpty, 0);
  CHECK(d.action == Admission::ignore);
}

TEST_CASE("a gap is nacked seq_gap with the expected seq, asks to reconnect, and nothing after it runs") {
  auto a = make();
  REQUIRE(a.decide(cmd(1, "c1"), kEmpty, 0).action == Admission::run);
  auto d = a.decide(cmd(3, "c3"), kEmpty, 0);
  CHECK(d.action == Admission::nack);
  CHECK(d.nack.reason == msg::NackReason::seq_gap);
  CHECK(d.nack.expected_seq == 2);
  CHECK(d.nack.seq == 3);
  CHECK(d.nack.cmd_id == "c3");
  CHECK(d.reconnect);
  // The missing one arriving late, or later ones: nothing runs on this connection.
  CHECK(a.decide(cmd(2, "c2"), kEmpty, 0).action == Admission::ignore);
  CHECK(a.decide(cmd(4, "c4"), kEmpty, 0).action == Admission::ignore);
  // A new connection starts at 1 again.
  a.new_connection();
  CHECK(a.decide(cmd(1, "c5"), kEmpty, 0).action == Admission::run);
}

TEST_CASE("a first seq other than 1 is a gap") {
  auto a = make();
  auto d = a.decide(cmd(5, "c5"), kEmpty, 0);
  CHECK(d.action == Admission::nack);
  CHECK(d.nack.expected_seq == 1);
}

TEST_CASE("a cmd_id already run is acked as a duplicate and not run") {
  auto a = make();
  DedupWindow seen(100, std::chrono::hours(1));
  seen.insert("c1", 1000);
  auto d = a.decide(cmd(1, "c1", "reboot"), seen, 2000);
  CHECK(d.action == Admission::duplicate);
  CHECK(d.ack.duplicate);
  CHECK(d.ack.seq == 1);
  // The seq still counts: the next one is in order.
  CHECK(a.decide(cmd(2, "c2"), seen, 2000).action == Admission::run);
}

TEST_CASE("a duplicate cmd_id wins over the allow list (it ran when it was allowed)") {
  CommandAdmission a({"dmesg", "reboot"}, {"dmesg"});
  DedupWindow seen(100, std::chrono::hours(1));
  seen.insert("r1", 0);
  CHECK(a.decide(cmd(1, "r1", "reboot"), seen, 10).action == Admission::duplicate);
}

TEST_CASE("unknown kinds are unsupported_kind, known but not allowed are not_allowed") {
  auto a = make();
  auto d1 = a.decide(cmd(1, "c1", "teleport"), kEmpty, 0);
  CHECK(d1.action == Admission::nack);
  CHECK(d1.nack.reason == msg::NackReason::unsupported_kind);
  CHECK_FALSE(d1.reconnect);
  auto d2 = a.decide(cmd(2, "c2", "suite"), kEmpty, 0);
  CHECK(d2.action == Admission::nack);
  CHECK(d2.nack.reason == msg::NackReason::not_allowed);
  // The detail says which setting refused it and what it allows.
  CHECK(d2.nack.detail.find("allow-kinds") != std::string::npos);
  CHECK(d2.nack.detail.find("'suite'") != std::string::npos);
  // Refusals do not break the sequence.
  CHECK(a.decide(cmd(3, "c3"), kEmpty, 0).action == Admission::run);
}

TEST_CASE("empty or unsafe cmd_ids and empty kinds are malformed") {
  auto a = make();
  CHECK(a.decide(cmd(1, ""), kEmpty, 0).nack.reason == msg::NackReason::malformed);
  CHECK(a.decide(cmd(2, "x", ""), kEmpty, 0).nack.reason == msg::NackReason::malformed);
  CHECK(a.decide(cmd(3, "has space"), kEmpty, 0).nack.reason == msg::NackReason::malformed);
  CHECK(a.decide(cmd(4, std::string(129, 'a')), kEmpty, 0).nack.reason == msg::NackReason::malformed);
}

TEST_CASE("dedup entries expire with their age") {
  auto a = make();
  DedupWindow seen(100, std::chrono::milliseconds(1000));
  seen.insert("c1", 0);
  CHECK(a.decide(cmd(1, "c1"), seen, 500).action == Admission::duplicate);
  CHECK(a.decide(cmd(2, "c1"), seen, 5000).action == Admission::run);
}

TEST_CASE("an undecodable command is nacked malformed in sequence; the seq rules still apply") {
  auto a = make();
  REQUIRE(a.decide(cmd(1, "c1"), kEmpty, 0).action == Admission::run);
  auto d = a.decide_malformed(CommandPeek{2, "c2"}, "field args: expected map");
  CHECK(d.action == Admission::nack);
  CHECK(d.nack.seq == 2);
  CHECK(d.nack.cmd_id == "c2");
  CHECK(d.nack.reason == msg::NackReason::malformed);
  CHECK(d.nack.detail.find("field args") != std::string::npos);
  CHECK_FALSE(d.reconnect);
  // It counted as seen: the next one runs, a repeat is ignored.
  CHECK(a.decide(cmd(3, "c3"), kEmpty, 0).action == Admission::run);
  CHECK(a.decide_malformed(CommandPeek{3, "c3"}, "x").action == Admission::ignore);
  // A gap is still a gap.
  auto g = a.decide_malformed(CommandPeek{9, "c9"}, "x");
  CHECK(g.nack.reason == msg::NackReason::seq_gap);
  CHECK(g.nack.expected_seq == 4);
  CHECK(g.reconnect);
}

TEST_CASE("an undecodable command without a readable seq is nacked with seq 0, the sequence untouched") {
  auto a = make();
  auto d = a.decide_malformed(CommandPeek{std::nullopt, ""}, "field seq: expected uint");
  CHECK(d.action == Admission::nack);
  CHECK(d.nack.seq == 0);
  CHECK(d.nack.reason == msg::NackReason::malformed);
  CHECK(a.decide(cmd(1, "c1"), kEmpty, 0).action == Admission::run);
}
