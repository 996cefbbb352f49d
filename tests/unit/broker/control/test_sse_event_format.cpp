// The direct event formatter must give exactly the JSON of the nlohmann tree it replaced.
#include <doctest/doctest.h>

#include <string>

#include "control/control_json.hpp"
#include "control/sse_format.hpp"

using namespace fleetlink::broker;

namespace {
void check_same(const FleetEvent& e) {
  CHECK(event_json_text(e) == dump_json(event_json(e)));
}
}  // namespace

TEST_CASE("event_json_text: byte for byte the tree's JSON") {
  check_same({EventType::command_acked, "rig-0001", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "", 1795465906123});
  check_same({EventType::command_done, "rig-0001", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "succeeded", 1});
  check_same({EventType::rig_connected, "rig-x", "", "boot", 0});
  check_same({EventType::drain_started, "", "", "", 0});
  std::string all_ascii;
  for (int c = 1; c < 128; ++c) all_ascii += static_cast<char>(c);
  check_same({EventType::rig_event, all_ascii, "a\"b\\c", all_ascii, 1795465906999});
  check_same({EventType::rig_event, "r", "", std::string("nul\0inside", 10), 42});
  // Not ASCII: valid UTF-8 and invalid bytes go through the tree's replacement rules.
  check_same({EventType::rig_event, "r\xc3\xa9", "", "caf\xc3\xa9 \xff\xfe end \xe2\x82", 42});
}

TEST_CASE("format_sse_event: each subscriber's id, the same data") {
  FleetEvent e{EventType::command_acked, "rig-1", "c1", "", 1795465906123};
  std::string a = format_sse_event(e, 7);
  std::string b = format_sse_event(e, 8);
  CHECK(a == "id: 7\nevent: command_acked\ndata: " + dump_json(event_json(e)) + "\n\n");
  CHECK(b == "id: 8\nevent: command_acked\ndata: " + dump_json(event_json(e)) + "\n\n");
  FleetEvent f = e;
  f.detail = "duplicate";   // a different event right after: not the cached JSON
  CHECK(format_sse_event(f, 9) == "id: 9\nevent: command_acked\ndata: " + dump_json(event_json(f)) + "\n\n");
  // Event names are typed: each one a single-line identifier, so the "event:" line stays one line.
  for (EventType t : all_event_types()) {
    FleetEvent g{t, "r", "", "", 0};
    CHECK(format_sse_event(g, 1).rfind("id: 1\nevent: " + std::string(to_string(t)) + "\ndata: ", 0) == 0);
    CHECK(event_type_from_string(to_string(t)) == t);
  }
  CHECK_FALSE(event_type_from_string("bad\ntype").has_value());
}
