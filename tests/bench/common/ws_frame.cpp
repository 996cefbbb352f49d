#include "ws_frame.hpp"

#include <array>
#include <cstring>

namespace fleetlink::bench {

namespace {
void put_mask(std::string& out, std::uint32_t mask_key, std::span<const std::uint8_t> payload) {
  std::array<std::uint8_t, 4> m{};
  std::memcpy(m.data(), &mask_key, 4);
  out.append(reinterpret_cast<const char*>(m.data()), 4);
  const std::size_t at = out.size();
  out.resize(at + payload.size());
  for (std::size_t i = 0; i < payload.size(); ++i) {
    out[at + i] = static_cast<char>(payload[i] ^ m[i & 3U]);
  }
}
}  // namespace

void append_client_frame(std::string& out, WsOpcode opcode, std::span<const std::uint8_t> payload,
                         std::uint32_t mask_key) {
  out.push_back(static_cast<char>(0x80U | static_cast<unsigned>(opcode)));
  const std::uint64_t n = payload.size();
  if (n < 126) {
    out.push_back(static_cast<char>(0x80U | n));
  } else if (n <= 0xFFFF) {
    out.push_back(static_cast<char>(0x80U | 126U));
    out.push_back(static_cast<char>((n >> 8) & 0xFFU));
    out.push_back(static_cast<char>(n & 0xFFU));
  } else {
    out.push_back(static_cast<char>(0x80U | 127U));
    for (int shift = 56; shift >= 0; shift -= 8) {
      out.push_back(static_cast<char>((n >> shift) & 0xFFU));
    }
  }
  put_mask(out, mask_key, payload);
}

void append_client_close(std::string& out, std::uint16_t code, std::uint32_t mask_key) {
  const std::array<std::uint8_t, 2> body{static_cast<std::uint8_t>(code >> 8),
                                         static_cast<std::uint8_t>(code & 0xFFU)};
  append_client_frame(out, WsOpcode::close, body, mask_key);
}

std::optional<WsFrameHeader> parse_frame_header(std::string_view buf) noexcept {
  if (buf.size() < 2) return std::nullopt;
  const auto b0 = static_cast<std::uint8_t>(buf[0]);
  const auto b1 = static_cast<std::uint8_t>(buf[1]);
  WsFrameHeader h;
  h.fin = (b0 & 0x80U) != 0;
  h.opcode = static_cast<WsOpcode>(b0 & 0x0FU);
  const bool masked = (b1 & 0x80U) != 0;
  std::uint64_t len = b1 & 0x7FU;
  std::size_t pos = 2;
  if (len == 126) {
    if (buf.size() < 4) return std::nullopt;
    len = (static_cast<std::uint64_t>(static_cast<std::uint8_t>(buf[2])) << 8) |
          static_cast<std::uint8_t>(buf[3]);
    pos = 4;
  } else if (len == 127) {
    if (buf.size() < 10) return std::nullopt;
    len = 0;
    for (std::size_t i = 0; i < 8; ++i) len = (len << 8) | static_cast<std::uint8_t>(buf[2 + i]);
    pos = 10;
  }
  if (masked) {
    if (buf.size() < pos + 4) return std::nullopt;
    std::uint32_t m = 0;
    std::memcpy(&m, buf.data() + pos, 4);
    h.mask = m;
    pos += 4;
  }
  h.header_bytes = pos;
  h.payload_bytes = len;
  return h;
}

void unmask(std::span<std::uint8_t> payload, std::optional<std::uint32_t> mask) noexcept {
  if (!mask) return;
  std::array<std::uint8_t, 4> m{};
  std::memcpy(m.data(), &*mask, 4);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] ^= m[i & 3U];
}

std::string websocket_key_base64(std::uint64_t a, std::uint64_t b) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::array<std::uint8_t, 16> raw{};
  std::memcpy(raw.data(), &a, 8);
  std::memcpy(raw.data() + 8, &b, 8);
  std::string out;
  out.reserve(24);
  for (std::size_t i = 0; i < 16; i += 3) {
    const std::uint32_t v = (static_cast<std::uint32_t>(raw[i]) << 16) |
                            (i + 1 < 16 ? static_cast<std::uint32_t>(raw[i + 1]) << 8 : 0U) |
                            (i + 2 < 16 ? static_cast<std::uint32_t>(raw[i + 2]) : 0U);
    out.push_back(kAlphabet[(v >> 18) & 63U]);
    out.push_back(kAlphabet[(v >> 12) & 63U]);
    out.push_back(i + 1 < 16 ? kAlphabet[(v >> 6) & 63U] : '=');
    out.push_back(i + 2 < 16 ? kAlphabet[v & 63U] : '=');
  }
  return out;
}

}  // namespace fleetlink::bench
