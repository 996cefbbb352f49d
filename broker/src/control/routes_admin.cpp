// POST /v1/admin/drain, POST /v1/admin/reload
#include <chrono>
#include <string>

#include "control/handler_support.hpp"
#include "control/handlers.hpp"
#include "control/reload.hpp"

namespace fleetlink::broker::handlers {
namespace {

constexpr std::uint64_t kMaxDrainWindowMs = 24ULL * 3600 * 1000;

}  // namespace

HttpResponse post_drain(const RouteContext& ctx) {
  HttpResponse error;
  const std::optional<nlohmann::ordered_json> body = parse_object_body(ctx.request, true, error);
  if (!body) return error;
  std::uint64_t window_ms = static_cast<std::uint64_t>(ctx.options.default_drain_window.count());
  const auto it = body->find("window_ms");
  if (it != body->end() && !it->is_null()) {
    if (!it->is_number_unsigned() || it->get<std::uint64_t>() > kMaxDrainWindowMs) {
      return json_error(400, "bad_request",
                        "\"window_ms\" must be a non-negative integer (at most 86400000)");
    }
    window_ms = it->get<std::uint64_t>();
  }
  HttpResponse r = json_response(202, nlohmann::ordered_json{{"draining", true}, {"window_ms", window_ms}});
  if (!ctx.fleet.draining()) {
    // After the answer is out: a broker with no rigs finishes draining at once.
    r.after_sent = [window_ms](Fleet& f) {
      if (!f.draining()) f.start_drain(std::chrono::milliseconds(window_ms));
    };
  }
  return r;
}

HttpResponse post_reload(const RouteContext& ctx) {
  HttpResponse error;
  // No fields; an empty body or {} (what a generic client sends with a POST).
  if (!parse_object_body(ctx.request, true, error)) return error;
  if (ctx.options.reloader == nullptr)
    return json_error(503, "unavailable", "this broker cannot reload (no reloader configured)");
  const std::string trigger =
      "POST /v1/admin/reload by " + std::string(ctx.caller.authenticated ? ctx.caller.name : "-");
  const ReloadOutcome out = ctx.options.reloader->reload(trigger);
  // A failure is the broker's files, not the request: 500, and nothing changed.
  if (!out.ok) return json_error(500, "reload_failed", out.detail);
  return json_response(200, nlohmann::ordered_json{{"reloaded", true},
                                                   {"changed", out.changes},
                                                   {"warnings", out.warnings},
                                                   {"rigs_to_check", out.rigs_to_check}});
}

}  // namespace fleetlink::broker::handlers
