#pragma once
// The control stream (GET /v1/stream, WebSocket subprotocol "fleetlink-stream"):
// many commands over one connection, for automation that sends more than a few
// commands a second. One HTTP transaction per command costs the broker as much as
// the command itself; on the stream a socket read carries as many requests as the
// client had ready, and everything the broker has to say within one turn of its
// loop leaves in one frame.
//
// Text frames carry lines of JSON, one object per line ('\n'-separated; a frame may
// hold several lines, a line never spans frames). Requests:
//   {"op":"send","ref":"r1","rig_id":"rig-0414","kind":"dmesg","args":{"lines":"50"},"notify":"done"}
//   (and the optional fields of POST /v1/rigs/{rig}/commands: cmd_id, idempotency_key,
//   deliver_within_s, timeout_s, hold)
// Answers, on the same stream:
//   {"op":"queued","ref":"r1","cmd_id":"…","rig_id":"rig-0414","seq":7,"state":"queued"}
//       (seq null and "held":true for a rig not connected here; "existing":true when
//       the request named a command that exists: that one)
//   {"op":"refused","ref":"r1","error":"unknown_rig","detail":"…"}
//   {"op":"acked","ref":"r1","cmd_id":"…","detail":""}          (detail "duplicate" on a replayed command)
//   {"op":"output","ref":"r1","cmd_id":"…","offset":0,"data":"…"} (notify "output": each chunk as it comes)
//   {"op":"done","ref":"r1","cmd_id":"…","detail":"succeeded"}    (the final state, whatever notify says)
//   {"op":"error","ref":"r1","error":"bad_request","detail":"…"}   (a line that is not a request)
// "ref" is the client's own label for the request (at most 64 bytes, echoed back);
// "notify" is "acked" (stop after the ACK), "done" (the default: the ACK, then
// the final state) or "output" (the ACK, the output as it arrives, the final state). A frame's commands are recorded before any of its answers
// leaves. Pure logic here; the WebSocket side is control_net/control_ws.cpp.
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "fleet/fleet.hpp"

namespace fleetlink::broker::stream {

inline constexpr std::string_view kSubprotocol = "fleetlink-stream";
inline constexpr std::size_t kMaxRefBytes = 64;
inline constexpr std::size_t kMaxLineBytes = 64 * 1024;

struct SendRequest {
  std::string ref;
  CommandRequest request;  // rig_id, kind, args, and the optional cmd_id, idempotency_key, deadlines, hold
  bool until_done = true;  // notify "done" (default) or "acked"
  bool with_output = false;  // notify "output"
};

struct LineError {
  std::string ref;     // when the line had a usable one
  std::string error;   // "bad_request"
  std::string detail;
};

using Request = std::variant<SendRequest, LineError>;

// One request line (without its '\n').
Request parse_line(std::string_view line);

// Answer lines, each ending in '\n'.
std::string queued_line(std::string_view ref, const EnqueueOk& ok);
std::string refused_line(std::string_view ref, const EnqueueFailure& failure);
std::string error_line(const LineError& e);
// op: "acked" or "done".
std::string event_line(std::string_view op, std::string_view ref, std::string_view cmd_id,
                       std::string_view detail);

// notify "output": a chunk of the command's output, at its offset in the whole.
std::string output_line(std::string_view ref, std::string_view cmd_id, std::uint64_t offset, std::string_view data);

// The stream op for a Fleet event type, or empty for events streams do not carry.
std::string_view op_for_event(EventType event_type) noexcept;

}  // namespace fleetlink::broker::stream
