#pragma once
// The control API's handlers, one file per resource; routes.cpp binds them to
// methods and paths. Each reads its path parameters by the names routes.cpp
// gives them.
#include "control/router.hpp"

namespace fleetlink::broker::handlers {

// routes_health.cpp: the dashboard page, liveness, readiness, Prometheus
HttpResponse get_dashboard(const RouteContext& ctx);
HttpResponse get_healthz(const RouteContext& ctx);
HttpResponse get_readyz(const RouteContext& ctx);
HttpResponse get_metrics(const RouteContext& ctx);

// routes_rigs.cpp: {rig}
HttpResponse get_rigs(const RouteContext& ctx);
HttpResponse get_rig(const RouteContext& ctx);
HttpResponse post_rig_command(const RouteContext& ctx);
HttpResponse post_rig_reconnect(const RouteContext& ctx);

// routes_commands.cpp: {cmd}
HttpResponse get_commands(const RouteContext& ctx);
HttpResponse get_command(const RouteContext& ctx);
HttpResponse get_command_output(const RouteContext& ctx);
HttpResponse post_command_cancel(const RouteContext& ctx);

// routes_artifacts.cpp: {cmd}, {name}
HttpResponse get_command_artifacts(const RouteContext& ctx);
HttpResponse get_command_artifact(const RouteContext& ctx);

// routes_jobs.cpp: {job}; {batch} is the older name of the same
HttpResponse post_job(const RouteContext& ctx);
HttpResponse post_commands_job(const RouteContext& ctx);  // POST /v1/commands: answers with batch_id too
HttpResponse get_jobs(const RouteContext& ctx);
HttpResponse get_job(const RouteContext& ctx);
HttpResponse post_job_cancel(const RouteContext& ctx);
HttpResponse get_batch(const RouteContext& ctx);

// routes_admin.cpp
HttpResponse post_drain(const RouteContext& ctx);
HttpResponse post_reload(const RouteContext& ctx);

// routes_events.cpp
HttpResponse get_events(const RouteContext& ctx);

}  // namespace fleetlink::broker::handlers
