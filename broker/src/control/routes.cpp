#include "control/routes.hpp"

#include <fnmatch.h>

#include <charconv>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "control/batches.hpp"
#include "control/control_json.hpp"
#include "observe/process_stats.hpp"
#include "observe/dashboard.hpp"
#include "fleetlink/uuid.hpp"
#include "control/http_util.hpp"

namespace fleetlink::broker {

using json = nlohmann::ordered_json;

HttpResponse json_error(int status, std::string_view code, std::string_view detail) {
  HttpResponse r;
  r.status = status;
  r.body = dump_json(error_body(code, detail));
  return r;
}

namespace {


constexpr std::uint64_t kMaxDrainWindowMs = 24ULL * 3600 * 1000;
constexpr std::uint64_t kDefaultHoldMs = 30'000;
constexpr std::uint64_t kMaxHoldMs = 300'000;

HttpResponse json_response(int status, const json& body) {
  HttpResponse r;
  r.status = status;
  r.body = dump_json(body);
  return r;
}

HttpResponse method_not_allowed(std::string_view allow) {
  HttpResponse r = json_error(405, "method_not_allowed", "allowed: " + std::string(allow));
  r.headers.emplace_back("Allow", std::string(allow));
  return r;
}

HttpResponse not_found(std::string_view path) {
  return json_error(404, "not_found", "no such endpoint: " + std::string(path));
}

// Parses a request body that must be a JSON object (an empty body is `{}`
// when allow_empty). On failure, `error` is the 400 answer.
std::optional<json> parse_object_body(const HttpRequest& req, bool allow_empty,
                                      HttpResponse& error) {
  if (req.body.find_first_not_of(" \t\r\n") == std::string::npos) {
    if (allow_empty) return json::object();
    error = json_error(400, "bad_request", "request body is empty; expected a JSON object");
    return std::nullopt;
  }
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    error = json_error(400, "bad_request", "request body is not valid JSON");
    return std::nullopt;
  }
  if (!body.is_object()) {
    error = json_error(400, "bad_request", "request body must be a JSON object");
    return std::nullopt;
  }
  return body;
}

// args values are strings; numbers and booleans are accepted and turned into
// their JSON text so `{"lines": 50}` works from a shell.
bool json_to_string_map(const json& args, StringMap& out, std::string& detail) {
  if (args.is_null()) return true;
  if (!args.is_object()) {
    detail = "\"args\" must be an object of strings";
    return false;
  }
  for (const auto& [key, value] : args.items()) {
    if (value.is_string()) {
      out[key] = value.get<std::string>();
    } else if (value.is_number() || value.is_boolean()) {
      out[key] = value.dump();
    } else {
      detail = "\"args." + key + "\" must be a string";
      return false;
    }
  }
  return true;
}

HttpResponse post_command(const HttpRequest& req, Fleet& fleet, const std::string& rig_id) {
  HttpResponse error;
  const std::optional<json> body = parse_object_body(req, false, error);
  if (!body) return error;
  const auto kind_it = body->find("kind");
  if (kind_it == body->end() || !kind_it->is_string() || kind_it->get<std::string>().empty()) {
    return json_error(400, "bad_request", "\"kind\" is required and must be a non-empty string");
  }
  StringMap args;
  std::string detail;
  const auto args_it = body->find("args");
  if (args_it != body->end() && !json_to_string_map(*args_it, args, detail)) {
    return json_error(400, "bad_request", detail);
  }
  // Optional long poll: ?wait=acked|done&timeout_ms=N
  const auto query = parse_query(req.query);
  std::optional<HeldCommand> hold;
  if (const auto w = query.find("wait"); w != query.end()) {
    if (w->second != "acked" && w->second != "done") {
      return json_error(400, "bad_request", "\"wait\" must be \"acked\" or \"done\"");
    }
    hold = HeldCommand{};
    hold->until_done = w->second == "done";
    hold->timeout_ms = kDefaultHoldMs;
    if (const auto t = query.find("timeout_ms"); t != query.end()) {
      std::uint64_t v = 0;
      const auto res = std::from_chars(t->second.data(), t->second.data() + t->second.size(), v);
      if (res.ec != std::errc{} || res.ptr != t->second.data() + t->second.size() ||
          v > kMaxHoldMs) {
        return json_error(400, "bad_request", "\"timeout_ms\" must be an integer up to 300000");
      }
      hold->timeout_ms = v;
    }
  }
  EnqueueOutcome outcome = fleet.enqueue(rig_id, kind_it->get<std::string>(), std::move(args));
  if (const auto* ok = std::get_if<EnqueueOk>(&outcome)) {
    HttpResponse r;
    r.status = 202;
    r.body = enqueue_ok_json_text(*ok);
    if (hold && hold->timeout_ms > 0) {
      hold->cmd_id = ok->cmd_id;
      hold->rig_id = ok->rig_id;
      hold->seq = ok->seq;
      r.hold = std::move(hold);
    }
    return r;
  }
  const auto& failure = std::get<EnqueueFailure>(outcome);
  HttpResponse r = json_response(enqueue_failure_status(failure.error),
                                 enqueue_failure_json(failure));
  if (failure.error == EnqueueError::draining) r.headers.emplace_back("Retry-After", "5");
  return r;
}

HttpResponse unknown_command(const std::string& cmd_id) {
  return json_response(404, json{{"error", "unknown_command"},
                                 {"cmd_id", cmd_id},
                                 {"detail", "no such command (never sent, or expired from "
                                            "the command history)"}});
}

bool command_finished(CommandState s) {
  return s == CommandState::done || s == CommandState::nacked || s == CommandState::lost;
}

// POST /v1/commands/{cmd_id}/cancel: the broker sends CANCEL to the command's
// rig; the command ends later with the rig's RESULT (status "cancelled" when
// it was stopped). 202 means the CANCEL is on its way, not that it is done.
HttpResponse post_cancel(Fleet& fleet, const std::string& cmd_id) {
  const std::optional<CommandView> cmd = fleet.command(cmd_id);
  if (!cmd) return unknown_command(cmd_id);
  if (command_finished(cmd->state)) {
    return json_response(409, json{{"error", "not_running"},
                                   {"cmd_id", cmd_id},
                                   {"state", to_string(cmd->state)},
                                   {"detail", "the command has already finished"}});
  }
  if (!fleet.cancel(cmd_id)) {
    // Still running as far as the broker knows, but no CANCEL could be queued:
    // its rig is not connected here, or a cancel for it is already pending.
    const bool connected = fleet.rig(cmd->rig_id).has_value();
    return json_response(409, json{{"error", connected ? "cancel_pending" : "rig_not_connected"},
                                   {"cmd_id", cmd_id},
                                   {"rig_id", cmd->rig_id},
                                   {"detail", connected
                                                  ? "a cancel for this command (or too many "
                                                    "cancels for its rig) is already pending"
                                                  : "the command's rig is not connected to "
                                                    "this broker"}});
  }
  return json_response(202, json{{"cmd_id", cmd_id}, {"cancel_sent", true}});
}

// Reads an optional non-negative integer field; false (and `error`) if malformed.
bool optional_count(const json& body, const char* key, std::optional<std::size_t>& out,
                    HttpResponse& error) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_number_unsigned() || it->get<std::uint64_t>() > 1'000'000) {
    error = json_error(400, "bad_request",
                       "\"" + std::string(key) + "\" must be a non-negative integer");
    return false;
  }
  out = static_cast<std::size_t>(it->get<std::uint64_t>());
  return true;
}

