// POST /v1/admin/drain
#include <chrono>

#include "control/handler_support.hpp"
#include "control/handlers.hpp"

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

}  // namespace fleetlink::broker::handlers
