#pragma once
// The fields of a command request, wherever it comes from (POST
// /v1/rigs/{rig}/commands, a line of the control stream, a job): kind, args,
// and the optional cmd_id, idempotency_key, deliver_within_s, timeout_s, hold.
// Shapes only; the fleet checks values (the SDK's limits, UUIDs).
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "fleet/fleet.hpp"

namespace fleetlink::broker {

// Fills `out` (rig_id excepted) from a JSON object; the error sentence when a
// field has the wrong shape. `kind` is required.
std::optional<std::string> read_command_request(const nlohmann::ordered_json& body, CommandRequest& out);

}  // namespace fleetlink::broker