// A batch as JSON text. The rig list is written directly, not through a JSON
// tree: a fleet-wide batch lists 20,000 rigs, and the tree cost ~14k
// instructions per rig, as much as sending the commands. Byte for byte what
// dump_json of the equivalent tree gives (tested).
std::string batch_json_text(const Batch& b, const Fleet& fleet, bool with_rigs = true) {
  json counts{{"total", b.rigs.size()}};
  std::size_t by_outcome[6] = {};
  for (const BatchRig& r : b.rigs) ++by_outcome[static_cast<std::size_t>(r.outcome)];
  for (const BatchRigOutcome o :
       {BatchRigOutcome::pending, BatchRigOutcome::dispatched, BatchRigOutcome::ok,
        BatchRigOutcome::failed, BatchRigOutcome::refused, BatchRigOutcome::skipped}) {
    counts[to_string(o)] = by_outcome[static_cast<std::size_t>(o)];
  }
  json args = json::object();
  for (const auto& [k, v] : b.args) args[k] = v;
  const json head{{"batch_id", b.batch_id},
                  {"kind", b.kind},
                  {"args", std::move(args)},
                  {"created_at", iso8601_utc_ms(b.created_at_ms)},
                  {"max_concurrency", b.max_concurrency},
                  {"max_errors", b.max_errors ? json(*b.max_errors) : json(nullptr)},
                  {"state", b.finished() ? (b.stopped ? "stopped" : "done") : "running"},
                  {"errors", b.errors},
                  {"counts", std::move(counts)}};
  std::string out = dump_json(head);
  if (!with_rigs) return out;
  out.pop_back();  // the closing brace: "rigs" comes last
  out.reserve(out.size() + 160 * b.rigs.size() + 16);
  out += ",\"rigs\":[";
  auto value_or_null = [&out](std::string_view v) {
    if (v.empty()) {
      out += "null";
    } else {
      append_json_value(out, v);
    }
  };
  bool first = true;
  for (const BatchRig& r : b.rigs) {
    if (!first) out += ',';
    first = false;
    out += "{\"rig_id\":";
    append_json_value(out, r.rig_id);
    out += ",\"outcome\":";
    append_json_value(out, to_string(r.outcome));
    out += ",\"cmd_id\":";
    value_or_null(r.cmd_id);
    out += ",\"state\":";
    const char* state = nullptr;
    if (!r.cmd_id.empty()) {
      fleet.read_command(r.cmd_id, [&](const CommandView& cmd) { state = to_string(cmd.state); });
    }
    value_or_null(state ? std::string_view(state) : std::string_view());
    out += ",\"error\":";
    value_or_null(r.error);
    out += ",\"detail\":";
    value_or_null(r.detail);
    out += '}';
  }
  out += "]}";
  return out;
}

