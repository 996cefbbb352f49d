#pragma once
// JSON views of the fleet for the control API, the dashboard and SSE.
// Pure functions of their inputs (the current time is a parameter).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fleet/fleet.hpp"

namespace fleetlink::broker {

// Unix milliseconds -> "2026-11-29T20:31:46.123Z".
std::string iso8601_utc_ms(std::uint64_t unix_ms);
// As above, or JSON null when absent.
nlohmann::ordered_json iso8601_or_null(const std::optional<std::uint64_t>& unix_ms);

// Bytes -> valid UTF-8: every invalid sequence becomes U+FFFD.
std::string to_utf8_lossy(std::string_view bytes);

// {"error":code,"detail":detail}
nlohmann::ordered_json error_body(std::string_view code, std::string_view detail);

// One rig as listed by GET /v1/rigs; with_unacked adds "unacked_commands" (GET /v1/rigs/{rig}).
nlohmann::ordered_json rig_json(const RigView& rig, std::uint64_t now_ms, bool with_unacked);

// GET /v1/commands/{id}
nlohmann::ordered_json command_json(const CommandView& cmd);
// The artifacts stored for a command (routes_artifacts.cpp): name, size, sha256, rig, time, href.
class ArtifactStore;
nlohmann::ordered_json artifacts_json(const ArtifactStore& store, const std::string& cmd_id);

// The most of a command's output the broker has, in one piece: the RESULT's
// output when it holds at least as much as was streamed (or nothing was), else
// the streamed tail. offset: where data starts in the whole output.
struct CommandOutput {
  std::string data;
  std::uint64_t offset = 0;
  std::uint64_t total_bytes = 0;  // every byte the rig produced, as far as the broker knows
  bool complete = false;          // data is all of it
};
CommandOutput output_of(const CommandView& cmd);
nlohmann::ordered_json command_output_json(const CommandView& cmd, const CommandOutput& out);

// 202 body for an accepted command; the same as text, written directly (it
// answers every POST of a command).
nlohmann::ordered_json enqueue_ok_json(const EnqueueOk& ok);
std::string enqueue_ok_json_text(const EnqueueOk& ok);

// The refusal's HTTP status and body. rig_unresponsive has exactly the keys
// error, rig_id, detail, last_ack_seq, last_ack_at, suggested_action.
int enqueue_failure_status(EnqueueError e) noexcept;
nlohmann::ordered_json enqueue_failure_json(const EnqueueFailure& failure);

// An SSE/dashboard event.
nlohmann::ordered_json event_json(const FleetEvent& event);
// The same event as JSON text, byte for byte what dump_json(event_json(event))
// gives, written directly (no JSON tree): it is formatted for every ACK and
// RESULT while someone watches GET /v1/events. Falls back to the tree for text
// that is not plain ASCII, where dump_json's replacement rules apply.
std::string event_json_text(const FleetEvent& event);

// Appends s as a JSON string value, exactly as dump_json would write it.
void append_json_value(std::string& out, std::string_view s);

// Serialises without throwing: invalid UTF-8 anywhere (labels, details) becomes U+FFFD.
std::string dump_json(const nlohmann::ordered_json& j);

// Unix time now in milliseconds (the system clock).
std::uint64_t unix_now_ms() noexcept;

}  // namespace fleetlink::broker
