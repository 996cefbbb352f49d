#pragma once
// The control API: every endpoint, routed by the table in routes.cpp to its
// handler (routes_*.cpp, one file per resource): method + path -> status + body.
// Pure apart from the Fleet it is given (and /proc for /metrics), so it is
// unit-tested with a fake Fleet and no sockets.
#include <cstdint>

#include "control/http_message.hpp"
#include "control/options.hpp"
#include "fleet/fleet.hpp"
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
// Notes what an event about the held command says of its state (for a command
// another broker holds, which this one cannot read).
void note_held_event(HeldCommand& hold, const FleetEvent& event);

// The answer of a held POST once it ends (reached or timed out): 202 with
// cmd_id, rig_id, seq and the command's current state.
HttpResponse held_command_answer(const HeldCommand& hold, const Fleet& fleet);
// Whether the command has already got as far as the hold waits for.
bool held_command_settled(const HeldCommand& hold, const Fleet& fleet);

}  // namespace fleetlink::broker
