// POST /v1/commands (one command to every rig the targets select) and
// GET /v1/batches/{batch}
#include <string>
#include <vector>

#include "control/batches.hpp"
#include "control/control_json.hpp"
#include "control/handler_support.hpp"
#include "control/handlers.hpp"
#include "control/http_util.hpp"
#include "fleetlink/uuid.hpp"

namespace fleetlink::broker::handlers {
namespace {

using json = nlohmann::ordered_json;

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
std::string batch_json_text(const Batch& b, const Fleet& fleet, bool with_rigs) {
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

HttpResponse batch_response(int status, const Batch& b, const Fleet& fleet, bool with_rigs) {
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

// The request's "targets" object: ids, an id glob and/or labels. False (and
// `error`) if malformed.
bool parse_targets(const json& t, BatchTargets& targets, HttpResponse& error) {
  if (const auto ids = t.find("ids"); ids != t.end() && !ids->is_null()) {
    if (!ids->is_array()) {
      error = json_error(400, "bad_request", "\"targets.ids\" must be an array of strings");
      return false;
    }
    for (const json& id : *ids) {
      if (!id.is_string() || id.get<std::string>().empty()) {
        error = json_error(400, "bad_request", "\"targets.ids\" must be an array of strings");
        return false;
      }
      targets.ids.push_back(id.get<std::string>());
    }
  }
  if (const auto g = t.find("glob"); g != t.end() && !g->is_null()) {
    if (!g->is_string()) {
      error = json_error(400, "bad_request", "\"targets.glob\" must be a string");
      return false;
    }
    targets.glob = g->get<std::string>();
  }
  std::string detail;
  if (const auto l = t.find("labels"); l != t.end() && !json_to_string_map(*l, targets.labels, detail)) {
    error = json_error(400, "bad_request", "\"targets.labels\": " + detail);
    return false;
  }
  if (targets.empty()) {
    error = json_error(400, "bad_request", "\"targets\" must give \"ids\", \"glob\" or \"labels\"");
    return false;
  }
  return true;
}

}  // namespace

HttpResponse post_batch(const RouteContext& ctx) {
  if (ctx.options.batches == nullptr) {
    return json_error(503, "unavailable", "batches are not available on this listener");
  }
  bool with_rigs = true;
  if (!want_rig_list(ctx.request, with_rigs)) return json_error(400, "bad_request", "\"rigs\" must be true or false");
  HttpResponse error;
  const std::optional<json> body = parse_object_body(ctx.request, false, error);
  if (!body) return error;
  BatchRequest request;
  request.kind = string_field(*body, "kind");
  if (request.kind.empty()) {
    return json_error(400, "bad_request", "\"kind\" is required and must be a non-empty string");
  }
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
  if (!parse_targets(*t, request.targets, error)) return error;
  std::optional<std::size_t> concurrency;
  if (!optional_count(*body, "max_concurrency", concurrency, error) ||
      !optional_count(*body, "max_errors", request.max_errors, error)) {
    return error;
  }
  request.max_concurrency = concurrency.value_or(0);
  std::vector<std::string> rigs = BatchTable::select(ctx.fleet, request.targets);
  if (rigs.empty()) {
    return json_error(422, "no_matching_rigs", "no known rig matches the targets");
  }
  const Batch& batch = ctx.options.batches->start(ctx.fleet, std::move(request), std::move(rigs),
                                                  uuid_v7().to_string(), ctx.now_ms);
  // The record comes first: the job's commands are in the store before the answer.
  if (Expected<void> kept = ctx.fleet.persist(); !kept)
    return json_error(503, "store_unavailable",
                      "the job's commands could not be recorded (" + kept.error().detail + "): none was sent");
  HttpResponse r = batch_response(202, batch, ctx.fleet, with_rigs);
  r.headers.emplace_back("Location", "/v1/batches/" + batch.batch_id);
  return r;
}

HttpResponse get_batch(const RouteContext& ctx) {
  const std::string& batch_id = ctx.params.get("batch");
  const Batch* batch = ctx.options.batches ? ctx.options.batches->find(batch_id) : nullptr;
  if (batch == nullptr) {
    return json_response(404, json{{"error", "unknown_batch"},
                                   {"batch_id", batch_id},
                                   {"detail", "no such batch (or expired from the history)"}});
  }
  bool with_rigs = true;
  if (!want_rig_list(ctx.request, with_rigs)) return json_error(400, "bad_request", "\"rigs\" must be true or false");
  return batch_response(200, *batch, ctx.fleet, with_rigs);
}

}  // namespace fleetlink::broker::handlers
