#pragma once
// The two things every libwebsockets connection of the broker does the same
// way: write a payload with the LWS_PRE bytes of headroom lws needs in front of
// it, and close with a code and a reason politely (a close frame, then lws waits
// for the peer's). Used by the rig protocol and the control transports alike.
#include <libwebsockets.h>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace fleetlink::broker::net {

enum class WriteStatus : std::uint8_t {
  written,  // lws took it all (what the socket did not take, lws holds and sends first)
  failed,   // the connection is broken: close it
};

// A reusable buffer whose first LWS_PRE bytes are lws's headroom: encode the
// payload straight after them (start()), then write_prepared().
class TxBuffer {
 public:
  // Empties the payload and returns the buffer to append it to (headroom kept).
  std::vector<std::uint8_t>& start() {
    buf_.resize(LWS_PRE);
    return buf_;
  }
  std::vector<std::uint8_t>& bytes() noexcept { return buf_; }
  std::size_t payload_size() const noexcept { return buf_.size() - LWS_PRE; }

 private:
  std::vector<std::uint8_t> buf_ = std::vector<std::uint8_t>(LWS_PRE);
};

// Writes what follows the headroom of `tx`.
WriteStatus write_prepared(lws* wsi, TxBuffer& tx, lws_write_protocol kind);
// Copies `payload` behind headroom (one thread-local buffer, reused) and writes it.
WriteStatus write_with_pre(lws* wsi, std::span<const std::uint8_t> payload, lws_write_protocol kind);
WriteStatus write_with_pre(lws* wsi, std::string_view payload, lws_write_protocol kind);

// Closes a WebSocket with `code` and `reason` (cut to the 123 bytes a close frame
// holds) the polite way, from any callback or timer: lws sends the close frame
// and waits for the peer's (bounded by lws at 5 s, also for a peer that stopped
// reading), then drops the socket.
//
// Why not "return -1 from the callback": Debian's lws 4.1.6 is a _DEBUG build,
// and with libuv its close-and-handled path closes a second time ("uv repeat
// test"), killing the socket before the close frame goes out. An async kill takes
// the polite path only for the HTTP_KEEPALIVE_IDLE reason: every other timeout is
// a "violent death" in 4.1.6 (wsi-timeout.c sets socket_is_permanently_unusable).
void close_politely(lws* wsi, std::uint16_t code, std::string_view reason);

}  // namespace fleetlink::broker::net
