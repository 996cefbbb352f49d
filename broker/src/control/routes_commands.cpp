// GET /v1/commands (history), GET /v1/commands/{cmd}, POST /v1/commands/{cmd}/cancel,
// and the answer of a held POST /v1/rigs/{rig}/commands?wait=... once its wait ends.
#include <charconv>
#include <string>

#include "control/control_json.hpp"
#include "control/handler_support.hpp"
#include "control/handlers.hpp"
#include "control/http_util.hpp"
#include "control/routes.hpp"

namespace fleetlink::broker {
namespace {

using json = nlohmann::ordered_json;

HttpResponse unknown_command(const std::string& cmd_id) {
  return json_response(404, json{{"error", "unknown_command"},
                                 {"cmd_id", cmd_id},
                                 {"detail", "no such command (never sent, or expired from "
                                            "the command history)"}});
}

constexpr std::size_t kMaxListLimit = 1000;

bool parse_count(std::string_view text, std::uint64_t& out) {
  const auto res = std::from_chars(text.data(), text.data() + text.size(), out);
  return res.ec == std::errc{} && res.ptr == text.data() + text.size();
}

}  // namespace

namespace handlers {

// ?rig=&state=&job=&since=<unix ms>&before=<cmd_id>&limit=<n> (default 100, at most 1000), newest first.
HttpResponse get_commands(const RouteContext& ctx) {
  const auto q = parse_query(ctx.request.query);
  CommandQuery query;
  if (const auto it = q.find("rig"); it != q.end()) query.rig_id = it->second;
  if (const auto it = q.find("job"); it != q.end()) query.job_id = it->second;
  if (const auto it = q.find("before"); it != q.end()) query.before_cmd_id = it->second;
  if (const auto it = q.find("state"); it != q.end()) {
    query.state = command_state_from_string(it->second);
    if (!query.state) return json_error(400, "bad_request", "unknown state '" + it->second.substr(0, 32) + "'");
  }
  if (const auto it = q.find("since"); it != q.end() && !parse_count(it->second, query.since_ms))
    return json_error(400, "bad_request", "\"since\" must be Unix milliseconds");
  if (const auto it = q.find("limit"); it != q.end()) {
    std::uint64_t limit = 0;
    if (!parse_count(it->second, limit) || limit == 0 || limit > kMaxListLimit)
      return json_error(400, "bad_request", "\"limit\" must be 1.." + std::to_string(kMaxListLimit));
    query.limit = static_cast<std::size_t>(limit);
  }
  auto render = [limit = query.limit](const std::vector<CommandView>& found) {
    json list = json::array();
    std::string last;
    for (const CommandView& v : found) {
      json j = command_json(v);
      j.erase("result");  // the list stays small: GET /v1/commands/{id} has the output
      list.push_back(std::move(j));
      last = v.cmd_id;
    }
    const bool more = list.size() == limit;
    return json_response(200, json{{"commands", std::move(list)}, {"next_before", more ? json(last) : json(nullptr)}});
  };
  if (!ctx.fleet.reads_later()) return render(ctx.fleet.list_commands(query));
  // A store that answers later (Redis): the answer comes with its reply.
  HttpResponse r = json_error(503, "shutting_down", "the broker is shutting down");
  r.deferred = [query, render](Fleet& fleet, HttpResponse::Answer answer) {
    fleet.list_commands_then(query, [render, answer](std::vector<CommandView> found) { answer(render(found)); });
  };
  return r;
}

HttpResponse get_command(const RouteContext& ctx) {
  const std::string& cmd_id = ctx.params.get("cmd");
  // With the artifacts the rig uploaded for it, when this broker keeps any.
  auto render = [artifacts = ctx.options.artifacts](const CommandView& v) {
    json j = command_json(v);
    if (artifacts != nullptr) j["artifacts"] = artifacts_json(*artifacts, v.cmd_id);
    return json_response(200, j);
  };
  const std::optional<CommandView> cmd = ctx.fleet.command(cmd_id);
  if (cmd) return render(*cmd);
  if (!ctx.fleet.reads_later()) return unknown_command(cmd_id);
  HttpResponse r = json_error(503, "shutting_down", "the broker is shutting down");
  r.deferred = [cmd_id, render](Fleet& fleet, HttpResponse::Answer answer) {
    fleet.command_then(cmd_id, [cmd_id, render, answer](std::optional<CommandView> found) {
      answer(found ? render(*found) : unknown_command(cmd_id));
    });
  };
  return r;
}

// GET /v1/commands/{id}/output: what the broker keeps of a command's output. While
// it runs, the tail of what it streamed (CommandTable::kStreamTail, 64 KiB) with
// the offset it starts at; once its RESULT is in, the RESULT's output (its head,
// up to 64 KiB) when that holds more of it. "complete": nothing was left out.
HttpResponse get_command_output(const RouteContext& ctx) {
  const std::string& cmd_id = ctx.params.get("cmd");
  const bool text = parse_query(ctx.request.query).count("text") != 0;
  auto render = [cmd_id, text](const std::optional<CommandView>& cmd) {
    if (!cmd) return unknown_command(cmd_id);
    const CommandOutput out = output_of(*cmd);
    if (text) {
      HttpResponse r;
      r.status = 200;
      r.content_type = "text/plain; charset=utf-8";
      r.body = out.data;
      return r;
    }
    return json_response(200, command_output_json(*cmd, out));
  };
  const std::optional<CommandView> cmd = ctx.fleet.command(cmd_id);
  if (cmd || !ctx.fleet.reads_later()) return render(cmd);
  HttpResponse r = json_error(503, "shutting_down", "the broker is shutting down");
  r.deferred = [cmd_id, render](Fleet& fleet, HttpResponse::Answer answer) {
    fleet.command_then(cmd_id, [render, answer](std::optional<CommandView> found) { answer(render(found)); });
  };
  return r;
}

// A command not yet at its rig is cancelled at once (200); otherwise the rig is
// sent CANCEL (now, or when it next connects) and the command ends with the
// rig's answer (202: on its way, not done), or cancelled when none comes in time.
namespace {

HttpResponse cancel_answer(const Fleet& fleet, const std::string& cmd_id, CancelOutcome outcome) {
  const std::optional<CommandView> cmd = fleet.command(cmd_id);
  switch (outcome) {
    case CancelOutcome::unknown:
      return unknown_command(cmd_id);
    case CancelOutcome::finished:
      return json_response(409, json{{"error", "not_running"},
                                     {"cmd_id", cmd_id},
                                     {"state", cmd ? to_string(cmd->state) : "unknown"},
                                     {"detail", "the command has already finished"}});
    case CancelOutcome::pending:
      // Never a second CANCEL to the rig, and never a second 202: the first one's
      // answer is what the command ends with (PROTOCOL 3.9, OPERATIONS 9.5).
      return json_response(409, json{{"error", "cancel_pending"},
                                     {"cmd_id", cmd_id},
                                     {"state", cmd ? to_string(cmd->state) : "unknown"},
                                     {"cancel_requested_at", cmd ? iso8601_or_null(cmd->cancel_requested_at_ms) : json()},
                                     {"detail", "a cancel of this command is already on its way"}});
    case CancelOutcome::cancelled:
      return json_response(200, json{{"cmd_id", cmd_id}, {"state", "cancelled"}, {"cancel_sent", false}});
    case CancelOutcome::requested:
      break;
  }
  return json_response(202, json{{"cmd_id", cmd_id},
                                 {"state", cmd ? to_string(cmd->state) : "unknown"},
                                 {"cancel_sent", true}});
}

}  // namespace

HttpResponse post_command_cancel(const RouteContext& ctx) {
  const std::string& cmd_id = ctx.params.get("cmd");
  if (!ctx.fleet.cancel_routes_elsewhere(cmd_id)) return cancel_answer(ctx.fleet, cmd_id, ctx.fleet.cancel(cmd_id));
  // Several brokers: whichever holds the command cancels it.
  HttpResponse r = json_error(503, "shutting_down", "the broker is shutting down");
  r.deferred = [cmd_id](Fleet& fleet, HttpResponse::Answer answer) {
    fleet.cancel_routed(cmd_id, [&fleet, cmd_id, answer](CancelOutcome outcome) {
      answer(cancel_answer(fleet, cmd_id, outcome));
    });
  };
  return r;
}

}  // namespace handlers

bool held_command_reached(const HeldCommand& hold, const FleetEvent& event) {
  if (event.cmd_id != hold.cmd_id) return false;
  if (is_final(event.type)) return true;
  return !hold.until_done && event.type == EventType::command_acked;
}

namespace {

bool settles(const HeldCommand& hold, CommandState s) {
  return is_final(s) || (!hold.until_done && s != CommandState::queued && s != CommandState::sent);
}

}  // namespace

void note_held_event(HeldCommand& hold, const FleetEvent& event) {
  if (event.type == EventType::command_done) hold.seen_state = event.detail;  // the final state's name
  else if (event.type == EventType::command_acked && hold.seen_state != "running") hold.seen_state = "acked";
  else if (event.type == EventType::command_running) hold.seen_state = "running";
}

bool held_command_settled(const HeldCommand& hold, const Fleet& fleet) {
  bool settled = false;
  const bool here = fleet.read_command(hold.cmd_id, [&](const CommandView& c) { settled = settles(hold, c.state); });
  if (!here && !hold.seen_state.empty())
    if (const auto s = command_state_from_string(hold.seen_state)) settled = settles(hold, *s);
  return settled;
}

HttpResponse held_command_answer(const HeldCommand& hold, const Fleet& fleet) {
  const std::optional<CommandView> cmd = fleet.command(hold.cmd_id);
  std::string state = cmd ? std::string(to_string(cmd->state)) : hold.seen_state.empty() ? "queued" : hold.seen_state;
  // Another broker's command: its final event may come before its record does (the
  // owner commits steps every store-commit-interval-ms).
  if (const auto seen = command_state_from_string(hold.seen_state); seen && is_final(*seen) &&
                                                                    (!cmd || !is_final(cmd->state)))
    state = hold.seen_state;
  json body{{"cmd_id", hold.cmd_id}, {"rig_id", hold.rig_id}, {"seq", hold.seq}, {"state", state}};
  return json_response(202, body);
}

}  // namespace fleetlink::broker
