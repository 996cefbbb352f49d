#pragma once
// Every way a frame from a rig can be refused, and what each does to the
// connection: the one place that maps decode errors, oversized frames, floods
// and frames out of place to close codes (docs/PROTOCOL.md, section 5). Pure.
#include <string>

#include "fleetlink/close_codes.hpp"
#include "fleetlink/codec.hpp"
#include "fleetlink/expected.hpp"
#include "fleetlink/messages.hpp"

namespace fleetlink::broker {

struct FrameFault {
  bool close = true;         // false: counted and ignored, the connection goes on
  CloseCode code = CloseCode::malformed;
  std::string reason;        // for the close frame and the log (at most 123 bytes on the wire)
};

// A frame decode() refused (its size was already checked: oversized_fault). `live`: the connection is past its HELLO (an unknown
// type is then the peer's newer protocol, which lenient mode tolerates).
FrameFault decode_fault(const Error& error, bool live, Strictness strictness);
// A frame whose pieces add up to more than max_frame_bytes.
FrameFault oversized_fault(std::size_t max_frame_bytes);
// Over the inbound frame rate with a frame that answers no command.
FrameFault flood_fault();
// The first frame of a connection is not a HELLO.
FrameFault not_hello_fault();
// A frame only brokers send (welcome, command, cancel, goaway) or a second HELLO.
FrameFault unexpected_fault(const Message& m);

// Traffic a command asked for (its ACK, NACK, RESULT, output): over the rate it
// is slowed down (reading paused until the bucket refills, so TCP pushes back on
// the agent), never punished.
bool answers_a_command(const Message& m) noexcept;

}  // namespace fleetlink::broker