HttpResponse batch_response(int status, const Batch& b, const Fleet& fleet, bool with_rigs = true) {
  HttpResponse r;
  r.status = status;
  r.body = batch_json_text(b, fleet, with_rigs);
  return r;
}

// ?rigs=false: the answer without its per-rig list (a fleet-wide batch lists
// 20,000 rigs, 3 MB); GET /v1/batches/{id} has it. False if the value is invalid.
bool want_rig_list(const HttpRequest& req, bool& with_rigs) {
  const auto query = parse_query(req.query);
  const auto it = query.find("rigs");
  if (it == query.end() || it->second == "true") {
    with_rigs = true;
    return true;
  }
  with_rigs = false;
  return it->second == "false";
}

// POST /v1/commands: one command to every rig the targets select.
HttpResponse post_batch(const HttpRequest& req, Fleet& fleet, const ControlApiOptions& options,
                        std::uint64_t now_ms) {
  if (options.batches == nullptr) {
    return json_error(503, "unavailable", "batches are not available on this listener");
  }
  bool with_rigs = true;
  if (!want_rig_list(req, with_rigs)) return json_error(400, "bad_request", "\"rigs\" must be true or false");
  HttpResponse error;
  const std::optional<json> body = parse_object_body(req, false, error);
  if (!body) return error;
  BatchRequest request;
  const auto kind_it = body->find("kind");
  if (kind_it == body->end() || !kind_it->is_string() || kind_it->get<std::string>().empty()) {
    return json_error(400, "bad_request", "\"kind\" is required and must be a non-empty string");
  }
  request.kind = kind_it->get<std::string>();
  std::string detail;
  if (const auto a = body->find("args");
      a != body->end() && !json_to_string_map(*a, request.args, detail)) {
    return json_error(400, "bad_request", detail);
  }
  const auto t = body->find("targets");
  if (t == body->end() || !t->is_object()) {
    return json_error(400, "bad_request",
                      "\"targets\" is required: an object with \"ids\", \"glob\" and/or "
                      "\"labels\"");
  }
  if (const auto ids = t->find("ids"); ids != t->end() && !ids->is_null()) {
    if (!ids->is_array()) return json_error(400, "bad_request", "\"targets.ids\" must be an array of strings");
    for (const json& id : *ids) {
      if (!id.is_string() || id.get<std::string>().empty()) {
        return json_error(400, "bad_request", "\"targets.ids\" must be an array of strings");
      }
      request.targets.ids.push_back(id.get<std::string>());
    }
  }
  if (const auto g = t->find("glob"); g != t->end() && !g->is_null()) {
    if (!g->is_string()) return json_error(400, "bad_request", "\"targets.glob\" must be a string");
    request.targets.glob = g->get<std::string>();
  }
  if (const auto l = t->find("labels"); l != t->end() &&
      !json_to_string_map(*l, request.targets.labels, detail)) {
    return json_error(400, "bad_request", "\"targets.labels\": " + detail);
  }
  if (request.targets.empty()) {
    return json_error(400, "bad_request",
                      "\"targets\" must give \"ids\", \"glob\" or \"labels\"");
  }
  std::optional<std::size_t> concurrency;
  if (!optional_count(*body, "max_concurrency", concurrency, error) ||
      !optional_count(*body, "max_errors", request.max_errors, error)) {
    return error;
  }
  request.max_concurrency = concurrency.value_or(0);
  std::vector<std::string> rigs = BatchTable::select(fleet, request.targets);
  if (rigs.empty()) {
    return json_error(422, "no_matching_rigs", "no live rig matches the targets");
  }
  const Batch& batch = options.batches->start(fleet, std::move(request), std::move(rigs),
                                              uuid_v7().to_string(), now_ms);
  HttpResponse r = batch_response(202, batch, fleet, with_rigs);
  r.headers.emplace_back("Location", "/v1/batches/" + batch.batch_id);
  return r;
}

