#pragma once
// Minimal RFC 6455 framing for a WebSocket *client*: frames we send are masked,
// frames from the server are not (a masked one is tolerated). Pure functions, no
// I/O, so rigsim's hot path stays a few memcpy's and the logic is unit-testable.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace fleetlink::bench {

enum class WsOpcode : std::uint8_t {
  continuation = 0x0,
  text = 0x1,
  binary = 0x2,
  close = 0x8,
  ping = 0x9,
  pong = 0xA,
};

// Appends one complete, masked frame (FIN set) to `out`.
void append_client_frame(std::string& out, WsOpcode opcode, std::span<const std::uint8_t> payload,
                         std::uint32_t mask_key);

// A close frame with a status code (no reason text).
void append_client_close(std::string& out, std::uint16_t code, std::uint32_t mask_key);

struct WsFrameHeader {
  WsOpcode opcode = WsOpcode::binary;
  bool fin = true;
  std::size_t header_bytes = 0;
  std::uint64_t payload_bytes = 0;
  std::optional<std::uint32_t> mask;  // present only if the server (wrongly) masked
};

// Parses the frame header at the start of `buf`; nullopt while more bytes are needed.
std::optional<WsFrameHeader> parse_frame_header(std::string_view buf) noexcept;

// Unmasks in place (no-op without a mask).
void unmask(std::span<std::uint8_t> payload, std::optional<std::uint32_t> mask) noexcept;

// The 16-byte random key of the upgrade request, base64 encoded.
std::string websocket_key_base64(std::uint64_t a, std::uint64_t b);

}  // namespace fleetlink::bench
