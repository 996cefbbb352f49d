#pragma once
// The broker's HTTP control API (JSON), dashboard, SSE events, health and
// Prometheus metrics, served by libwebsockets on its own vhost and port.
//
// Threading: everything runs on the broker's event-loop thread, like Fleet.
#include <chrono>
#include <string>
#include <vector>

#include "control/options.hpp"
#include "fleet/fleet.hpp"
#include "fleetlink/expected.hpp"
#include "observe/metrics.hpp"
#include "store/command_store.hpp"

struct lws_context;
struct lws_vhost;

namespace fleetlink::broker {

class ControlListener;

// Creates the control vhost on an existing context created with
// LWS_SERVER_OPTION_EXPLICIT_VHOSTS (+ LWS_SERVER_OPTION_LIBUV).
// `fleet` and `metrics` must outlive the vhost (i.e. the context), or
// shutdown_control_api() must have been called before they go away; so must
// options.store (jobs are recorded there). `unfinished_jobs` (what FleetCore::load() returned) are resumed at once: their
// pending rigs are sent to, and the rest followed to their end.
// Returns the vhost, or an Error (Errc::io when the port cannot be bound).
fleetlink::Expected<lws_vhost*> create_control_vhost(lws_context* context,
                                                     const ControlApiOptions& options,
                                                     Fleet& fleet, BrokerMetrics& metrics,
                                                     const std::vector<JobRecord>& unfinished_jobs = {},
                                                     bool own_listener = false);

// The broker owns the control port's accept() (control_listener.hpp): the vhost
// listens on nothing itself when `own_listener` is set in create_control_vhost(),
// and the listener is told of its requests and closes through this.
void attach_control_listener(lws_vhost* vhost, ControlListener* listener);

// Orderly shutdown: ends every open SSE stream (unsubscribing it from the
// Fleet), writes the running jobs' records (for the store's next commit) and
// stops using `fleet`. Call before lws_context_destroy or before
// the Fleet is destroyed, on the loop thread. Idempotent; nullptr is ignored.
// After this the vhost answers 503 to every request until the context goes.
void shutdown_control_api(lws_vhost* vhost);

}  // namespace fleetlink::broker
