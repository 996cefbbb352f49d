// GET /v1/commands/{cmd}, POST /v1/commands/{cmd}/cancel, and the answer of a
// held POST /v1/rigs/{rig}/commands?wait=... once its wait ends.
#include <string>

#include "control/control_json.hpp"
#include "control/handler_support.hpp"
#include "control/handlers.hpp"
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

bool command_finished(CommandState s) {
  return s == CommandState::done || s == CommandState::nacked || s == CommandState::lost;
}

}  // namespace

namespace handlers {

HttpResponse get_command(const RouteContext& ctx) {
  const std::string& cmd_id = ctx.params.get("cmd");
  const std::optional<CommandView> cmd = ctx.fleet.command(cmd_id);
  if (!cmd) return unknown_command(cmd_id);
  return json_response(200, command_json(*cmd));
}

// The broker sends CANCEL to the command's rig; the command ends later with the
// rig's RESULT (status "cancelled" when it was stopped). 202 means the CANCEL is
// on its way, not that it is done.
HttpResponse post_command_cancel(const RouteContext& ctx) {
  const std::string& cmd_id = ctx.params.get("cmd");
  const std::optional<CommandView> cmd = ctx.fleet.command(cmd_id);
  if (!cmd) return unknown_command(cmd_id);
  if (command_finished(cmd->state)) {
    return json_response(409, json{{"error", "not_running"},
                                   {"cmd_id", cmd_id},
                                   {"state", to_string(cmd->state)},
                                   {"detail", "the command has already finished"}});
  }
  if (!ctx.fleet.cancel(cmd_id)) {
    // Still running as far as the broker knows, but no CANCEL could be queued:
    // its rig is not connected here, or a cancel for it is already pending.
    const bool connected = ctx.fleet.rig(cmd->rig_id).has_value();
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

}  // namespace handlers

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

}  // namespace fleetlink::broker
