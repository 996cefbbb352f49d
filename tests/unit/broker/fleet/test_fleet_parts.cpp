// The small pure parts of the fleet core: the outbound ladder, frame
// reassembly, the frame-error policy and the event bus.
#include <doctest/doctest.h>

#include "fleet/events.hpp"
#include "fleet/frame_assembler.hpp"
#include "fleet/frame_errors.hpp"
#include "fleet/outbound.hpp"

using namespace fleetlink;
using namespace fleetlink::broker;

TEST_CASE("outbound: ping > welcome > cancel > command > goaway") {
  OutboundFlags f;
  CHECK(next_outbound(f, false) == OutboundKind::none);
  f.goaway = true;
  CHECK(next_outbound(f, false) == OutboundKind::goaway);
  CHECK(next_outbound(f, true) == OutboundKind::command);
  f.cancels = true;
  CHECK(next_outbound(f, true) == OutboundKind::cancel);
  f.welcome = true;
  CHECK(next_outbound(f, true) == OutboundKind::welcome);
  f.ping = true;
  CHECK(next_outbound(f, true) == OutboundKind::ping);
}

TEST_CASE("frame assembler: a whole frame passes through; pieces are joined; over the limit is refused") {
  FrameAssembler a;
  const Bytes whole{1, 2, 3};
  FrameAssembler::Piece p = a.add(whole, 0, true, 16);
  CHECK(p.status == FrameAssembler::Status::complete);
  CHECK(p.frame.data() == whole.data());  // no copy
  CHECK_FALSE(p.owner);
  const Bytes first{1, 2}, second{3, 4};
  p = a.add(first, 2, false, 16);
  CHECK(p.status == FrameAssembler::Status::partial);
  CHECK(a.holding());
  p = a.add(second, 0, true, 16);
  REQUIRE(p.status == FrameAssembler::Status::complete);
  CHECK(Bytes(p.frame.begin(), p.frame.end()) == Bytes{1, 2, 3, 4});
  CHECK_FALSE(a.holding());
  // What lws says is still to come counts before it arrives.
  p = a.add(first, 15, false, 16);
  CHECK(p.status == FrameAssembler::Status::too_large);
  CHECK_FALSE(a.holding());
}

TEST_CASE("frame errors: the decode error -> close code table") {
  auto code = [](Errc e, bool live, Strictness s = Strictness::lenient) {
    return decode_fault(Error{e, "x"}, live, s);
  };
  CHECK(code(Errc::malformed, true).code == CloseCode::malformed);
  CHECK(code(Errc::truncated, false).code == CloseCode::malformed);
  CHECK(code(Errc::missing_field, true).code == CloseCode::malformed);
  CHECK(code(Errc::bad_field, true).code == CloseCode::malformed);
  CHECK(code(Errc::bad_field, true).reason == "malformed frame: x");  // the decoder's sentence
  CHECK(decode_fault(Error{Errc::bad_field, ""}, true, Strictness::lenient).reason == "malformed frame: bad_field");
  // A field or container over its limit in a frame under max_frame_bytes is
  // malformed content (4400), never 1009: that is for the frame's own size.
  CHECK(code(Errc::too_large, true).code == CloseCode::malformed);
  CHECK(code(Errc::too_large, false).code == CloseCode::malformed);
  CHECK(decode_fault(Error{Errc::too_large, "rig_id: must be 1..64 characters"}, false, Strictness::lenient).reason ==
        "malformed frame: rig_id: must be 1..64 characters");
  CHECK(decode_fault(Error{Errc::too_large, "a\x01\xff" "b"}, false, Strictness::lenient).reason == "malformed frame: a??b");
  CHECK(code(Errc::unsupported_version, false).code == CloseCode::unsupported_version);
  CHECK_FALSE(code(Errc::unknown_type, true).close);
  CHECK(code(Errc::unknown_type, true, Strictness::strict).code == CloseCode::unknown_type);
  CHECK(code(Errc::unknown_type, false).code == CloseCode::malformed);
  CHECK(oversized_fault(1024).code == CloseCode::message_too_big);
  CHECK(flood_fault().code == CloseCode::rate_limited);
  CHECK(not_hello_fault().code == CloseCode::malformed);
  CHECK(answers_a_command(msg::Ack{}));
  CHECK(answers_a_command(msg::Result{}));
  CHECK_FALSE(answers_a_command(msg::Event{}));
  CHECK_FALSE(answers_a_command(msg::Hello{}));
}

TEST_CASE("event bus: by type, by command, unsubscribing while delivering") {
  EventBus bus;
  std::vector<std::string> acked, about_c1;
  const auto a = bus.subscribe({EventType::command_acked}, [&](const FleetEvent& e) { acked.push_back(e.cmd_id); });
  EventBus::Id c = 0;
  c = bus.subscribe_command("c1", [&](const FleetEvent& e) {
    about_c1.push_back(to_string(e.type));
    if (is_final(e.type)) bus.unsubscribe(c);
  });
  CHECK(bus.wants(EventType::command_acked));
  CHECK_FALSE(bus.wants(EventType::command_done));
  CHECK(bus.wants(EventType::command_done, "c1"));
  CHECK_FALSE(bus.wants(EventType::command_done, "c2"));
  bus.emit({EventType::command_acked, "r", "c1", "", 1});
  bus.emit({EventType::command_acked, "r", "c2", "", 1});
  bus.emit({EventType::command_done, "r", "c1", "ok", 1});
  bus.emit({EventType::command_done, "r", "c1", "ok", 1});  // c1's subscriber is gone
  CHECK(acked == std::vector<std::string>{"c1", "c2"});
  CHECK(about_c1 == std::vector<std::string>{"command_acked", "command_done"});
  CHECK_FALSE(bus.wants(EventType::command_done, "c1"));
  bus.unsubscribe(a);
  CHECK_FALSE(bus.wants(EventType::command_acked));
  CHECK(bus.subscriptions() == 0);
}
