#pragma once
// The fleetlink wire messages. Each is a msgpack map on the wire; see
// docs/PROTOCOL.md for field names, types, limits and defaults.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "fleetlink/export.hpp"

namespace fleetlink {

inline constexpr std::uint32_t kProtocolVersion = 1;
// The WebSocket subprotocol (Sec-WebSocket-Protocol) of protocol version 1: the
// client session requests it and the broker answers with it (docs/PROTOCOL.md §1).
// A later version that is not wire-compatible gets a new name, so both sides can
// tell at the handshake, before any frame, which one they speak.
inline constexpr const char* kSubprotocol = "fleetlink.v1";
using Bytes = std::vector<std::uint8_t>;
using StringMap = std::map<std::string, std::string>;

namespace msg {

// agent -> broker, first frame of every connection.
struct Hello {
  std::string rig_id;
  std::string agent_version;
  std::string boot_id;                 // UUIDv7, new per agent process start
  StringMap labels;
  std::vector<std::string> kinds;      // command kinds this agent will run
  bool operator==(const Hello&) const = default;
};

// broker -> agent, answer to an accepted HELLO.
struct Welcome {
  std::string broker_id;
  std::string session_id;              // UUIDv7 of this connection
  std::uint32_t ping_interval_ms = 0;
  std::uint32_t max_frame_bytes = 0;
  bool operator==(const Welcome&) const = default;
};

// broker -> agent. seq starts at 1 on every connection; cmd_id survives reconnects.
struct Command {
  std::uint64_t seq = 0;
  std::string cmd_id;
  std::string kind;
  StringMap args;
  std::uint64_t issued_at_ms = 0;      // Unix ms when the broker enqueued it
  bool operator==(const Command&) const = default;
};

// agent -> broker: the command was accepted (not finished).
struct Ack {
  std::uint64_t seq = 0;
  std::string cmd_id;
  bool duplicate = false;              // cmd_id ran before: nothing runs again
  bool operator==(const Ack&) const = default;
};

enum class NackReason : std::uint8_t { seq_gap, unsupported_kind, not_allowed, malformed, busy };

// agent -> broker: the command was refused and will not run.
struct Nack {
  std::uint64_t seq = 0;
  std::string cmd_id;
  NackReason reason = NackReason::malformed;
  std::string detail;
  std::uint64_t expected_seq = 0;      // seq_gap only: the seq the agent was waiting for
  bool operator==(const Nack&) const = default;
};

enum class Status : std::uint8_t { ok, failed, scheduled, cancelled, timeout, duplicate };

// A file a command left behind (a suite's full log, a junit XML, a core dump),
// uploaded to the broker's artifact endpoint before the RESULT that names it: the
// RESULT carries only this reference, never the bytes (docs/PROTOCOL.md §3.6.1).
struct ArtifactRef {
  std::string name;                    // [A-Za-z0-9._-], 1..128 bytes, not starting with '.'
  std::uint64_t size = 0;
  std::string sha256;                  // 64 lower-case hex digits
  bool operator==(const ArtifactRef&) const = default;
};

// agent -> broker: the final word on a command.
struct Result {
  std::string cmd_id;
  Status status = Status::ok;
  std::int32_t exit_code = 0;
  std::int32_t signal = 0;             // terminating signal, 0 if none
  Bytes output;                        // at most kMaxResultOutput bytes
  bool truncated = false;
  std::uint64_t dropped_bytes = 0;     // output not delivered (cap or stream overflow)
  std::uint64_t started_at_ms = 0;
  std::uint64_t finished_at_ms = 0;
  std::string detail;                  // human-readable reason on failure
  // The agent process that accepted the command ended before it finished (status
  // failed): reported by a later agent process from its dedup record. Added in v1
  // as an optional field: older receivers ignore it, older senders omit it.
  bool interrupted = false;
  // Artifacts uploaded for this command (at most kMaxArtifactsPerResult).
  std::vector<ArtifactRef> artifacts;
  bool operator==(const Result&) const = default;
};

// agent -> broker: a piece of a running command's output stream.
struct OutputChunk {
  std::string cmd_id;
  std::uint64_t offset = 0;            // byte offset of data in the whole stream
  Bytes data;                          // at most kMaxChunkBytes
  bool operator==(const OutputChunk&) const = default;
};

// agent -> broker: something the rig wants the control side to know.
struct Event {
  std::string name;
  StringMap fields;
  std::uint64_t at_ms = 0;
  bool operator==(const Event&) const = default;
};

// broker -> agent: stop a running command.
struct Cancel {
  std::string cmd_id;
  bool operator==(const Cancel&) const = default;
};

// broker -> agent: this broker is going away; come back after the delay.
struct Goaway {
  std::string reason;
  std::uint32_t reconnect_after_ms = 0;
  bool operator==(const Goaway&) const = default;
};

}  // namespace msg

using Message = std::variant<msg::Hello, msg::Welcome, msg::Command, msg::Ack, msg::Nack,
                             msg::Result, msg::OutputChunk, msg::Event, msg::Cancel,
                             msg::Goaway>;

inline constexpr std::size_t kMaxResultOutput = 64 * 1024;
inline constexpr std::size_t kMaxChunkBytes = 16 * 1024;
inline constexpr std::size_t kDefaultMaxFrameBytes = 128 * 1024;

// Wire names: "hello", "welcome", ..., and back.
FLEETLINK_API const char* type_name(const Message& m) noexcept;
FLEETLINK_API const char* to_string(msg::NackReason r) noexcept;
FLEETLINK_API const char* to_string(msg::Status s) noexcept;
FLEETLINK_API std::optional<msg::NackReason> nack_reason_from_string(std::string_view s) noexcept;
FLEETLINK_API std::optional<msg::Status> status_from_string(std::string_view s) noexcept;

}  // namespace fleetlink
