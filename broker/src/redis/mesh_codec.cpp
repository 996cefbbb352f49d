#include "redis/mesh_codec.hpp"

#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace fleetlink::broker::redis {
namespace {

using nlohmann::json;

struct BadNumber : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A seq, a time, a count: a JSON integer >= 0 that fits T. get<T>() would take
// -1, 1.5, true or 1e30 and cast it (wrapped, truncated, or undefined behaviour).
template <typename T>
T whole(const json& j, const char* key) {
  const json& v = j.at(key);
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<T>::max()))
    throw BadNumber(std::string(key) + " is not a whole number in range");
  return static_cast<T>(v.get<std::uint64_t>());
}

json request_json(const CommandRequest& r) {
  json j{{"rig_id", r.rig_id}, {"kind", r.kind},   {"args", r.args},       {"cmd_id", r.cmd_id},
         {"key", r.idempotency_key}, {"hold", r.hold}, {"job_id", r.job_id}};
  if (r.deliver_within_s) j["deliver_within_s"] = *r.deliver_within_s;
  if (r.timeout_s) j["timeout_s"] = *r.timeout_s;
  // Left out when empty: a broker older than the operators file reads the note as before.
  if (!r.operator_name.empty()) j["operator"] = r.operator_name;
  return j;
}

CommandRequest request_of(const json& j) {
  CommandRequest r;
  r.rig_id = j.at("rig_id").get<std::string>();
  r.kind = j.at("kind").get<std::string>();
  r.args = j.at("args").get<StringMap>();
  r.cmd_id = j.at("cmd_id").get<std::string>();
  r.idempotency_key = j.at("key").get<std::string>();
  r.hold = j.at("hold").get<bool>();
  r.job_id = j.at("job_id").get<std::string>();
  if (j.contains("deliver_within_s")) r.deliver_within_s = whole<std::uint32_t>(j, "deliver_within_s");
  if (j.contains("timeout_s")) r.timeout_s = whole<std::uint32_t>(j, "timeout_s");
  // Optional: a note from an older broker has none (and its command no operator).
  if (j.contains("operator")) r.operator_name = j.at("operator").get<std::string>();
  return r;
}

json outcome_json(const EnqueueOutcome& o) {
  if (const auto* ok = std::get_if<EnqueueOk>(&o))
    return json{{"ok", true},
                {"cmd_id", ok->cmd_id},
                {"rig_id", ok->rig_id},
                {"seq", ok->seq},
                {"state", to_string(ok->state)},
                {"existing", ok->existing},
                {"held", ok->held},
                {"deliver_by_ms", ok->deliver_by_ms}};
  const auto& f = std::get<EnqueueFailure>(o);
  json j{{"ok", false},
         {"error", to_string(f.error)},
         {"rig_id", f.rig_id},
         {"detail", f.detail},
         {"last_ack_seq", f.last_ack_seq},
         {"suggested_action", f.suggested_action},
         {"cmd_id", f.cmd_id}};
  if (f.last_ack_at_ms) j["last_ack_at_ms"] = *f.last_ack_at_ms;
  return j;
}

std::optional<EnqueueError> enqueue_error_from_string(std::string_view s) {
  for (std::uint8_t i = 0; i <= static_cast<std::uint8_t>(EnqueueError::kind_not_allowed); ++i) {
    const auto e = static_cast<EnqueueError>(i);
    if (s == to_string(e)) return e;
  }
  return std::nullopt;
}

Expected<EnqueueOutcome> outcome_of(const json& j) {
  if (j.at("ok").get<bool>()) {
    EnqueueOk ok;
    ok.cmd_id = j.at("cmd_id").get<std::string>();
    ok.rig_id = j.at("rig_id").get<std::string>();
    ok.seq = whole<std::uint64_t>(j, "seq");
    const auto state = command_state_from_string(j.at("state").get<std::string>());
    if (!state) return make_error(Errc::malformed, "mesh note: unknown command state");
    ok.state = *state;
    ok.existing = j.at("existing").get<bool>();
    ok.held = j.at("held").get<bool>();
    ok.deliver_by_ms = whole<std::uint64_t>(j, "deliver_by_ms");
    return EnqueueOutcome{std::move(ok)};
  }
  EnqueueFailure f;
  const auto e = enqueue_error_from_string(j.at("error").get<std::string>());
  if (!e) return make_error(Errc::malformed, "mesh note: unknown enqueue error");
  f.error = *e;
  f.rig_id = j.at("rig_id").get<std::string>();
  f.detail = j.at("detail").get<std::string>();
  f.last_ack_seq = whole<std::uint64_t>(j, "last_ack_seq");
  f.suggested_action = j.at("suggested_action").get<std::string>();
  f.cmd_id = j.at("cmd_id").get<std::string>();
  if (j.contains("last_ack_at_ms")) f.last_ack_at_ms = whole<std::uint64_t>(j, "last_ack_at_ms");
  return EnqueueOutcome{std::move(f)};
}

json rig_json(const RigRecord& r) {
  return json{{"rig_id", r.rig_id},       {"boot_id", r.boot_id},     {"agent_version", r.agent_version},
              {"labels", r.labels},       {"kinds", r.kinds},         {"broker_id", r.broker_id},
              {"first_seen_ms", r.first_seen_ms}, {"last_seen_ms", r.last_seen_ms}};
}

