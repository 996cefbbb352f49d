// Pure helpers of the control API: time format, UTF-8 repair, path/query
// parsing, bearer tokens, SSE framing, /proc parsing.
#include <doctest/doctest.h>

#include "control/control_json.hpp"
#include "observe/process_stats.hpp"
#include "control/http_util.hpp"
#include "control/sse_format.hpp"

using namespace fleetlink::broker;

TEST_CASE("control json: ISO-8601 UTC with milliseconds") {
  CHECK(iso8601_utc_ms(0) == "1970-01-01T00:00:00.000Z");
  CHECK(iso8601_utc_ms(1'795'638'706'123ULL) == "2026-11-25T20:31:46.123Z");
  // The same second again (its formatted part is reused), then another one.
  CHECK(iso8601_utc_ms(1'795'638'706'007ULL) == "2026-11-25T20:31:46.007Z");
  CHECK(iso8601_utc_ms(1'795'638'706'990ULL) == "2026-11-25T20:31:46.990Z");
  CHECK(iso8601_utc_ms(1'795'638'707'000ULL) == "2026-11-25T20:31:47.000Z");
  CHECK(iso8601_utc_ms(0) == "1970-01-01T00:00:00.000Z");
  CHECK(iso8601_or_null(std::nullopt).is_null());
  CHECK(iso8601_or_null(5ULL) == "1970-01-01T00:00:00.005Z");
}

