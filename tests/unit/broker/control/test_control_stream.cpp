// The control stream's lines (pure): request parsing and answer formatting.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <variant>

#include "control/control_json.hpp"
#include "control/stream_protocol.hpp"

using namespace fleetlink::broker;
using nlohmann::ordered_json;

namespace {

stream::LineError error_of(std::string_view line) {
  const stream::Request r = stream::parse_line(line);
  REQUIRE(std::holds_alternative<stream::LineError>(r));
  return std::get<stream::LineError>(r);
}

}  // namespace

TEST_CASE("control stream: a send request with every field") {
  const stream::Request r = stream::parse_line(
      R"({"op":"send","ref":"r1","rig_id":"rig-0414","kind":"dmesg","args":{"lines":50,"all":true,"s":"x"},"notify":"acked",)"
      R"("cmd_id":"01a00000-0000-7000-8000-000000000001","idempotency_key":"k1","deliver_within_s":5,"timeout_s":9,"hold":true})");
  REQUIRE(std::holds_alternative<stream::SendRequest>(r));
  const auto& s = std::get<stream::SendRequest>(r);
  CHECK(s.ref == "r1");
  CHECK(s.request.rig_id == "rig-0414");
  CHECK(s.request.kind == "dmesg");
  CHECK(s.request.args == fleetlink::StringMap{{"all", "true"}, {"lines", "50"}, {"s", "x"}});
  CHECK(s.request.cmd_id == "01a00000-0000-7000-8000-000000000001");
  CHECK(s.request.idempotency_key == "k1");
  CHECK(s.request.deliver_within_s == 5u);
  CHECK(s.request.timeout_s == 9u);
  CHECK(s.request.hold);
  CHECK_FALSE(s.until_done);
  // Defaults: no ref, no args, until done.
  const stream::Request dr = stream::parse_line(R"({"op":"send","rig_id":"a","kind":"k"})");
  REQUIRE(std::holds_alternative<stream::SendRequest>(dr));
  const auto& d = std::get<stream::SendRequest>(dr);
  CHECK(d.ref.empty());
  CHECK(d.request.args.empty());
  CHECK_FALSE(d.request.deliver_within_s.has_value());
  CHECK_FALSE(d.request.hold);
  CHECK(d.until_done);
}

TEST_CASE("control stream: malformed lines are errors that keep the ref when they can") {
  CHECK(error_of("").error == "bad_request");
  CHECK(error_of("{\"op\":").detail == "a line must be one JSON object");
  CHECK(error_of("[1,2]").detail == "a line must be one JSON object");
  CHECK(error_of("\xff\xfe").error == "bad_request");
  CHECK(error_of(R"({"ref":7,"op":"send"})").ref.empty());
  CHECK(error_of(R"({"ref":")" + std::string(65, 'r') + R"(","op":"send"})").ref.empty());
  CHECK(error_of(R"({"ref":"a"})").ref == "a");
  CHECK(error_of(R"({"ref":"a","op":"launch"})").detail == "unknown op (known: send)");
  CHECK(error_of(R"({"ref":"a","op":"send","kind":"k"})").detail.find("rig_id") != std::string::npos);
  CHECK(error_of(R"({"ref":"a","op":"send","rig_id":"","kind":"k"})").detail.find("rig_id") != std::string::npos);
  CHECK(error_of(R"({"ref":"a","op":"send","rig_id":"r"})").detail.find("kind") != std::string::npos);
  CHECK(error_of(R"({"op":"send","rig_id":"r","kind":"k","args":[1]})").detail.find("args") != std::string::npos);
  CHECK(error_of(R"({"op":"send","rig_id":"r","kind":"k","args":{"a":{}}})").detail == "\"args.a\" must be a string");
  CHECK(error_of(R"({"op":"send","rig_id":"r","kind":"k","notify":"never"})").detail.find("notify") != std::string::npos);
  CHECK(error_of(std::string(stream::kMaxLineBytes + 1, ' ')).detail.find("line over") == 0);
  CHECK(error_of(R"({"op":"send","rig_id":"r","kind":"k","timeout_s":-1})").detail.find("timeout_s") != std::string::npos);
  CHECK(error_of(R"({"op":"send","rig_id":"r","kind":"k","deliver_within_s":"soon"})").detail.find("deliver_within_s") !=
        std::string::npos);
  CHECK(error_of(R"({"op":"send","rig_id":"r","kind":"k","hold":"yes"})").detail.find("hold") != std::string::npos);
  CHECK(error_of(R"({"op":"send","rig_id":"r","kind":"k","cmd_id":7})").detail.find("cmd_id") != std::string::npos);
}