RigRecord rig_of(const json& j) {
  RigRecord r;
  r.rig_id = j.at("rig_id").get<std::string>();
  r.boot_id = j.at("boot_id").get<std::string>();
  r.agent_version = j.at("agent_version").get<std::string>();
  r.labels = j.at("labels").get<StringMap>();
  r.kinds = j.at("kinds").get<std::vector<std::string>>();
  r.broker_id = j.at("broker_id").get<std::string>();
  r.first_seen_ms = whole<std::uint64_t>(j, "first_seen_ms");
  r.last_seen_ms = whole<std::uint64_t>(j, "last_seen_ms");
  return r;
}

std::optional<CancelOutcome> cancel_from_string(std::string_view s) {
  static constexpr std::pair<CancelOutcome, const char*> kNames[] = {
      {CancelOutcome::unknown, "unknown"},     {CancelOutcome::finished, "finished"},
      {CancelOutcome::pending, "pending"},     {CancelOutcome::cancelled, "cancelled"},
      {CancelOutcome::requested, "requested"},
  };
  for (const auto& [c, name] : kNames)
    if (s == name) return c;
  return std::nullopt;
}

const char* cancel_name(CancelOutcome c) {
  switch (c) {
    case CancelOutcome::unknown: return "unknown";
    case CancelOutcome::finished: return "finished";
    case CancelOutcome::pending: return "pending";
    case CancelOutcome::cancelled: return "cancelled";
    case CancelOutcome::requested: return "requested";
  }
  return "unknown";
}

}  // namespace

std::string encode_note(const MeshNote& n) {
  json j{{"v", kMeshNoteVersion}, {"kind", to_string(n.kind)}, {"from", n.from}, {"ask", n.ask},
         {"rig_id", n.rig_id},    {"boot_id", n.boot_id},      {"cmd_id", n.cmd_id}, {"held", n.held},
         {"cancel", cancel_name(n.cancel)}};
  if (n.command) j["command"] = request_json(*n.command);
  if (n.outcome) j["outcome"] = outcome_json(*n.outcome);
  if (!n.unrecorded.empty()) j["unrecorded"] = n.unrecorded;
  if (n.event)
    j["event"] = json{{"type", to_string(n.event->type)},
                      {"rig_id", n.event->rig_id},
                      {"cmd_id", n.event->cmd_id},
                      {"detail", n.event->detail},
                      {"at_ms", n.event->at_ms}};
  if (n.event && n.event->offset != 0) j["event"]["offset"] = n.event->offset;
  if (n.rig) j["rig"] = rig_json(*n.rig);
  // Replaced, never thrown: a label or an output line need not be UTF-8.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Expected<MeshNote> decode_note(std::string_view text) {
  if (text.size() > kMaxMeshNoteBytes) return make_error(Errc::malformed, "mesh note over 256 KiB");
  const json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error(Errc::malformed, "mesh note: not a JSON object");
  try {
    if (whole<int>(j, "v") != kMeshNoteVersion) return make_error(Errc::malformed, "mesh note: unknown version");
    MeshNote n;
    const auto kind = mesh_kind_from_string(j.at("kind").get<std::string>());
    if (!kind) return make_error(Errc::malformed, "mesh note: unknown kind");
    n.kind = *kind;
    n.from = j.at("from").get<std::string>();
    if (n.from.empty()) return make_error(Errc::malformed, "mesh note: no sender");
    n.ask = whole<std::uint64_t>(j, "ask");
    n.rig_id = j.at("rig_id").get<std::string>();
    n.boot_id = j.at("boot_id").get<std::string>();
    n.cmd_id = j.at("cmd_id").get<std::string>();
    n.held = j.at("held").get<bool>();
    const auto cancel = cancel_from_string(j.at("cancel").get<std::string>());
    if (!cancel) return make_error(Errc::malformed, "mesh note: unknown cancel outcome");
    n.cancel = *cancel;
    if (j.contains("command")) n.command = request_of(j.at("command"));
    if (j.contains("outcome")) {
      auto o = outcome_of(j.at("outcome"));
      if (!o) return o.error();
      n.outcome = std::move(*o);
    }
    if (j.contains("unrecorded")) n.unrecorded = j.at("unrecorded").get<std::string>();
    if (j.contains("event")) {
      const json& e = j.at("event");
      const auto type = event_type_from_string(e.at("type").get<std::string>());
      if (!type) return make_error(Errc::malformed, "mesh note: unknown event type");
      n.event = FleetEvent{*type, e.at("rig_id").get<std::string>(), e.at("cmd_id").get<std::string>(),
                           e.at("detail").get<std::string>(), whole<std::uint64_t>(e, "at_ms")};
      if (e.contains("offset")) n.event->offset = whole<std::uint64_t>(e, "offset");
    }
    if (j.contains("rig")) n.rig = rig_of(j.at("rig"));
    // What each kind needs.
    if (n.kind == MeshKind::command && !n.command) return make_error(Errc::malformed, "mesh note: command without one");
    if (n.kind == MeshKind::command_answer && !n.outcome)
      return make_error(Errc::malformed, "mesh note: command_answer without an outcome");
    if (n.kind == MeshKind::event && !n.event) return make_error(Errc::malformed, "mesh note: event without one");
    if (n.kind == MeshKind::rig_seen && !n.rig) return make_error(Errc::malformed, "mesh note: rig_seen without a rig");
    return n;
  } catch (const json::exception& e) {
    return make_error(Errc::malformed, std::string("mesh note: ") + e.what());
  } catch (const BadNumber& e) {
    return make_error(Errc::malformed, std::string("mesh note: ") + e.what());
  }
}

}  // namespace fleetlink::broker::redis
