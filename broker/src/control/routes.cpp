#include "control/routes.hpp"

#include "control/control_json.hpp"
#include "control/handlers.hpp"
#include "control/router.hpp"

namespace fleetlink::broker {
namespace {

using namespace handlers;

// The whole API. Allow headers list a path's methods in this order.
constexpr Route kRoutes[] = {
    {"GET", "/", get_dashboard, Route::kOpen},
    {"GET", "/index.html", get_dashboard, Route::kOpen},
    {"GET", "/dashboard", get_dashboard, Route::kOpen},
    {"GET", "/healthz", get_healthz, Route::kOpen},
    {"GET", "/readyz", get_readyz, Route::kOpen},
    {"GET", "/metrics", get_metrics, Route::kOpenByOption},

    {"GET", "/v1/rigs", get_rigs},
    {"GET", "/v1/rigs/{rig}", get_rig},
    {"POST", "/v1/rigs/{rig}/commands", post_rig_command},
    {"POST", "/v1/rigs/{rig}/reconnect", post_rig_reconnect},

    {"GET", "/v1/commands", get_commands},
    {"POST", "/v1/commands", post_commands_job},

    {"GET", "/v1/jobs", get_jobs},
    {"POST", "/v1/jobs", post_job},
    {"GET", "/v1/jobs/{job}", get_job},
    {"POST", "/v1/jobs/{job}/cancel", post_job_cancel},
    {"GET", "/v1/batches/{batch}", get_batch},

    {"GET", "/v1/commands/{cmd}", get_command},
    {"POST", "/v1/commands/{cmd}/cancel", post_command_cancel},
    {"GET", "/v1/commands/{cmd}/output", get_command_output},
    {"GET", "/v1/commands/{cmd}/artifacts", get_command_artifacts},
    {"GET", "/v1/commands/{cmd}/artifacts/{name}", get_command_artifact},

    {"POST", "/v1/admin/drain", post_drain},
    {"POST", "/v1/admin/reload", post_reload},

    {"GET", "/v1/events", get_events, Route::kNoHead | Route::kTokenInQuery},
};

const Router& control_router() {
  static const Router router(kRoutes);
  return router;
}

}  // namespace

HttpResponse handle_control_request(const HttpRequest& req, Fleet& fleet,
                                    const BrokerMetrics& metrics,
                                    const ControlApiOptions& options, std::uint64_t now_ms) {
  return control_router().dispatch(req, fleet, metrics, options, now_ms);
}

HttpResponse handle_control_request(const HttpRequest& req, Fleet& fleet,
                                    const BrokerMetrics& metrics,
                                    const ControlApiOptions& options) {
  return handle_control_request(req, fleet, metrics, options, unix_now_ms());
}

}  // namespace fleetlink::broker
