// GET /v1/rigs, GET /v1/rigs/{rig}, POST /v1/rigs/{rig}/commands,
// POST /v1/rigs/{rig}/reconnect
#include <fnmatch.h>

#include <charconv>
#include <map>
#include <string>

#include "control/command_request.hpp"
#include "control/control_json.hpp"
#include "control/handler_support.hpp"
#include "control/handlers.hpp"
#include "control/http_util.hpp"

namespace fleetlink::broker::handlers {
namespace {

using json = nlohmann::ordered_json;

constexpr std::uint64_t kDefaultHoldMs = 30'000;
constexpr std::uint64_t kMaxHoldMs = 300'000;

HttpResponse unknown_rig(const std::string& rig_id) {
  return json_response(404, json{{"error", "unknown_rig"},
                                 {"rig_id", rig_id},
                                 {"detail", "rig " + rig_id + " has never connected"}});
}

HttpResponse not_connected(const std::string& rig_id) {
  return json_response(404, json{{"error", "rig_not_connected"},
                                 {"rig_id", rig_id},
                                 {"detail", "rig " + rig_id + " is not connected to this broker"}});
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

// ?wait=acked|done&timeout_ms=N: the answer is held (HeldCommand). False (and
// `error`) for bad parameters; `hold` stays empty without ?wait.
bool parse_hold(const HttpRequest& req, std::optional<HeldCommand>& hold, HttpResponse& error) {
  const auto query = parse_query(req.query);
  const auto w = query.find("wait");
  if (w == query.end()) return true;
  if (w->second != "acked" && w->second != "done") {
    error = json_error(400, "bad_request", "\"wait\" must be \"acked\" or \"done\"");
    return false;
  }
  hold = HeldCommand{};
  hold->until_done = w->second == "done";
  hold->timeout_ms = kDefaultHoldMs;
  if (const auto t = query.find("timeout_ms"); t != query.end()) {
    std::uint64_t v = 0;
    const auto res = std::from_chars(t->second.data(), t->second.data() + t->second.size(), v);
    if (res.ec != std::errc{} || res.ptr != t->second.data() + t->second.size() || v > kMaxHoldMs) {
      error = json_error(400, "bad_request", "\"timeout_ms\" must be an integer up to 300000");
      return false;
    }
    hold->timeout_ms = v;
  }
  return true;
}

// The answer to a command POST. `batch`: the record it waits for (0: already
// recorded, or refused); `broker`: set when another broker took it.
HttpResponse enqueue_answer(const EnqueueOutcome& outcome, bool waits_for_record, std::optional<HeldCommand> hold,
                            std::uint64_t batch, const std::string& broker) {
  if (const auto* ok = std::get_if<EnqueueOk>(&outcome)) {
    HttpResponse r;
    r.status = ok->existing ? 200 : 202;  // 200: the command this request names exists already
    r.body = enqueue_ok_json_text(*ok);
    if (!broker.empty()) {
      r.body.pop_back();  // '}': the broker that holds it, for whoever follows it up
      r.body += ",\"broker\":" + json(broker).dump() + "}";
    }
    // The record comes first: the answer leaves once the store has the command
    // (an existing one too: its first request may still be waiting for it).
    r.after_record = batch;
    if (!ok->existing) {
      r.if_unrecorded = [cmd_id = ok->cmd_id, waits_for_record](const Error& e) {
        return json_response(503, json{{"error", "store_unavailable"},
                                       {"cmd_id", cmd_id},
                                       {"sent", !waits_for_record},
                                       {"detail", unrecorded_detail(e, !waits_for_record)}});
      };
    } else {
      r.if_unrecorded = [cmd_id = ok->cmd_id](const Error& e) {
        return json_response(503, json{{"error", "store_unavailable"},
                                       {"cmd_id", cmd_id},
                                       {"detail", "the command exists, but the store has not recorded it yet (" +
                                                      e.detail + "); ask again"}});
      };
    }
    if (hold && hold->timeout_ms > 0) {
      hold->cmd_id = ok->cmd_id;
      hold->rig_id = ok->rig_id;
      hold->seq = ok->seq;
      r.hold = std::move(hold);
    }
    return r;
  }
  const auto& failure = std::get<EnqueueFailure>(outcome);
  HttpResponse r = json_response(enqueue_failure_status(failure.error), enqueue_failure_json(failure));
  if (failure.error == EnqueueError::draining || failure.error == EnqueueError::registry_unavailable)
    r.headers.emplace_back("Retry-After", "5");
  return r;
}

}  // namespace

HttpResponse get_rigs(const RouteContext& ctx) {
  const RigFilter filter = RigFilter::from_query(parse_query(ctx.request.query));
  json list = json::array();
  for (const RigView& rig : ctx.fleet.rigs()) {
    if (filter.matches(rig)) list.push_back(rig_json(rig, ctx.now_ms, false));
  }
  return json_response(200, json{{"rigs", std::move(list)}});
}

HttpResponse get_rig(const RouteContext& ctx) {
  const std::string& rig_id = ctx.params.get("rig");
  const std::optional<RigView> rig = ctx.fleet.rig(rig_id);
  if (!rig) return unknown_rig(rig_id);
  return json_response(200, rig_json(*rig, ctx.now_ms, true));
}

HttpResponse post_rig_command(const RouteContext& ctx) {
  const std::string& rig_id = ctx.params.get("rig");
  HttpResponse error;
  const std::optional<json> body = parse_object_body(ctx.request, false, error);
  if (!body) return error;
  CommandRequest request;
  request.rig_id = rig_id;
  if (auto bad = read_command_request(*body, request)) return json_error(400, "bad_request", *bad);
  request.operator_name = ctx.caller.name;
  std::optional<HeldCommand> hold;
  if (!parse_hold(ctx.request, hold, error)) return error;
  const bool waits_for_record = !request.idempotency_key.empty();
  if (ctx.fleet.routes_elsewhere(rig_id) || ctx.fleet.names_a_stored_command(request)) {
    // Several brokers: the broker that holds the rig takes it; its answer is this one.
    HttpResponse r = json_error(503, "shutting_down", "the broker is shutting down");
    r.deferred = [request = std::move(request), hold, waits_for_record](Fleet& fleet,
                                                                        HttpResponse::Answer answer) mutable {
      const std::string here = fleet.broker_id();
      fleet.enqueue_routed(std::move(request), [answer, hold, waits_for_record, here](Fleet::RoutedOutcome out) mutable {
        // Held elsewhere: followed by its relayed events, from the state its broker answered.
        if (out.broker_id != here && hold)
          if (const auto* ok = std::get_if<EnqueueOk>(&out.outcome)) hold->seen_state = to_string(ok->state);
        HttpResponse a = enqueue_answer(out.outcome, waits_for_record, hold, 0, out.broker_id == here ? std::string()
                                                                                                     : out.broker_id);
        if (out.unrecorded && a.if_unrecorded) a = a.if_unrecorded(*out.unrecorded);
        answer(std::move(a));
      });
    };
    return r;
  }
  EnqueueOutcome outcome = ctx.fleet.enqueue(std::move(request));
  return enqueue_answer(outcome, waits_for_record, hold, ctx.fleet.persist(), {});
}

HttpResponse post_rig_reconnect(const RouteContext& ctx) {
  const std::string& rig_id = ctx.params.get("rig");
  if (!ctx.fleet.routes_elsewhere(rig_id)) {
    if (!ctx.fleet.force_reconnect(rig_id)) return ctx.fleet.rig(rig_id) ? not_connected(rig_id) : unknown_rig(rig_id);
    return json_response(200, json{{"rig_id", rig_id}, {"closed", true}});
  }
  // Several brokers: whichever holds the rig closes its connection.
  HttpResponse r = json_error(503, "shutting_down", "the broker is shutting down");
  r.deferred = [rig_id](Fleet& fleet, HttpResponse::Answer answer) {
    fleet.force_reconnect_routed(rig_id, [rig_id, answer](bool closed, bool known) {
      if (closed) return answer(json_response(200, json{{"rig_id", rig_id}, {"closed", true}}));
      answer(known ? not_connected(rig_id) : unknown_rig(rig_id));
    });
  };
  return r;
}

}  // namespace fleetlink::broker::handlers
