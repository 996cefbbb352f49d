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
#include <vector>

#include "../unit/broker/fleet/fleet_core_fixture.hpp"
#include "fleetlink/close_codes.hpp"

namespace {

using fleetlink::Bytes;
using fleetlink::CloseCode;
using fleetlink::broker::OutboundKind;
using fleetlink::broker::RigSession;
using fleetlink::broker::testing::CoreFixture;
using fleetlink::broker::testing::MemoryStore;

// The command the vectors' ACK, RESULT and OUTPUT frames name (tests/vectors/frames.txt).
constexpr std::string_view kVectorCmdId = "01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6e";
constexpr std::uint16_t kTick = 0xFFFF;

bool broker_sends(std::uint16_t code) {
  for (const fleetlink::CloseCodeInfo& info : fleetlink::close_code_table())
    if (static_cast<std::uint16_t>(info.code) == code) return info.sender != "agent";
  return false;
}

// The vectors' cmd_id is a UUIDv7 of this time: the broker takes ids near its clock.
constexpr std::uint64_t kWallMs = 1732704493098ULL + 1000;
// The live rig-0414's boot (bit 0): fixed, so an input replays the same way in any process.
constexpr std::string_view kLiveBootId = "01936d3c-5e2a-7b3c-8d4e-000000000414";

// What every input starts from, made once: the store of a broker to which
// rig-0414's open command was sent before rig-0414 ever said HELLO (held until
// it does). Each input gets a fresh FleetCore that loads a copy of it, as the
// broker does when it starts, so nothing one input does reaches the next: the
// core, the store, the transport, the registry and the clock are all new. (Made
// per input through enqueue, the command cost more than the input's own frames.)
const MemoryStore::Shared& start_store() {
  static const MemoryStore::Shared shared = [] {
    CoreFixture f({}, {}, kWallMs);
    auto request = CoreFixture::request("rig-0414", "dmesg", {{"lines", "50"}});
    request.cmd_id = std::string(kVectorCmdId);
    request.hold = true;  // a rig never seen: held until it says HELLO
    f.enqueue_ok(std::move(request));
    return *f.store->shared();
  }();
  return shared;
}

struct Harness {
  CoreFixture f;
  Harness(bool collide, bool draining)
      : f({}, std::make_shared<MemoryStore::Shared>(start_store()), kWallMs) {
    if (collide) (void)f.live_rig("rig-0414", std::string(kLiveBootId));
    if (draining) f.core->start_drain(std::chrono::milliseconds(60000));
  }
};

// Whether one of the input's messages is a valid HELLO. Asked only of a connection
// that ended neither closed nor WELCOMEd (rare), so the fuzzer does not decode every
// first message twice; such a connection took every message of the input.
bool has_valid_hello(const std::uint8_t* data, std::size_t size) {
  std::size_t at = 1;
  while (at + 2 <= size) {
    const std::uint16_t len = static_cast<std::uint16_t>(data[at] | (data[at + 1] << 8));
    at += 2;
    if (len == kTick) continue;
    const std::size_t n = std::min<std::size_t>(len, size - at);
    const auto decoded = fleetlink::decode(std::span<const std::uint8_t>(data + at, n));
    if (decoded && std::holds_alternative<fleetlink::msg::Hello>(*decoded) && fleetlink::validate(*decoded).has_value())
      return true;
    at += n;
  }
  return false;
}

}  // namespace

// Once, before the first input: a world made from the start store is the world the
// harness promises (a HELLO as rig-0414 is WELCOMEd and brings out the open command).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Harness h(false, false);
  RigSession& s = h.f.connect();
  h.f.send(s, CoreFixture::hello_for("rig-0414", "01936d3c-5e2a-7b3c-8d4e-000000000415"));
  const std::vector<fleetlink::broker::Outgoing> out = h.f.frames(s);
  const std::vector<fleetlink::msg::Command> commands = CoreFixture::commands_in(out);
  if (out.empty() || out.front().kind != OutboundKind::welcome || commands.size() != 1 ||
      commands.front().cmd_id != kVectorCmdId)
    std::abort();
  h.f.closed(s);
  return 0;
}

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
  if (closes == 0 && !welcomed && !(flags & 1) && has_valid_hello(data, size)) std::abort();
  f.closed(s);
  return 0;
}