HttpResponse post_drain(const HttpRequest& req, const Fleet& fleet,
                        const ControlApiOptions& options) {
  HttpResponse error;
  const std::optional<json> body = parse_object_body(req, true, error);
  if (!body) return error;
  std::uint64_t window_ms = static_cast<std::uint64_t>(options.default_drain_window.count());
  const auto it = body->find("window_ms");
  if (it != body->end() && !it->is_null()) {
    if (!it->is_number_unsigned() || it->get<std::uint64_t>() > kMaxDrainWindowMs) {
      return json_error(400, "bad_request",
                        "\"window_ms\" must be a non-negative integer (at most 86400000)");
    }
    window_ms = it->get<std::uint64_t>();
  }
  HttpResponse r = json_response(202, json{{"draining", true}, {"window_ms", window_ms}});
  if (!fleet.draining()) {
    // After the answer is out: a broker with no rigs finishes draining at once.
    r.after_sent = [window_ms](Fleet& f) {
      if (!f.draining()) f.start_drain(std::chrono::milliseconds(window_ms));
    };
  }
  return r;
}

// GET /v1/rigs?state=unresponsive&rig=rig-04*&label=lab=b2
struct RigFilter {
  std::string state;
  std::string rig_glob;
  std::string label_key;
  std::string label_value;

  static RigFilter from_query(const std::map<std::string, std::string>& q) {
    RigFilter f;
    if (auto it = q.find("state"); it != q.end()) f.state = it->second;
    if (auto it = q.find("rig"); it != q.end()) f.rig_glob = it->second;
    if (auto it = q.find("label"); it != q.end()) {
      const std::size_t eq = it->second.find('=');
      f.label_key = it->second.substr(0, eq);
      if (eq != std::string::npos) f.label_value = it->second.substr(eq + 1);
    }
    return f;
  }
  bool matches(const RigView& r) const {
    if (!state.empty() && r.state != state) return false;
    if (!rig_glob.empty() && fnmatch(rig_glob.c_str(), r.rig_id.c_str(), 0) != 0) return false;
    if (!label_key.empty()) {
      const auto it = r.labels.find(label_key);
      if (it == r.labels.end() || (!label_value.empty() && it->second != label_value)) return false;
    }
    return true;
  }
};

