// Wire names of message types and enums.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "fleetlink/messages.hpp"
#include "sample_messages.hpp"

using namespace fleetlink;

TEST_CASE("type names") {
  std::set<std::string> names;
  for (const auto& m : test::sample_messages()) names.insert(type_name(m));
  CHECK(names == std::set<std::string>{"hello", "welcome", "command", "ack", "nack", "result",
                                       "output", "event", "cancel", "goaway"});
}

TEST_CASE("nack reasons round trip") {
  for (auto r : {msg::NackReason::seq_gap, msg::NackReason::unsupported_kind,
                 msg::NackReason::not_allowed, msg::NackReason::malformed,
                 msg::NackReason::busy}) {
    CHECK(nack_reason_from_string(to_string(r)) == r);
  }
  CHECK(std::string(to_string(msg::NackReason::seq_gap)) == "seq_gap");
  CHECK_FALSE(nack_reason_from_string("SEQ_GAP"));
  CHECK_FALSE(nack_reason_from_string(""));
}

TEST_CASE("statuses round trip") {
  for (auto s : {msg::Status::ok, msg::Status::failed, msg::Status::scheduled,
                 msg::Status::cancelled, msg::Status::timeout, msg::Status::duplicate}) {
    CHECK(status_from_string(to_string(s)) == s);
  }
  CHECK(std::string(to_string(msg::Status::cancelled)) == "cancelled");
  CHECK_FALSE(status_from_string("okay"));
}
