#include "net/lws_io.hpp"

#include <algorithm>
#include <cstring>

namespace fleetlink::broker::net {

WriteStatus write_prepared(lws* wsi, TxBuffer& tx, lws_write_protocol kind) {
  const std::size_t n = tx.payload_size();
  const int written = lws_write(wsi, tx.bytes().data() + LWS_PRE, n, kind);
  if (written < 0) return WriteStatus::failed;
  // lws takes a whole payload or fails: what the socket refuses it buffers itself.
  // An HTTP write answers the payload's length; a WebSocket frame's answer also
  // counts its header, so only HTTP is held to the exact length.
  const unsigned base = static_cast<unsigned>(kind) & 0x1f;
  const bool http = base == LWS_WRITE_HTTP || base == LWS_WRITE_HTTP_FINAL || base == LWS_WRITE_HTTP_HEADERS ||
                    base == LWS_WRITE_HTTP_HEADERS_CONTINUATION;
  return http && static_cast<std::size_t>(written) != n ? WriteStatus::failed : WriteStatus::written;
}

WriteStatus write_with_pre(lws* wsi, std::span<const std::uint8_t> payload, lws_write_protocol kind) {
  thread_local TxBuffer tx;
  std::vector<std::uint8_t>& b = tx.start();
  b.insert(b.end(), payload.begin(), payload.end());
  return write_prepared(wsi, tx, kind);
}

WriteStatus write_with_pre(lws* wsi, std::string_view payload, lws_write_protocol kind) {
  return write_with_pre(
      wsi, std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size()), kind);
}

void close_politely(lws* wsi, std::uint16_t code, std::string_view reason) {
  unsigned char text[123];
  const std::size_t n = std::min(reason.size(), sizeof text);
  std::memcpy(text, reason.data(), n);
  lws_close_reason(wsi, static_cast<lws_close_status>(code), text, n);
  lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_KEEPALIVE_IDLE, LWS_TO_KILL_ASYNC);
  // Called from a timer or another connection's callback, lws would only look at
  // its timer list on its next wake-up: wake it now so the kill runs at once.
  lws_cancel_service(lws_get_context(wsi));
}

}  // namespace fleetlink::broker::net
