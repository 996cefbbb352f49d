#pragma once
// One HTTP request and its answer, as the control API's pure routing layer
// sees them: no sockets, no libwebsockets. control_net/control_http.cpp fills HttpRequest
// from lws and writes HttpResponse back.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "control/access.hpp"
#include "fleet/events.hpp"
#include "fleetlink/expected.hpp"

namespace fleetlink::broker {

class Fleet;

struct HttpRequest {
  std::string method;          // "GET", "POST", ... (upper case)
  std::string path;            // "/v1/rigs/rig-1", without the query string
  std::string query;           // raw "a=1&b=2", may be empty
  std::string authorization;   // the Authorization header's value, may be empty
  std::string body;
  std::string peer;            // the client's address ("127.0.0.1"), for the audit log; may be empty
};

// What the audit line of a mutating call says besides its answer (set by the
// router on every POST's answer; the transport writes the line when the answer leaves).
struct AuditContext {
  Caller caller;
  std::string request;  // "POST /v1/rigs/rig-1/commands"
  std::string target;   // "rig:rig-1", "cmd:<id>", "-"
  std::string peer;
};

// POST /v1/rigs/{rig}/commands?wait=acked|done[&timeout_ms=N]: the answer is
// held until the command gets that far (or the timeout), then re-rendered.
struct HeldCommand {
  std::string cmd_id;
  std::string rig_id;
  std::uint64_t seq = 0;
  bool until_done = false;        // false: until acked (or any later state)
  std::uint64_t timeout_ms = 0;
  // A command another broker holds (not readable here): its state as that broker's
  // answer and the relayed events last told it ("" while nothing did).
  std::string seen_state;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers ("Allow", "Retry-After")
  // Set: the body is this file's first file_size bytes, streamed as the socket
  // takes them (an artifact of a gigabyte never sits in memory); `body` is ignored.
  std::string file_path;
  std::uint64_t file_size = 0;
  // GET /v1/events: the transport keeps the connection open and streams
  // Server-Sent Events after these headers (body is ignored).
  bool event_stream = false;
  // Only these event types on that stream (GET /v1/events?types=a,b).
  EventTypes event_types = EventTypes::all();
  // Only the events of this command (?cmd=), or of this rig (?rig=); empty: all.
  std::string event_cmd_id;
  std::string event_rig_id;
  // Runs once the answer has been handed to the socket: for actions that may
  // end the process (a drain with no rigs exits at once), so the caller still
  // gets its answer. Not run if the control API was shut down meanwhile.
  std::function<void(Fleet&)> after_sent;
  // Set: do not answer yet (see HeldCommand); the body above is the answer
  // should the command not be found later.
  std::optional<HeldCommand> hold;
  // Nonzero: this answer promises what the store's batch `after_record`
  // holds (Fleet::when_recorded); it leaves once that batch is durable, and if
  // the store cannot record it, `if_unrecorded` gives the answer instead.
  std::uint64_t after_record = 0;
  std::function<HttpResponse(const Error&)> if_unrecorded;
  // Set: the answer comes later (several brokers: another broker's, through the
  // mesh). The transport calls it once with a function to answer with, which
  // the Fleet calls once, on the loop, within a bounded time (its mesh deadline);
  // that answer may itself wait for a record or hold. The fields above are the
  // answer should the control API shut down first.
  using Answer = std::function<void(HttpResponse)>;
  std::function<void(Fleet&, Answer)> deferred;
  // A mutating call's: the transport writes its audit line, with the status and
  // result of the answer that finally leaves (after a hold, a record, another broker).
  std::shared_ptr<const AuditContext> audit;
};

// Largest request body the control API reads; more is answered 413.
inline constexpr std::size_t kMaxControlBodyBytes = 64 * 1024;

}  // namespace fleetlink::broker