TEST_CASE("control stream: answer lines are one JSON object each, escaped like the library") {
  fleetlink::broker::EnqueueOk ok{"01a00000-0000-7000-8000-000000000001", "rig-\"7\"", 9};
  const std::string q = stream::queued_line("r\n1", ok);
  REQUIRE(q.back() == '\n');
  const ordered_json qj = ordered_json::parse(q);
  CHECK(dump_json(qj) + "\n" == q);
  CHECK(qj["op"] == "queued");
  CHECK(qj["ref"] == "r\n1");
  CHECK(qj["seq"] == 9);
  CHECK(qj["state"] == "queued");
  ok.seq = 0;
  ok.held = true;
  const ordered_json held = ordered_json::parse(stream::queued_line("r", ok));
  CHECK(held["seq"].is_null());
  CHECK(held["held"] == true);

  fleetlink::broker::EnqueueFailure f;
  f.error = EnqueueError::unknown_rig;
  f.rig_id = "rig-\xc3\xa9";
  f.detail = "not here";
  const std::string r = stream::refused_line("x", f);
  CHECK(dump_json(ordered_json::parse(r)) + "\n" == r);
  CHECK(ordered_json::parse(r)["error"] == "unknown_rig");

  const std::string e = stream::error_line({"", "bad_request", "bad \xff byte"});
  CHECK(ordered_json::parse(e)["detail"] == "bad \xef\xbf\xbd byte");  // replaced, still valid JSON

  const std::string a = stream::event_line("acked", "r1", "c1", "duplicate");
  CHECK(a == "{\"op\":\"acked\",\"ref\":\"r1\",\"cmd_id\":\"c1\",\"detail\":\"duplicate\"}\n");
}

TEST_CASE("control stream: which fleet events a stream carries") {
  CHECK(stream::op_for_event(EventType::command_acked) == "acked");
  CHECK(stream::op_for_event(EventType::command_done) == "done");
  CHECK(stream::op_for_event(EventType::command_running).empty());
  CHECK(stream::op_for_event(EventType::rig_connected).empty());
}

TEST_CASE("control stream: notify \"output\" asks for the output lines, until done") {
  const stream::Request r = stream::parse_line(R"({"op":"send","ref":"r1","rig_id":"r","kind":"suite","notify":"output"})");
  REQUIRE(std::holds_alternative<stream::SendRequest>(r));
  const auto& s = std::get<stream::SendRequest>(r);
  CHECK(s.with_output);
  CHECK(s.until_done);
  const auto plain = std::get<stream::SendRequest>(stream::parse_line(R"({"op":"send","rig_id":"r","kind":"k"})"));
  CHECK_FALSE(plain.with_output);
  const std::string line = stream::output_line("r1", "c1", 4096, "step 2\n\xff");
  CHECK(line.back() == '\n');
  const ordered_json j = ordered_json::parse(line);
  CHECK(j["op"] == "output");
  CHECK(j["ref"] == "r1");
  CHECK(j["cmd_id"] == "c1");
  CHECK(j["offset"] == 4096);
  CHECK(j["data"] == "step 2\n\xef\xbf\xbd");  // invalid UTF-8 replaced, the line stays JSON
  CHECK(stream::op_for_event(EventType::command_output) == "output");
}

TEST_CASE("command output: the RESULT's head or the streamed tail, whichever has more") {
  CommandView v;
  v.cmd_id = "c1";
  v.rig_id = "r";
  v.state = CommandState::running;
  v.streamed_output = "abcdef";
  v.stream_next_offset = 6;
  CommandOutput o = output_of(v);
  CHECK(o.data == "abcdef");
  CHECK(o.offset == 0);
  CHECK(o.total_bytes == 6);
  CHECK_FALSE(o.complete);  // still running
  // The tail of a long stream: it starts where it starts.
  v.streamed_output = "tail";
  v.stream_next_offset = 100'000;
  o = output_of(v);
  CHECK(o.offset == 100'000 - 4);
  CHECK_FALSE(o.complete);
  // Finished with a RESULT holding all of it: the RESULT's output, complete.
  v.stream_next_offset = 6;
  v.streamed_output = "abcdef";
  v.state = CommandState::succeeded;
  fleetlink::msg::Result r;
  r.output = fleetlink::Bytes{'a', 'b', 'c', 'd', 'e', 'f', 'g'};
  r.exit_code = 0;
  v.result = r;
  o = output_of(v);
  CHECK(o.data == "abcdefg");
  CHECK(o.complete);
  const ordered_json j = command_output_json(v, o);
  CHECK(j["final"] == true);
  CHECK(j["exit_code"] == 0);
  CHECK(j["bytes"] == 7);
  // A RESULT cut short (dropped bytes): not complete, and the total counts them.
  v.result->dropped_bytes = 10;
  v.result->truncated = true;
  o = output_of(v);
  CHECK_FALSE(o.complete);
  CHECK(o.total_bytes == 17);
}
