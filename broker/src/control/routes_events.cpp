// GET /v1/events[?types=a,b][&cmd=<cmd_id>][&rig=<rig_id>]: the answer only says "stream"; the transport
// (control_net/control_sse.cpp) keeps the connection and writes the events.
#include <string>

#include "control/handler_support.hpp"
#include "control/handlers.hpp"
#include "control/http_util.hpp"

namespace fleetlink::broker::handlers {

HttpResponse get_events(const RouteContext& ctx) {
  HttpResponse r;
  r.content_type = "text/event-stream";
  r.event_stream = true;
  // ?types=command_acked,command_done: a watcher that needs only some events
  // does not pay (nor make the broker pay) for the others.
  const auto query = parse_query(ctx.request.query);
  if (const auto t = query.find("types"); t != query.end()) {
    r.event_types = EventTypes{};
    std::string_view rest = t->second;
    while (!rest.empty()) {
      const std::size_t comma = rest.find(',');
      const std::string_view name = rest.substr(0, comma);
      const std::optional<EventType> type = event_type_from_string(name);
      if (!type) {
        std::string known;
        for (EventType k : all_event_types()) known += (known.empty() ? "" : ", ") + std::string(to_string(k));
        return json_error(400, "bad_request",
                          "unknown event type '" + std::string(name.substr(0, 64)) + "' in types (known: " + known + ")");
      }
      r.event_types.add(*type);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  // ?cmd=<cmd_id>: one command's events (its output as it comes: fleetctl logs -f);
  // ?rig=<rig_id>: one rig's.
  if (const auto c = query.find("cmd"); c != query.end()) {
    if (c->second.empty() || c->second.size() > 64) return json_error(400, "bad_request", "\"cmd\" must be a cmd_id");
    r.event_cmd_id = c->second;
  }
  if (const auto g = query.find("rig"); g != query.end()) {
    if (g->second.empty() || g->second.size() > 64) return json_error(400, "bad_request", "\"rig\" must be a rig id");
    r.event_rig_id = g->second;
  }
  return r;
}

}  // namespace fleetlink::broker::handlers
