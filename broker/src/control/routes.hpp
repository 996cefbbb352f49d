#pragma once
// The control API's routing: method + path -> handler -> status + body.
// Pure apart from the Fleet it is given (and /proc for /metrics), so it is
// unit-tested with a fake Fleet and no sockets.
#include <cstdint>

#include "control/options.hpp"
#include "fleet/fleet.hpp"
#include "control/http_message.hpp"
#include "observe/metrics.hpp"

namespace fleetlink::broker {

HttpResponse handle_control_request(const HttpRequest& request, Fleet& fleet,
                                    const BrokerMetrics& metrics,
                                    const ControlApiOptions& options, std::uint64_t now_ms);

// As above with the system clock.
HttpResponse handle_control_request(const HttpRequest& request, Fleet& fleet,
                                    const BrokerMetrics& metrics,
                                    const ControlApiOptions& options);

// Whether `event` ends the wait of a held POST (the command reached the state
// asked for, or a final state).
bool held_command_reached(const HeldCommand& hold, const FleetEvent& event);

// The answer of a held POST once it ends (reached or timed out): 202 with
// cmd_id, rig_id, seq and the command's current state.
HttpResponse held_command_answer(const HeldCommand& hold, const Fleet& fleet);

// A JSON error response {"error":code,"detail":detail}.
HttpResponse json_error(int status, std::string_view code, std::string_view detail);

}  // namespace fleetlink::broker
