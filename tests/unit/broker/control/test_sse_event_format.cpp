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
  // Output: its bytes as "data" with their offset, ASCII or not.
  check_same({EventType::command_output, "rig-1", "c1", "line 1\nline 2\n", 42, 1234567});
  check_same({EventType::command_output, "rig-1", "c1", "\xff\xfe bin", 42, 0});
}

TEST_CASE("command_output events carry data and offset, not detail") {
  const FleetEvent e{EventType::command_output, "rig-1", "c1", "step 3 of 7\n", 1795465906123, 4096};
  const std::string text = event_json_text(e);
  CHECK(text == "{\"type\":\"command_output\",\"rig_id\":\"rig-1\",\"at\":\"2026-11-23T20:31:46.123Z\","
                "\"cmd_id\":\"c1\",\"offset\":4096,\"data\":\"step 3 of 7\\n\"}");
  // Two chunks alike but at another offset are two events (the formatter's cache keys on it).
  FleetEvent later = e;
  later.offset = 8192;
  CHECK(format_sse_event(later, 2).find("\"offset\":8192") != std::string::npos);
  CHECK(format_sse_event(e, 3).find("\"offset\":4096") != std::string::npos);
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
