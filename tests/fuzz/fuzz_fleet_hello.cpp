// libFuzzer target for the broker's rig side as the wire reaches it: the bytes
// become WebSocket messages handed to the real FleetCore::on_data of a fresh
// connection (the fleet core is pure: the fake transport of the unit tests stands
// for libwebsockets, a memory store for SQLite). The first message is usually a
// HELLO, so the real HELLO path (decode, hello_policy, identity, collisions with a
// live connection, WELCOME, redelivery of the rig's open command) runs at libFuzzer
// speed; the messages after it reach ACK, NACK, RESULT, OUTPUT and EVENT.
//
// Input: one byte of flags, then messages, each a little-endian u16 length and
// that many bytes (0xFFFF instead of a length: five seconds pass and the sweep
// runs). Flags:
//   bit 0  rig-0414 already holds a live connection (the HELLO collides with it)
//   bit 1  the connection is TLS with a certificate for rig-0414 (bit 2: for rig-other)
//   bit 3  every message arrives in two fragments (the frame assembler joins them)
//   bit 4  the broker is draining
// Besides "no crash, no sanitizer report", it checks what the broker promises a
// client: every close carries a code of docs/PROTOCOL.md §7 that the broker sends,
// a connection is closed at most once and gets no frame after its close, and a
// connection that is not closed after a valid HELLO has been WELCOMEd.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>

#include "../unit/broker/fleet/fleet_core_fixture.hpp"
#include "fleetlink/close_codes.hpp"

namespace {

using fleetlink::Bytes;
using fleetlink::CloseCode;
using fleetlink::broker::OutboundKind;
using fleetlink::broker::RigSession;
using fleetlink::broker::testing::CoreFixture;

// The command the vectors' ACK, RESULT and OUTPUT frames name (tests/vectors/frames.txt).
constexpr std::string_view kVectorCmdId = "01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6e";
constexpr std::uint16_t kTick = 0xFFFF;

bool broker_sends(std::uint16_t code) {
  for (const fleetlink::CloseCodeInfo& info : fleetlink::close_code_table())
    if (static_cast<std::uint16_t>(info.code) == code) return info.sender != "agent";
  return false;
}

struct Harness {
  CoreFixture f;
  Harness(bool collide, bool draining) {
    // The vectors' cmd_id is a UUIDv7 of this time: the broker takes ids near its clock.
    f.clock.wall = 1732704493098ULL + 1000;
    // rig-0414 has an open command waiting: a HELLO as rig-0414 brings it out.
    auto request = CoreFixture::request("rig-0414", "dmesg", {{"lines", "50"}});
    request.cmd_id = std::string(kVectorCmdId);
    request.hold = true;  // a rig never seen: held until it says HELLO
    f.enqueue_ok(std::move(request));
    if (collide) (void)f.live_rig("rig-0414");
    if (draining) f.core->start_drain(std::chrono::milliseconds(60000));
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  Harness h((flags & 1) != 0, (flags & 16) != 0);
  CoreFixture& f = h.f;
  std::optional<std::string> cn;
  if (flags & 2) cn = "rig-0414";
  else if (flags & 4) cn = "rig-other";
  RigSession& s = f.connect(cn);
  const bool fragment = (flags & 8) != 0;

  bool welcomed = false;
  bool hello_valid = false;
  std::size_t at = 1;
  while (at + 2 <= size && !f.transport.close_of(s)) {
    const std::uint16_t len = static_cast<std::uint16_t>(data[at] | (data[at + 1] << 8));
    at += 2;
    if (len == kTick) {
      f.clock.advance(5000);
      f.core->sweep();
    } else {
      const std::size_t n = std::min<std::size_t>(len, size - at);
      const std::span<const std::uint8_t> message(data + at, n);
      if (!hello_valid && !welcomed) {
        const auto decoded = fleetlink::decode(message);
        hello_valid = decoded && std::holds_alternative<fleetlink::msg::Hello>(*decoded) &&
                      fleetlink::validate(*decoded).has_value();
      }
      if (fragment && n >= 2) {
        const std::size_t half = n / 2;
        f.core->on_data(s, message.first(half), n - half, false);
        if (!f.transport.close_of(s)) f.core->on_data(s, message.subspan(half), 0, true);
      } else {
        f.core->on_data(s, message, 0, true);
      }
      at += n;
    }
    // The transport writes whatever the core has for this connection.
    while (std::optional<fleetlink::broker::Outgoing> out = f.core->next_frame(s)) {
      if (f.transport.close_of(s)) std::abort();  // a frame after the close
      if (out->kind == OutboundKind::welcome) welcomed = true;
      (void)fleetlink::encode(out->message);
    }
  }

  std::size_t closes = 0;
  for (const auto& c : f.transport.closes) {
    if (c.session != &s) continue;
    ++closes;
    if (!broker_sends(static_cast<std::uint16_t>(c.code))) std::abort();
  }
  if (closes > 1) std::abort();
  // A valid HELLO that was not refused was answered.
  if (hello_valid && closes == 0 && !welcomed && !(flags & 1)) std::abort();
  f.closed(s);
  return 0;
}
