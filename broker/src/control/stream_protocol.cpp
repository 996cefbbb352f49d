#include "control/stream_protocol.hpp"

#include <nlohmann/json.hpp>

#include "control/command_request.hpp"
#include "control/control_json.hpp"

namespace fleetlink::broker::stream {

namespace {

using json = nlohmann::ordered_json;

LineError bad_request(std::string ref, std::string detail) {
  return LineError{std::move(ref), "bad_request", std::move(detail)};
}

void field(std::string& out, std::string_view name, std::string_view value) {
  out += ",\"";
  out += name;
  out += "\":";
  append_json_value(out, value);
}

}  // namespace

Request parse_line(std::string_view line) {
  if (line.size() > kMaxLineBytes) {
    return bad_request({}, "line over " + std::to_string(kMaxLineBytes) + " bytes");
  }
  // The library's own parser, without exceptions: outside bytes must not throw
  // through the event loop.
  const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad_request({}, "a line must be one JSON object");
  std::string ref;
  if (const auto r = j.find("ref"); r != j.end()) {
    if (!r->is_string() || r->get_ref<const std::string&>().size() > kMaxRefBytes) {
      return bad_request({}, "\"ref\" must be a string of at most 64 bytes");
    }
    ref = r->get<std::string>();
  }
  const auto op = j.find("op");
  if (op == j.end() || !op->is_string()) return bad_request(ref, "\"op\" is required");
  if (*op != "send") return bad_request(ref, "unknown op (known: send)");
  SendRequest s;
  s.ref = ref;
  const auto rig = j.find("rig_id");
  if (rig == j.end() || !rig->is_string() || rig->get_ref<const std::string&>().empty()) {
    return bad_request(ref, "\"rig_id\" is required and must be a non-empty string");
  }
  s.request.rig_id = rig->get<std::string>();
  if (auto bad = read_command_request(j, s.request)) return bad_request(ref, std::move(*bad));
  if (const auto n = j.find("notify"); n != j.end()) {
    if (*n == "acked") {
      s.until_done = false;
    } else if (*n == "output") {
      s.with_output = true;
    } else if (*n != "done") {
      return bad_request(ref, "\"notify\" must be \"acked\", \"done\" or \"output\"");
    }
  }
  return s;
}

std::string queued_line(std::string_view ref, const EnqueueOk& ok) {
  std::string out = "{\"op\":\"queued\"";
  field(out, "ref", ref);
  field(out, "cmd_id", ok.cmd_id);
  field(out, "rig_id", ok.rig_id);
  out += ",\"seq\":";
  out += ok.seq == 0 ? std::string("null") : std::to_string(ok.seq);
  field(out, "state", to_string(ok.state));
  if (ok.held) out += ",\"held\":true";
  if (ok.existing) out += ",\"existing\":true";
  out += "}\n";
  return out;
}

std::string refused_line(std::string_view ref, const EnqueueFailure& failure) {
  std::string out = "{\"op\":\"refused\"";
  field(out, "ref", ref);
  field(out, "error", to_string(failure.error));
  field(out, "rig_id", failure.rig_id);
  field(out, "detail", failure.detail);
  out += "}\n";
  return out;
}

std::string error_line(const LineError& e) {
  std::string out = "{\"op\":\"error\"";
  field(out, "ref", e.ref);
  field(out, "error", e.error);
  field(out, "detail", e.detail);
  out += "}\n";
  return out;
}

std::string event_line(std::string_view op, std::string_view ref, std::string_view cmd_id,
                       std::string_view detail) {
  std::string out = "{\"op\":";
  append_json_value(out, op);
  field(out, "ref", ref);
  field(out, "cmd_id", cmd_id);
  field(out, "detail", detail);
  out += "}\n";
  return out;
}

std::string output_line(std::string_view ref, std::string_view cmd_id, std::uint64_t offset, std::string_view data) {
  std::string out = "{\"op\":\"output\"";
  field(out, "ref", ref);
  field(out, "cmd_id", cmd_id);
  out += ",\"offset\":";
  out += std::to_string(offset);
  field(out, "data", data);
  out += "}\n";
  return out;
}

std::string_view op_for_event(EventType event_type) noexcept {
  switch (event_type) {
    case EventType::command_acked: return "acked";
    case EventType::command_done: return "done";
    case EventType::command_output: return "output";
    default: return {};
  }
}

}  // namespace fleetlink::broker::stream
