// GET /, /index.html, /dashboard, /healthz, /readyz, /metrics
#include <nlohmann/json.hpp>

#include "control/handler_support.hpp"
#include "control/handlers.hpp"
#include "observe/dashboard.hpp"
#include "observe/process_stats.hpp"

namespace fleetlink::broker::handlers {

HttpResponse get_dashboard(const RouteContext&) {
  HttpResponse r;
  r.content_type = "text/html; charset=utf-8";
  r.body = std::string(dashboard_html());
  return r;
}

HttpResponse get_healthz(const RouteContext&) {
  HttpResponse r;
  r.content_type = "text/plain; charset=utf-8";
  r.body = "ok";
  return r;
}

HttpResponse get_readyz(const RouteContext& ctx) {
  // A draining broker is not ready either: load balancers stop sending to it.
  const bool ready = ctx.fleet.ready() && !ctx.fleet.draining();
  nlohmann::ordered_json body{{"ready", ready}};
  if (!ready) body["because"] = ctx.fleet.not_ready_because();
  return json_response(ready ? 200 : 503, body);
}

HttpResponse get_metrics(const RouteContext& ctx) {
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = ctx.metrics.render_prometheus(read_process_gauges());
  return r;
}

}  // namespace fleetlink::broker::handlers
