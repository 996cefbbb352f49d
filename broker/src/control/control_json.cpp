#include "control/control_json.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace fleetlink::broker {

using json = nlohmann::ordered_json;

std::string iso8601_utc_ms(std::uint64_t unix_ms) {
  // Every event carries a timestamp and a busy broker formats tens of thousands
  // a second, nearly all within the same second: the date and time part is
  // formatted once per second, only the milliseconds each time.
  thread_local std::uint64_t cached_secs = ~std::uint64_t{0};
  thread_local char cached[64] = {};
  const std::uint64_t secs = unix_ms / 1000;
  if (secs != cached_secs) {
    const auto t = static_cast<std::time_t>(secs);
    std::tm tm{};
    gmtime_r(&t, &tm);
    std::snprintf(cached, sizeof cached, "%04d-%02d-%02dT%02d:%02d:%02d.", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    cached_secs = secs;
  }
  const auto millis = static_cast<unsigned>(unix_ms % 1000);
  std::string out(cached);
  out += static_cast<char>('0' + millis / 100);
  out += static_cast<char>('0' + millis / 10 % 10);
  out += static_cast<char>('0' + millis % 10);
  out += 'Z';
  return out;
}

json iso8601_or_null(const std::optional<std::uint64_t>& unix_ms) {
  if (!unix_ms) return nullptr;
  return iso8601_utc_ms(*unix_ms);
}

namespace {

json time_or_null_if_zero(std::uint64_t unix_ms) {
  if (unix_ms == 0) return nullptr;
  return iso8601_utc_ms(unix_ms);
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 if invalid.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) noexcept {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;           // no overlong forms
    if (b0 == 0xED) hi = 0x9F;           // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;           // <= U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  return n;
}

}  // namespace

std::string to_utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t i = 0;
  while (i < bytes.size()) {
    const std::size_t n = utf8_sequence_length(bytes, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

json error_body(std::string_view code, std::string_view detail) {
  return json{{"error", code}, {"detail", detail}};
}

json rig_json(const RigView& rig, std::uint64_t now_ms, bool with_unacked) {
  json j{
      {"rig_id", rig.rig_id},
      {"state", rig.state},
      {"connected", rig.connected},
      {"boot_id", rig.boot_id},
      {"agent_version", rig.agent_version},
      {"labels", rig.labels},
      {"kinds", rig.kinds},
      {"peer", rig.peer},
      {"broker", rig.broker_id.empty() ? json(nullptr) : json(rig.broker_id)},
      {"connected_at", time_or_null_if_zero(rig.connected_at_ms)},
      {"first_seen_at", time_or_null_if_zero(rig.first_seen_ms)},
      {"last_seen_at", time_or_null_if_zero(rig.last_seen_ms)},
      {"last_ack_seq", rig.last_ack_seq},
      {"last_ack_at", iso8601_or_null(rig.last_ack_at_ms)},
      {"unresponsive_because", rig.unresponsive_because.empty() ? json(nullptr) : json(rig.unresponsive_because)},
      {"outbox_depth", rig.outbox_depth},
      {"outbox_capacity", rig.outbox_capacity},
      {"unsent", rig.unsent},
      {"unacked", rig.unacked.size()},
      {"held", rig.held},
      {"missed_pongs", rig.missed_pongs},
  };
  // Age of the last ACK as the broker sees it, so clients need not trust their own clock.
  if (rig.last_ack_at_ms) {
    j["last_ack_age_ms"] = now_ms > *rig.last_ack_at_ms ? now_ms - *rig.last_ack_at_ms : 0;
  } else {
    j["last_ack_age_ms"] = nullptr;
  }
  // The same for an offline rig's last sign of life (its disconnect, as the inventory has it).
  if (rig.last_seen_ms != 0) {
    j["last_seen_age_ms"] = now_ms > rig.last_seen_ms ? now_ms - rig.last_seen_ms : 0;
  } else {
    j["last_seen_age_ms"] = nullptr;
  }
  if (with_unacked) {
    json list = json::array();
    for (const UnackedCommand& u : rig.unacked) {
      list.push_back(json{{"cmd_id", u.cmd_id},
                          {"seq", u.seq},
                          {"kind", u.kind},
                          {"age_ms", u.age_ms},
                          {"sent", u.sent}});
    }
    j["unacked_commands"] = std::move(list);
  }
  return j;
}

json command_json(const CommandView& cmd) {
  json j{
      {"cmd_id", cmd.cmd_id},
      {"rig_id", cmd.rig_id},
      {"kind", cmd.kind},
      {"args", cmd.args},
      {"idempotency_key", cmd.idempotency_key.empty() ? json(nullptr) : json(cmd.idempotency_key)},
      {"job_id", cmd.job_id.empty() ? json(nullptr) : json(cmd.job_id)},
      {"operator", cmd.operator_name.empty() ? json(nullptr) : json(cmd.operator_name)},
      {"seq", cmd.seq},
      {"attempts", cmd.attempts},
      {"state", to_string(cmd.state)},
      {"detail", cmd.detail},
      {"enqueued_at", time_or_null_if_zero(cmd.enqueued_at_ms)},
      {"sent_at", iso8601_or_null(cmd.sent_at_ms)},
      {"acked_at", iso8601_or_null(cmd.acked_at_ms)},
      {"running_at", iso8601_or_null(cmd.running_at_ms)},
      {"finished_at", iso8601_or_null(cmd.finished_at_ms)},
      {"deliver_by", time_or_null_if_zero(cmd.deliver_by_ms)},
      {"timeout_s", cmd.timeout_s},
      {"acked_boot_id", cmd.acked_boot_id.empty() ? json(nullptr) : json(cmd.acked_boot_id)},
      {"cancel_requested_at", iso8601_or_null(cmd.cancel_requested_at_ms)},
      {"duplicate", cmd.duplicate},
      {"nack", nullptr},
      {"result", nullptr},
      {"streamed_bytes", cmd.streamed_bytes},
  };
  if (cmd.nack) {
    j["nack"] = json{{"reason", fleetlink::to_string(cmd.nack->reason)}, {"detail", cmd.nack->detail}};
  }
  if (cmd.result) {
    const msg::Result& r = *cmd.result;
    const std::string_view raw(reinterpret_cast<const char*>(r.output.data()), r.output.size());
    j["result"] = json{
        {"status", fleetlink::to_string(r.status)},
        {"exit_code", r.exit_code},
        {"signal", r.signal},
        {"output", to_utf8_lossy(raw)},
        {"truncated", r.truncated},
        {"dropped_bytes", r.dropped_bytes},
        {"detail", r.detail},
        {"started_at", time_or_null_if_zero(r.started_at_ms)},
        {"finished_at", time_or_null_if_zero(r.finished_at_ms)},
    };
  }
  return j;
}

CommandOutput output_of(const CommandView& cmd) {
  CommandOutput out;
  const std::uint64_t streamed_end = cmd.stream_next_offset;
  const std::uint64_t tail_start = streamed_end - std::min<std::uint64_t>(streamed_end, cmd.streamed_output.size());
  if (cmd.result) {
    const msg::Result& r = *cmd.result;
    out.total_bytes = std::max<std::uint64_t>(r.output.size() + r.dropped_bytes, streamed_end);
    // The RESULT's output is the head of the stream: the better view unless the
    // streamed tail reaches further.
    if (r.output.size() >= streamed_end || streamed_end == 0) {
      out.data.assign(reinterpret_cast<const char*>(r.output.data()), r.output.size());
      out.complete = !r.truncated && r.dropped_bytes == 0;
      return out;
    }
  } else {
    out.total_bytes = streamed_end;
  }
  out.data = cmd.streamed_output;
  out.offset = tail_start;
  out.complete = tail_start == 0 && cmd.stream_gap_bytes == 0 && cmd.result && !cmd.result->truncated;
  return out;
}

json command_output_json(const CommandView& cmd, const CommandOutput& out) {
  json j{{"cmd_id", cmd.cmd_id},
         {"rig_id", cmd.rig_id},
         {"state", to_string(cmd.state)},
         {"final", is_final(cmd.state)},
         {"offset", out.offset},
         {"data", to_utf8_lossy(out.data)},
         {"bytes", out.data.size()},
         {"total_bytes", out.total_bytes},
         {"complete", out.complete},
         {"exit_code", nullptr},
         {"signal", nullptr}};
  if (cmd.result) {
    j["exit_code"] = cmd.result->exit_code;
    j["signal"] = cmd.result->signal;
  }
  return j;
}

json enqueue_ok_json(const EnqueueOk& ok) {
  return json{{"cmd_id", ok.cmd_id},
              {"rig_id", ok.rig_id},
              {"seq", ok.seq == 0 ? json(nullptr) : json(ok.seq)},
              {"state", to_string(ok.state)},
              {"held", ok.held},
              {"existing", ok.existing},
              {"deliver_by", time_or_null_if_zero(ok.deliver_by_ms)}};
}

std::string enqueue_ok_json_text(const EnqueueOk& ok) {
  std::string out;
  out.reserve(160 + ok.cmd_id.size() + ok.rig_id.size());
  out += "{\"cmd_id\":";
  append_json_value(out, ok.cmd_id);
  out += ",\"rig_id\":";
  append_json_value(out, ok.rig_id);
  out += ",\"seq\":";
  out += ok.seq == 0 ? std::string("null") : std::to_string(ok.seq);
  out += ",\"state\":\"";
  out += to_string(ok.state);
  out += ok.held ? "\",\"held\":true" : "\",\"held\":false";
  out += ok.existing ? ",\"existing\":true" : ",\"existing\":false";
  out += ",\"deliver_by\":";
  if (ok.deliver_by_ms == 0) {
    out += "null";
  } else {
    out += '"';
    out += iso8601_utc_ms(ok.deliver_by_ms);
    out += '"';
  }
  out += '}';
  return out;
}

int enqueue_failure_status(EnqueueError e) noexcept {
  switch (e) {
    case EnqueueError::unknown_rig: return 404;
    case EnqueueError::rig_unresponsive: return 503;
    case EnqueueError::unsupported_kind: return 422;
    case EnqueueError::draining: return 503;
    case EnqueueError::bad_request: return 400;
    case EnqueueError::conflict: return 409;
    case EnqueueError::store_unavailable: return 503;
    case EnqueueError::registry_unavailable: return 503;
    case EnqueueError::route_timeout: return 504;
    case EnqueueError::kind_not_allowed: return 403;
  }
  return 500;
}

json enqueue_failure_json(const EnqueueFailure& f) {
  const char* code = to_string(f.error);
  if (f.error == EnqueueError::rig_unresponsive) {
    // The operator contract: exactly these six keys.
    return json{{"error", code},
                {"rig_id", f.rig_id},
                {"detail", f.detail},
                {"last_ack_seq", f.last_ack_seq},
                {"last_ack_at", iso8601_or_null(f.last_ack_at_ms)},
                {"suggested_action", f.suggested_action.empty() ? std::string("force_reconnect")
                                                                 : f.suggested_action}};
  }
  if (f.error == EnqueueError::bad_request) return error_body(code, f.detail);
  if (f.error == EnqueueError::conflict)
    return json{{"error", code}, {"rig_id", f.rig_id}, {"cmd_id", f.cmd_id}, {"detail", f.detail}};
  return json{{"error", code}, {"rig_id", f.rig_id}, {"detail", f.detail}};
}

json event_json(const FleetEvent& e) {
  json j{{"type", to_string(e.type)}, {"rig_id", e.rig_id}, {"at", time_or_null_if_zero(e.at_ms)}};
  j["cmd_id"] = e.cmd_id.empty() ? json(nullptr) : json(e.cmd_id);
  if (e.type == EventType::command_output) {
    // The bytes, and where they start in the command's output (a follower that
    // read the stored tail first skips what it has).
    j["offset"] = e.offset;
    j["data"] = e.detail;
    return j;
  }
  j["detail"] = e.detail;
  return j;
}

namespace {

bool plain_ascii(std::string_view s) noexcept {
  for (const char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

// A JSON string of ASCII text, escaped as nlohmann::json::dump does. Runs of
// characters that need no escape (nearly all text) are appended at once.
void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  std::size_t run = 0;  // start of the pending run of plain characters
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        out += "\\u00";
        out += kHex[u >> 4];
        out += kHex[u & 0xF];
    }
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

}  // namespace

void append_json_value(std::string& out, std::string_view s) {
  if (plain_ascii(s)) {
    append_json_string(out, s);
  } else {
    out += dump_json(nlohmann::ordered_json(std::string(s)));
  }
}

std::string event_json_text(const FleetEvent& e) {
  if (!plain_ascii(e.rig_id) || !plain_ascii(e.cmd_id) || !plain_ascii(e.detail))
    return dump_json(event_json(e));
  std::string out;
  out.reserve(96 + e.rig_id.size() + e.cmd_id.size() + e.detail.size());
  out += "{\"type\":";
  append_json_string(out, to_string(e.type));
  out += ",\"rig_id\":";
  append_json_string(out, e.rig_id);
  out += ",\"at\":";
  if (e.at_ms == 0) {
    out += "null";
  } else {
    out += '"';
    out += iso8601_utc_ms(e.at_ms);
    out += '"';
  }
  out += ",\"cmd_id\":";
  if (e.cmd_id.empty()) {
    out += "null";
  } else {
    append_json_string(out, e.cmd_id);
  }
  if (e.type == EventType::command_output) {
    out += ",\"offset\":";
    out += std::to_string(e.offset);
    out += ",\"data\":";
  } else {
    out += ",\"detail\":";
  }
  append_json_string(out, e.detail);
  out += '}';
  return out;
}

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::uint64_t unix_now_ms() noexcept {
  using namespace std::chrono;
  return static_cast<std::uint64_t>(
      duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
}

}  // namespace fleetlink::broker
