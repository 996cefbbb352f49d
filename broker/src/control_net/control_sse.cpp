// GET /v1/events: a transaction that stays open as a stream of Server-Sent
// Events (control/sse_format.hpp), fed by a typed Fleet subscription. Events
// are queued from the Fleet's sink and written once per turn of the loop (the
// end-of-turn flush) or from the writeable callback when the socket is slow; a
// client whose queue overflows is hung up, and reconnects.
#include <libwebsockets.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "control_net/control_state.hpp"
#include "net/lws_io.hpp"

namespace fleetlink::broker::control_net {
namespace {

constexpr lws_usec_t kSseHeartbeatUs = 15LL * LWS_USEC_PER_SEC;

void request_write(Transaction* tx) {
  tx->sse->write_requested = true;
  lws_callback_on_writable(tx->wsi);
}

}  // namespace

int start_event_stream(Transaction* tx, const HttpResponse& r) {
  HttpResponse headers = r;
  headers.headers.emplace_back("X-Accel-Buffering", "no");
  std::string head;
  if (!render_headers(tx->wsi, headers, 0, true, head)) return -1;
  EventStream& es = tx->sse.emplace();
  es.out = std::move(head);
  es.out += "retry: 2000\n\n";
  // An event stream outlives a normal transaction: give back the header
  // table (a bounded pool) and drop any pending transaction timeout.
  // (lws_http_mark_sse() only does this for h2 in 4.1.6 and logs an error on h1.)
  lws_http_headers_detach(tx->wsi);
  lws_set_timeout(tx->wsi, NO_PENDING_TIMEOUT, 0);
  ControlState* state = tx->state;
  auto sink = [tx, types = r.event_types, rig = r.event_rig_id](const FleetEvent& event) {
    // Runs on the loop thread inside the Fleet (e.g. while a rig's ACK is read).
    EventStream& stream = *tx->sse;
    if (stream.closing) return;
    if (!types.contains(event.type) || (!rig.empty() && event.rig_id != rig)) return;
    if (!stream.queue.push_event(event, stream.next_event_id++)) {
      stream.closing = true;  // a client that does not read is dropped, not buffered forever
      request_write(tx);
      return;
    }
    flush_at_end_of_turn(tx);
  };
  // One command's events: a subscription of its own, so that its output is
  // formatted for this stream without every other command's being built.
  EventBus& bus = state->fleet->events();
  tx->subscription = r.event_cmd_id.empty() ? bus.subscribe(r.event_types, std::move(sink))
                                            : bus.subscribe_command(r.event_cmd_id, std::move(sink));
  tx->subscribed = true;
  state->streams.insert(tx);
  watch_for_hangups(state);
  lws_set_timer_usecs(tx->wsi, kSseHeartbeatUs);
  request_write(tx);
  return 0;
}

int write_event_stream(Transaction* tx) {
  EventStream& es = *tx->sse;
  es.write_requested = false;
  if (es.out_pos >= es.out.size() && !es.queue.empty()) {
    es.out = es.queue.pop(kWriteChunk);
    es.out_pos = 0;
  }
  if (es.out_pos < es.out.size()) {
    const std::size_t n = std::min(kWriteChunk, es.out.size() - es.out_pos);
    const std::string_view piece(es.out.data() + es.out_pos, n);
    if (net::write_with_pre(tx->wsi, piece, LWS_WRITE_HTTP) != net::WriteStatus::written) return -1;
    es.out_pos += n;
  }
  if (es.out_pos >= es.out.size()) {
    es.out.clear();
    es.out_pos = 0;
    if (es.closing) return -1;
  }
  if (!es.queue.empty() || es.out_pos < es.out.size()) request_write(tx);
  return 0;
}

// Unless its writeable callback is due anyway (then that callback writes it).
// Whatever does not fit one write waits for the writeable callback.
void flush_event_stream(Transaction* tx) {
  EventStream& es = *tx->sse;
  if (es.write_requested || es.queue.empty()) return;
  if (es.out_pos < es.out.size() || lws_partial_buffered(tx->wsi)) {
    request_write(tx);  // the writeable callback writes the queue after what is pending
    return;
  }
  const std::string text = es.queue.pop(kWriteChunk);
  if (net::write_with_pre(tx->wsi, text, LWS_WRITE_HTTP) != net::WriteStatus::written) es.closing = true;
  if (es.closing || !es.queue.empty()) request_write(tx);  // it hangs up, or writes the rest
}

void event_stream_heartbeat(Transaction* tx) {
  tx->sse->queue.push(kSseHeartbeat);
  request_write(tx);
  lws_set_timer_usecs(tx->wsi, kSseHeartbeatUs);
}

}  // namespace fleetlink::broker::control_net
