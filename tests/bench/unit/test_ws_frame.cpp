// The simulator's own WebSocket framing: a wrong frame here would make every
// benchmark measure a protocol error instead of the broker.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ws_frame.hpp"

using namespace fleetlink::bench;

namespace {
std::vector<std::uint8_t> payload_of(std::size_t n) {
  std::vector<std::uint8_t> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(i * 7);
  return p;
}
}  // namespace

TEST_CASE("client frames are masked and round-trip through the parser for every length form") {
  for (std::size_t n : {0UL, 1UL, 125UL, 126UL, 65535UL, 65536UL, 70000UL}) {
    const auto payload = payload_of(n);
    std::string out;
    append_client_frame(out, WsOpcode::binary, payload, 0xA1B2C3D4U);
    auto h = parse_frame_header(out);
    REQUIRE(h.has_value());
    CHECK(h->fin);
    CHECK(h->opcode == WsOpcode::binary);
    CHECK(h->payload_bytes == n);
    REQUIRE(h->mask.has_value());
    CHECK(out.size() == h->header_bytes + n);
    std::vector<std::uint8_t> body(out.begin() + static_cast<long>(h->header_bytes), out.end());
    unmask(body, h->mask);
    CHECK(body == payload);
  }
}

TEST_CASE("an incomplete header asks for more bytes") {
  std::string out;
  append_client_frame(out, WsOpcode::binary, payload_of(300), 1);
  CHECK_FALSE(parse_frame_header(std::string_view(out).substr(0, 1)));
  CHECK_FALSE(parse_frame_header(std::string_view(out).substr(0, 3)));
  CHECK(parse_frame_header(std::string_view(out).substr(0, 8)));
}

TEST_CASE("unmasked server frames parse without a mask") {
  const std::string frame{'\x82', '\x03', 'a', 'b', 'c'};
  auto h = parse_frame_header(frame);
  REQUIRE(h);
  CHECK_FALSE(h->mask);
  CHECK(h->header_bytes == 2);
  CHECK(h->payload_bytes == 3);
}

TEST_CASE("close frames carry the status code big-endian") {
  std::string out;
  append_client_close(out, 4409, 0);
  auto h = parse_frame_header(out);
  REQUIRE(h);
  CHECK(h->opcode == WsOpcode::close);
  CHECK(static_cast<std::uint8_t>(out[h->header_bytes]) == (4409 >> 8));
  CHECK(static_cast<std::uint8_t>(out[h->header_bytes + 1]) == (4409 & 0xFF));
}

TEST_CASE("the upgrade key is 16 bytes of base64") {
  const std::string key = websocket_key_base64(0x0123456789ABCDEFULL, 0xFEDCBA9876543210ULL);
  CHECK(key.size() == 24);
  CHECK(key.substr(22) == "==");
}