TEST_CASE("control json: invalid UTF-8 becomes U+FFFD, valid text is untouched") {
  CHECK(to_utf8_lossy("plain ascii\n") == "plain ascii\n");
  CHECK(to_utf8_lossy("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80") ==
        "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  CHECK(to_utf8_lossy("a\xFF" "b") == "a\xEF\xBF\xBD" "b");
  CHECK(to_utf8_lossy("\xC3") == "\xEF\xBF\xBD");                   // truncated sequence
  CHECK(to_utf8_lossy("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");   // overlong
  CHECK(to_utf8_lossy("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  // dump_json never throws on bad UTF-8 anywhere in the document
  nlohmann::ordered_json j{{"label", std::string("x\xFFy")}};
  CHECK(dump_json(j) == "{\"label\":\"x\xEF\xBF\xBDy\"}");
}

TEST_CASE("control json: state names") {
  CHECK(std::string(to_string(CommandState::undeliverable)) == "undeliverable");
  CHECK(std::string(to_string(CommandState::timed_out)) == "timed_out");
  for (std::size_t i = 0; i < fleetlink::broker::kCommandStateCount; ++i) {
    const auto state = static_cast<CommandState>(i);
    CHECK(fleetlink::broker::command_state_from_string(to_string(state)) == state);
  }
  CHECK_FALSE(fleetlink::broker::command_state_from_string("lost").has_value());
  CHECK(enqueue_failure_status(EnqueueError::conflict) == 409);
  CHECK(enqueue_failure_status(EnqueueError::store_unavailable) == 503);
  CHECK(std::string(to_string(EnqueueError::rig_unresponsive)) == "rig_unresponsive");
  CHECK(enqueue_failure_status(EnqueueError::unknown_rig) == 404);
  CHECK(enqueue_failure_status(EnqueueError::unsupported_kind) == 422);
  CHECK(enqueue_failure_status(EnqueueError::kind_not_allowed) == 403);
  CHECK(enqueue_failure_status(EnqueueError::rig_unresponsive) == 503);
  CHECK(enqueue_failure_status(EnqueueError::bad_request) == 400);
}

TEST_CASE("http util: paths, percent-decoding and queries") {
  CHECK(split_path("/v1/rigs/rig-1/commands") ==
        std::vector<std::string>{"v1", "rigs", "rig-1", "commands"});
  CHECK(split_path("//v1//rigs/") == std::vector<std::string>{"v1", "rigs"});
  CHECK(split_path("/") .empty());
  CHECK(split_path("/v1/rigs/rig%2F0414") == std::vector<std::string>{"v1", "rigs", "rig/0414"});
  CHECK(percent_decode("%zz%4") == "%zz%4");
  const auto q = parse_query("a=1&b=x%20y+z&flag&=v");
  CHECK(q.at("a") == "1");
  CHECK(q.at("b") == "x y z");
  CHECK(q.at("flag").empty());
}

TEST_CASE("http util: bearer tokens") {
  CHECK(bearer_token_matches("Bearer abc", "abc"));
  CHECK(bearer_token_matches("BEARER abc ", "abc"));
  CHECK_FALSE(bearer_token_matches("Bearer abcd", "abc"));
  CHECK_FALSE(bearer_token_matches("Bearer ab", "abc"));
  CHECK_FALSE(bearer_token_matches("abc", "abc"));
  CHECK_FALSE(bearer_token_matches("", "abc"));
  CHECK_FALSE(bearer_token_matches("Bearer ", ""));
  CHECK(std::string(http_reason_phrase(503)) == "Service Unavailable");
}

TEST_CASE("sse: one event per block, JSON data on one line") {
  FleetEvent e{EventType::command_done, "rig-1", "c-1", "status ok\nsecond line", 1'795'638'706'123ULL};
  const std::string s = format_sse_event(e, 7);
  CHECK(s.rfind("id: 7\nevent: command_done\ndata: {", 0) == 0);
  CHECK(s.substr(s.size() - 2) == "\n\n");
  CHECK(std::count(s.begin(), s.end(), '\n') == 4);  // id, event, data, blank
  CHECK(s.find("\"cmd_id\":\"c-1\"") != std::string::npos);
}

TEST_CASE("sse: the per-client queue is bounded") {
  SseQueue q(10);
  CHECK(q.push("12345"));
  CHECK(q.push("6789"));
  CHECK_FALSE(q.push("ab"));
  CHECK(q.overflowed());
  CHECK(q.bytes() == 9);
  CHECK(q.pop(6) == "123456");  // one byte stream: a take may split what was pushed
  CHECK(q.pop(100) == "789");
  CHECK(q.empty());
  CHECK_FALSE(q.push("x"));  // overflowed stays overflowed: the stream is closed
  // Events are formatted straight into the queue, exactly as format_sse_event does.
  SseQueue big;
  FleetEvent e;
  e.type = EventType::command_acked;
  e.rig_id = "rig-1";
  e.cmd_id = "c-1";
  e.at_ms = 1'795'638'706'123ULL;
  CHECK(big.push_event(e, 3));
  CHECK(big.push(kSseHeartbeat));
  CHECK(big.pop(1 << 20) == format_sse_event(e, 3) + std::string(kSseHeartbeat));
  SseQueue small(20);
  CHECK_FALSE(small.push_event(e, 1));  // over the cap: nothing queued
  CHECK(small.empty());
  CHECK(small.overflowed());
}

TEST_CASE("process stats: VmRSS parsing and live gauges") {
  CHECK(parse_vmrss_bytes("Name:\tx\nVmRSS:\t    1234 kB\nThreads: 1\n") == 1234.0 * 1024);
  CHECK_FALSE(parse_vmrss_bytes("Name:\tx\n").has_value());
  const auto gauges = read_process_gauges();
  CHECK(gauges.at("process_resident_memory_bytes") > 0);
  CHECK(gauges.at("process_open_fds") >= 3);
}

TEST_CASE("control json: text written directly equals the library's dump") {
  using fleetlink::broker::append_json_value;
  for (const std::string& s : {std::string("plain"), std::string(""), std::string("q\"b\\s/\n\r\t\b\f"),
                              std::string("ctl\x01\x1f end"), std::string("caf\xc3\xa9"),
                              std::string("bad \xff utf8"), std::string(200, 'x') + "\"" + "y"}) {
    std::string out;
    append_json_value(out, s);
    CHECK(out == dump_json(nlohmann::ordered_json(s)));
  }
  fleetlink::broker::EnqueueOk ok{"01a00000-0000-7000-8000-000000000001", "rig-\"7\"", 42};
  CHECK(fleetlink::broker::enqueue_ok_json_text(ok) == dump_json(fleetlink::broker::enqueue_ok_json(ok)));
  ok.seq = 0;  // held for an offline rig
  ok.held = true;
  ok.existing = true;
  ok.deliver_by_ms = 1'800'000'300'000ULL;
  CHECK(fleetlink::broker::enqueue_ok_json_text(ok) == dump_json(fleetlink::broker::enqueue_ok_json(ok)));
}