HttpResponse metrics_page(const BrokerMetrics& metrics) {
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics.render_prometheus(read_process_gauges());
  return r;
}

HttpResponse route(const HttpRequest& req, Fleet& fleet, const BrokerMetrics& metrics,
                   const ControlApiOptions& options, std::uint64_t now_ms) {
  const std::vector<std::string> seg = split_path(req.path);
  const std::string& m = req.method;
  const bool get = m == "GET" || m == "HEAD";
  const bool post = m == "POST";

  if (seg.empty() || (seg.size() == 1 && (seg[0] == "index.html" || seg[0] == "dashboard"))) {
    if (!get) return method_not_allowed("GET");
    HttpResponse r;
    r.content_type = "text/html; charset=utf-8";
    r.body = std::string(dashboard_html());
    return r;
  }
  if (seg.size() == 1 && seg[0] == "healthz") {
    if (!get) return method_not_allowed("GET");
    HttpResponse r;
    r.content_type = "text/plain; charset=utf-8";
    r.body = "ok";
    return r;
  }
  if (seg.size() == 1 && seg[0] == "readyz") {
    if (!get) return method_not_allowed("GET");
    // A draining broker is not ready either: load balancers stop sending to it.
    const bool ready = fleet.ready() && !fleet.draining();
    json body{{"ready", ready}};
    return json_response(ready ? 200 : 503, body);
  }
  if (seg.size() == 1 && seg[0] == "metrics") {
    if (!get) return method_not_allowed("GET");
    return metrics_page(metrics);
  }
  if (seg.size() < 2 || seg[0] != "v1") return not_found(req.path);

  const std::string& collection = seg[1];
  if (collection == "rigs") {
    if (seg.size() == 2) {
      if (!get) return method_not_allowed("GET");
      const RigFilter filter = RigFilter::from_query(parse_query(req.query));
      json list = json::array();
      for (const RigView& rig : fleet.rigs()) {
        if (filter.matches(rig)) list.push_back(rig_json(rig, now_ms, false));
      }
      return json_response(200, json{{"rigs", std::move(list)}});
    }
    const std::string& rig_id = seg[2];
    if (seg.size() == 3) {
      if (!get) return method_not_allowed("GET");
      const std::optional<RigView> rig = fleet.rig(rig_id);
      if (!rig) {
        return json_response(404, json{{"error", "unknown_rig"},
                                       {"rig_id", rig_id},
                                       {"detail", "no live connection for rig " + rig_id}});
      }
      return json_response(200, rig_json(*rig, now_ms, true));
    }
    if (seg.size() == 4 && seg[3] == "commands") {
      if (!post) return method_not_allowed("POST");
      return post_command(req, fleet, rig_id);
    }
    if (seg.size() == 4 && seg[3] == "reconnect") {
      if (!post) return method_not_allowed("POST");
      if (!fleet.force_reconnect(rig_id)) {
        return json_response(404, json{{"error", "unknown_rig"},
                                       {"rig_id", rig_id},
                                       {"detail", "no live connection for rig " + rig_id}});
      }
      return json_response(200, json{{"rig_id", rig_id}, {"closed", true}});
    }
    return not_found(req.path);
  }
  if (collection == "commands" && seg.size() == 2) {
    if (!post) return method_not_allowed("POST");
    return post_batch(req, fleet, options, now_ms);
  }
  if (collection == "batches" && seg.size() == 3) {
    if (!get) return method_not_allowed("GET");
    const Batch* batch = options.batches ? options.batches->find(seg[2]) : nullptr;
    if (batch == nullptr) {
      return json_response(404, json{{"error", "unknown_batch"},
                                     {"batch_id", seg[2]},
                                     {"detail", "no such batch (or expired from the history)"}});
    }
    bool with_rigs = true;
    if (!want_rig_list(req, with_rigs)) return json_error(400, "bad_request", "\"rigs\" must be true or false");
    return batch_response(200, *batch, fleet, with_rigs);
  }
  if (collection == "commands" && seg.size() == 4 && seg[3] == "cancel") {
    if (!post) return method_not_allowed("POST");
    return post_cancel(fleet, seg[2]);
  }
  if (collection == "commands" && seg.size() == 3) {
    if (!get) return method_not_allowed("GET");
    const std::optional<CommandView> cmd = fleet.command(seg[2]);
    if (!cmd) return unknown_command(seg[2]);
    return json_response(200, command_json(*cmd));
  }
  if (collection == "admin" && seg.size() == 3 && seg[2] == "drain") {
    if (!post) return method_not_allowed("POST");
    return post_drain(req, fleet, options);
  }
  if (collection == "events" && seg.size() == 2) {
    if (m != "GET") return method_not_allowed("GET");
    HttpResponse r;
    r.content_type = "text/event-stream";
    r.event_stream = true;
    // ?types=command_acked,command_done: a watcher that needs only some events
    // does not pay (nor make the broker pay) for the others.
    const auto query = parse_query(req.query);
    if (const auto t = query.find("types"); t != query.end()) {
      r.event_types = EventTypes{};
      std::string_view rest = t->second;
      while (!rest.empty()) {
        const std::size_t comma = rest.find(',');
        const std::string_view name = rest.substr(0, comma);
        const std::optional<EventType> type = event_type_from_string(name);
        if (!type) {
          return json_error(400, "bad_request",
                            "unknown event type '" + std::string(name.substr(0, 64)) +
                                "' in types (known: rig_connected, rig_disconnected, rig_event, command_acked, "
                                "command_done, command_nacked, command_lost, drain_started)");
        }
        r.event_types.add(*type);
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
    }
    return r;
  }
  return not_found(req.path);
}

// Paths a probe or a browser may reach without the token: liveness,
// readiness, and the dashboard's static page (its data calls carry the token).
bool open_without_token(const HttpRequest& req) {
  const std::vector<std::string> seg = split_path(req.path);
  if (seg.empty()) return true;
  return seg.size() == 1 &&
         (seg[0] == "healthz" || seg[0] == "readyz" || seg[0] == "index.html" ||
          seg[0] == "dashboard");
}

}  // namespace

bool held_command_reached(const HeldCommand& hold, const FleetEvent& event) {
  if (event.cmd_id != hold.cmd_id) return false;
  if (is_final(event.type)) return true;
  return !hold.until_done && event.type == EventType::command_acked;
}

HttpResponse held_command_answer(const HeldCommand& hold, const Fleet& fleet) {
  const std::optional<CommandView> cmd = fleet.command(hold.cmd_id);
  json body{{"cmd_id", hold.cmd_id},
            {"rig_id", hold.rig_id},
            {"seq", hold.seq},
            {"state", cmd ? to_string(cmd->state) : "queued"}};
  return json_response(202, body);
}

HttpResponse handle_control_request(const HttpRequest& req, Fleet& fleet,
                                    const BrokerMetrics& metrics,
                                    const ControlApiOptions& options, std::uint64_t now_ms) {
  if (!options.token.empty() && !open_without_token(req) &&
      !bearer_token_matches(req.authorization, options.token)) {
    HttpResponse r = json_error(401, "unauthorized", "missing or wrong bearer token");
    r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"fleetlink\"");
    return r;
  }
  HttpResponse r = route(req, fleet, metrics, options, now_ms);
  if (req.method == "HEAD") r.body.clear();
  return r;
}

HttpResponse handle_control_request(const HttpRequest& req, Fleet& fleet,
                                    const BrokerMetrics& metrics,
                                    const ControlApiOptions& options) {
  return handle_control_request(req, fleet, metrics, options, unix_now_ms());
}

}  // namespace fleetlink::broker
