// libwebsockets glue for the control API: one vhost on its own port whose
// first protocol answers every HTTP request (no mounts). Requests are turned
// into HttpRequest, routed by the pure handle_control_request(), and the
// HttpResponse is written back from the writeable callback. HTTP/1.1
// keep-alive is kept: each answer has a Content-Length and ends with
// lws_http_transaction_completed(). GET /v1/events stays open as an SSE
// stream fed by Fleet::subscribe.
#include "control_net/control_vhost.hpp"

#include <libwebsockets.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <new>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "fleet/command_table.hpp"
#include "control/batches.hpp"
#include "control/control_json.hpp"
#include "control/handler_support.hpp"
#include "control/routes.hpp"
#include "control/stream_protocol.hpp"
#include "control/http_message.hpp"
#include "control/http_util.hpp"
#include "control/sse_format.hpp"

namespace fleetlink::broker {
namespace {

// Bytes per writeable callback of an event stream. One turn of the loop can read
// ~1000 rigs' ACKs and RESULTs (two events each, ~200 B): the stream must drain
// faster than that or a busy fan-out overflows its queue.
constexpr std::size_t kWriteChunk = 1024 * 1024;
constexpr std::size_t kHeaderSpace = 2048;                 // status line + headers
constexpr std::int64_t kHugeBody = 16LL * 1024 * 1024;     // hang up instead of reading it
constexpr lws_usec_t kSseHeartbeatUs = 15LL * LWS_USEC_PER_SEC;
constexpr int kKeepAliveIdleSecs = 60;

struct Transaction;
struct ControlState;
struct StreamSession;

// Every live ControlState, so that a vhost whose creation failed half-way
// (and may or may not have run PROTOCOL_DESTROY) is freed exactly once.
std::set<ControlState*>& live_states() {
  static std::set<ControlState*> states;
  return states;
}

// Runs the fan-out batches from the loop (never from inside a Fleet event
// sink, which must not enqueue): the first member, so the timer callback
// finds its state.
struct BatchPump {
  lws_sorted_usec_list_t sul;  // must stay first
  ControlState* state = nullptr;
  bool scheduled = false;
};

// Writes the event streams once per turn of the loop: every event of the turn
// (up to a thousand ACKs read in one go) in one write per stream, right after
// the turn's I/O, without arming POLLOUT. Runs as a zero-delay timer, which
// libuv fires before it waits for I/O again. The first member, like BatchPump.
struct StreamFlush {
  lws_sorted_usec_list_t sul;  // must stay first
  ControlState* state = nullptr;
  bool scheduled = false;
  std::vector<Transaction*> streams;  // with events queued since the last flush
  std::vector<StreamSession*> sessions;  // control streams (/v1/stream) likewise
};

// One per control vhost; owned by the vhost (freed at PROTOCOL_DESTROY).
struct ControlState {
  ControlApiOptions options;  // options.host's buffer is the vhost's iface string
  Fleet* fleet = nullptr;
  BrokerMetrics* metrics = nullptr;
  bool shut_down = false;
  std::set<Transaction*> streams;  // transactions subscribed to the Fleet (SSE, held POSTs)
  std::set<StreamSession*> sessions;  // open control streams (WebSocket /v1/stream)
  // Connections that already completed a keep-alive transaction: only their
  // later requests can be pipelined ones (see request_is_pipelined).
  std::unordered_set<lws*> kept_alive;
  // Fan-out batches. The Fleet is listened to only while one runs (events
  // cost the data plane something only when somebody listens).
  lws_context* context = nullptr;
  BatchTable batches;
  BatchPump pump;
  StreamFlush flush;
  std::vector<std::string> finished_cmds;  // from the sink, for the pump
  std::uint64_t batch_subscription = 0;
  bool batch_subscribed = false;
};

void sync_batch_subscription(ControlState* state);

void run_batch_pump(lws_sorted_usec_list_t* sul) {
  auto* pump = reinterpret_cast<BatchPump*>(sul);
  ControlState* state = pump->state;
  pump->scheduled = false;
  if (state == nullptr || state->shut_down || state->fleet == nullptr) return;
  std::vector<std::string> done;
  done.swap(state->finished_cmds);
  for (const std::string& cmd_id : done) state->batches.command_finished(*state->fleet, cmd_id);
  sync_batch_subscription(state);
}

// Listen to the Fleet while a batch has commands in flight; stop when none.
void sync_batch_subscription(ControlState* state) {
  if (state->shut_down || state->fleet == nullptr) return;
  const bool want = state->batches.running() > 0;
  if (want && !state->batch_subscribed) {
    const EventTypes finals{EventType::command_done, EventType::command_nacked, EventType::command_lost};
    state->batch_subscription = state->fleet->events().subscribe(finals, [state](const FleetEvent& event) {
      state->finished_cmds.push_back(event.cmd_id);
      if (!state->pump.scheduled && state->context != nullptr) {
        state->pump.scheduled = true;
        lws_sul_schedule(state->context, 0, &state->pump.sul, run_batch_pump, 1);
      }
    });
    state->batch_subscribed = true;
  } else if (!want && state->batch_subscribed) {
    state->fleet->events().unsubscribe(state->batch_subscription);
    state->batch_subscribed = false;
  }
}

// Routes a request (the only way a batch starts, so the place to start listening).
HttpResponse route_request(ControlState* state, const HttpRequest& request) {
  HttpResponse r = handle_control_request(request, *state->fleet, *state->metrics, state->options);
  sync_batch_subscription(state);
  return r;
}

// One HTTP transaction (one request/response, or one SSE stream).
struct Transaction {
  ControlState* state = nullptr;
  lws* wsi = nullptr;
  HttpRequest request;
  bool body_too_large = false;
  // SSE: headers and events taken from the queue, not yet written.
  std::string out;
  std::size_t out_pos = 0;
  bool responding = false;
  bool close_after = false;      // hang up once written (413 and friends)
  // A held POST (?wait=acked|done): answered when hold_done.
  std::optional<HeldCommand> hold;
  HttpResponse held_fallback;    // the answer if the Fleet is gone by then
  bool hold_done = false;
  // SSE
  bool sse = false;
  bool sse_closing = false;
  std::uint64_t subscription = 0;
  bool subscribed = false;
  std::uint64_t next_event_id = 1;
  SseQueue queue;
  bool write_requested = false;  // a writeable callback is on its way
  bool flush_pending = false;    // listed in state->flush.streams
};

// lws zero-allocates this per transaction; it only holds our pointer.
struct PerSession {
  Transaction* tx;
};

ControlState* state_of(lws* wsi) {
  lws_vhost* vh = lws_get_vhost(wsi);
  return vh ? static_cast<ControlState*>(lws_vhost_user(vh)) : nullptr;
}

std::string header_value(lws* wsi, lws_token_indexes token) {
  const int len = lws_hdr_total_length(wsi, token);
  if (len <= 0) return {};
  std::string value(static_cast<std::size_t>(len) + 1, '\0');
  const int n = lws_hdr_copy(wsi, value.data(), len + 1, token);
  value.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return value;
}

// The query string, re-joined from lws's per-argument fragments.
std::string query_string(lws* wsi) {
  std::string query;
  char buf[1024];
  for (int i = 0; i < 64; ++i) {
    const int n = lws_hdr_copy_fragment(wsi, buf, sizeof buf, WSI_TOKEN_HTTP_URI_ARGS, i);
    if (n <= 0) break;
    if (!query.empty()) query += '&';
    query.append(buf, static_cast<std::size_t>(n));
  }
  return query;
}

std::string request_method(lws* wsi) {
  struct MethodToken {
    lws_token_indexes token;
    const char* name;
  };
  static constexpr MethodToken kMethods[] = {
      {WSI_TOKEN_GET_URI, "GET"},       {WSI_TOKEN_POST_URI, "POST"},
      {WSI_TOKEN_PUT_URI, "PUT"},       {WSI_TOKEN_PATCH_URI, "PATCH"},
      {WSI_TOKEN_DELETE_URI, "DELETE"}, {WSI_TOKEN_OPTIONS_URI, "OPTIONS"},
      {WSI_TOKEN_HEAD_URI, "HEAD"},
  };
  for (const MethodToken& m : kMethods) {
    if (lws_hdr_total_length(wsi, m.token) > 0) return m.name;
  }
  return "UNKNOWN";
}

bool method_has_body(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH";
}

// Status line and headers into `out`. Returns false if lws refuses (buffer).
bool render_headers(lws* wsi, const HttpResponse& r, std::size_t content_length, bool sse,
                    std::string& out) {
  unsigned char buf[kHeaderSpace];
  unsigned char* p = buf;
  unsigned char* end = buf + sizeof buf - 1;
  const lws_filepos_t len = sse ? LWS_ILLEGAL_HTTP_CONTENT_LEN : content_length;
  if (lws_add_http_common_headers(wsi, static_cast<unsigned>(r.status), r.content_type.c_str(),
                                  len, &p, end) != 0) {
    return false;
  }
  auto add = [&](const std::string& name, const std::string& value) {
    const std::string with_colon = name + ":";
    return lws_add_http_header_by_name(
               wsi, reinterpret_cast<const unsigned char*>(with_colon.c_str()),
               reinterpret_cast<const unsigned char*>(value.data()),
               static_cast<int>(value.size()), &p, end) == 0;
  };
  if (!add("Cache-Control", "no-store")) return false;
  for (const auto& [name, value] : r.headers) {
    if (!add(name, value)) return false;
  }
  if (lws_finalize_http_header(wsi, &p, end) != 0) return false;
  out.assign(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(p - buf));
  return true;
}

void stop_stream(Transaction* tx) {
  if (tx->subscribed && tx->state && !tx->state->shut_down && tx->state->fleet) {
    tx->state->fleet->events().unsubscribe(tx->subscription);
  }
  tx->subscribed = false;
  if (tx->state) tx->state->streams.erase(tx);
  if (tx->flush_pending && tx->state) {
    std::erase(tx->state->flush.streams, tx);
    tx->flush_pending = false;
  }
}

void destroy_transaction(PerSession* pss) {
  if (pss == nullptr || pss->tx == nullptr) return;
  Transaction* tx = pss->tx;
  pss->tx = nullptr;
  stop_stream(tx);
  delete tx;
}

// Holds a POST until its command is acked/done (or the timeout): one Fleet
// subscription for the wait, the answer rendered when it ends.
int start_hold(Transaction* tx, HttpResponse r) {
  tx->hold = std::move(r.hold);
  r.hold.reset();
  tx->held_fallback = std::move(r);
  ControlState* state = tx->state;
  tx->subscription = state->fleet->events().subscribe_command(tx->hold->cmd_id, [tx](const FleetEvent& event) {
    // Inside the Fleet: only note it; the answer is built in the writeable callback.
    if (!tx->hold_done && tx->hold && held_command_reached(*tx->hold, event)) {
      tx->hold_done = true;
      lws_callback_on_writable(tx->wsi);
    }
  });
  tx->subscribed = true;
  state->streams.insert(tx);
  // The wait may be longer than lws's own transaction timeouts.
  lws_set_timeout(tx->wsi, NO_PENDING_TIMEOUT, 0);
  lws_set_timer_usecs(tx->wsi, static_cast<lws_usec_t>(tx->hold->timeout_ms) * 1000);
  return 0;
}

void run_after_sent(ControlState* state, const std::function<void(Fleet&)>& action) {
  if (action && state != nullptr && !state->shut_down && state->fleet != nullptr) {
    action(*state->fleet);
  }
}

// Writes the whole answer and completes the transaction, from inside the
// callback that produced it. lws 4.1.6 needs this: while a transaction is left
// open after BODY_COMPLETION, a pipelined next request in the same read makes
// it call BODY_COMPLETION again and again. lws keeps whatever the socket does
// not take at once and defers the completion until it is flushed. Frees `tx`.
int send_and_complete(Transaction* tx, HttpResponse r) {
  lws* wsi = tx->wsi;
  std::string head;
  if (!render_headers(wsi, r, r.body.size(), false, head)) return -1;
  std::vector<unsigned char> buf(LWS_PRE + head.size() + r.body.size());
  std::memcpy(buf.data() + LWS_PRE, head.data(), head.size());
  if (!r.body.empty()) std::memcpy(buf.data() + LWS_PRE + head.size(), r.body.data(), r.body.size());
  const std::size_t n = head.size() + r.body.size();
  const int written = lws_write(wsi, buf.data() + LWS_PRE, n, LWS_WRITE_HTTP_FINAL);
  ControlState* state = tx->state;
  if (written < 0 || static_cast<std::size_t>(written) != n) return -1;
  if (tx->close_after) {
    run_after_sent(state, r.after_sent);
    return -1;
  }
  // Keep-alive: ready for the next request. This rebinds the protocol, which
  // frees `tx` (HTTP_DROP_PROTOCOL): it must not be touched after.
  const int rc = lws_http_transaction_completed(wsi) ? -1 : 0;
  if (rc == 0 && state != nullptr) state->kept_alive.insert(wsi);
  run_after_sent(state, r.after_sent);
  return rc;
}

// The wait of a held POST is over: answer with the command's state now.
int finish_hold(Transaction* tx) {
  lws_set_timer_usecs(tx->wsi, LWS_SET_TIMER_USEC_CANCEL);
  ControlState* state = tx->state;
  const bool fleet_alive = !state->shut_down && state->fleet != nullptr;
  HttpResponse r = fleet_alive ? held_command_answer(*tx->hold, *state->fleet)
                               : tx->held_fallback;
  stop_stream(tx);
  tx->hold.reset();
  return send_and_complete(tx, std::move(r));
}

// Writes what a stream has queued, now, unless its writeable callback is due
// anyway (then that callback writes it). Whatever does not fit one write waits
// for the writeable callback.
void flush_stream(Transaction* tx) {
  if (tx->write_requested || tx->queue.empty()) return;
  if (tx->out_pos < tx->out.size() || lws_partial_buffered(tx->wsi)) {
    tx->write_requested = true;  // the writeable callback writes the queue after what is pending
    lws_callback_on_writable(tx->wsi);
    return;
  }
  const std::string text = tx->queue.pop(kWriteChunk);
  std::vector<unsigned char> buf(LWS_PRE + text.size());
  std::memcpy(buf.data() + LWS_PRE, text.data(), text.size());
  const int written = lws_write(tx->wsi, buf.data() + LWS_PRE, text.size(), LWS_WRITE_HTTP);
  if (written < 0 || static_cast<std::size_t>(written) != text.size()) tx->sse_closing = true;
  if (tx->sse_closing || !tx->queue.empty()) {
    tx->write_requested = true;  // it hangs up, or writes the rest
    lws_callback_on_writable(tx->wsi);
  }
}

// One WebSocket control stream (control_stream.hpp): the commands it sent and is
// still reporting on, and the answer lines not written yet.
struct StreamSession {
  ControlState* state = nullptr;
  lws* wsi = nullptr;
  std::string rx;     // a frame arriving in pieces
  std::string out;    // answer lines waiting for the end of the turn
  std::size_t out_pos = 0;
  struct Watched {
    std::string ref;
    bool until_done = true;
  };
  std::unordered_map<std::string, Watched, TransparentStringHash, std::equal_to<>> watched;  // by cmd_id
  std::uint64_t subscription = 0;
  bool subscribed = false;
  bool flush_pending = false;
  bool write_requested = false;
  bool closing = false;    // a close is under way: nothing more is read or written
};

// What a control stream buffers for a client that does not read: past it, 1008.
constexpr std::size_t kMaxStreamBacklog = 16 * 1024 * 1024;

// lws zero-allocates this per connection; it only holds our pointer.
struct StreamPerSession {
  StreamSession* session;
};

void close_session(StreamSession* s, lws_close_status code, std::string reason) {
  if (s->closing) return;
  s->closing = true;
  if (reason.size() > 123) reason.resize(123);
  // The polite way (a close frame with our code, then lws waits for the peer's),
  // as the rig connections do: see Broker::request_close.
  lws_close_reason(s->wsi, code, reinterpret_cast<unsigned char*>(reason.data()), reason.size());
  lws_set_timeout(s->wsi, PENDING_TIMEOUT_HTTP_KEEPALIVE_IDLE, LWS_TO_KILL_ASYNC);
  lws_cancel_service(lws_get_context(s->wsi));
}

// Writes the session's pending lines as one text frame unless a writeable
// callback is due (it writes them) or lws still holds part of the last one.
void write_session(StreamSession* s) {
  if (s->closing || s->out_pos >= s->out.size()) return;
  if (lws_partial_buffered(s->wsi)) {  // lws first sends what it holds, then calls us
    s->write_requested = true;
    lws_callback_on_writable(s->wsi);
    return;
  }
  const std::size_t n = std::min(kWriteChunk, s->out.size() - s->out_pos);
  std::vector<unsigned char> buf(LWS_PRE + n);
  std::memcpy(buf.data() + LWS_PRE, s->out.data() + s->out_pos, n);
  if (lws_write(s->wsi, buf.data() + LWS_PRE, n, LWS_WRITE_TEXT) < 0) {
    close_session(s, LWS_CLOSE_STATUS_ABNORMAL_CLOSE, "write failed");
    return;
  }
  s->out_pos += n;
  if (s->out_pos >= s->out.size()) {
    s->out.clear();
    s->out_pos = 0;
  } else {
    s->write_requested = true;
    lws_callback_on_writable(s->wsi);
  }
}

void flush_session_at_end_of_turn(StreamSession* s);

void queue_line(StreamSession* s, std::string line) {
  if (s->closing) return;
  if (s->out.size() - s->out_pos + line.size() > kMaxStreamBacklog) {
    close_session(s, LWS_CLOSE_STATUS_POLICY_VIOLATION, "client does not read its answers");
    return;
  }
  s->out += line;
  flush_session_at_end_of_turn(s);
}

void run_stream_flush(lws_sorted_usec_list_t* sul) {
  auto* flush = reinterpret_cast<StreamFlush*>(sul);
  flush->scheduled = false;
  std::vector<Transaction*> streams;
  streams.swap(flush->streams);
  for (Transaction* tx : streams) {
    tx->flush_pending = false;
    flush_stream(tx);
  }
  std::vector<StreamSession*> sessions;
  sessions.swap(flush->sessions);
  for (StreamSession* s : sessions) {
    s->flush_pending = false;
    if (!s->write_requested) write_session(s);
  }
}

void schedule_flush(ControlState* state) {
  if (!state->flush.scheduled && state->context != nullptr) {
    state->flush.scheduled = true;
    lws_sul_schedule(state->context, 0, &state->flush.sul, run_stream_flush, 1);
  }
}

void flush_session_at_end_of_turn(StreamSession* s) {
  if (!s->flush_pending) {
    s->flush_pending = true;
    s->state->flush.sessions.push_back(s);
  }
  schedule_flush(s->state);
}

void flush_at_end_of_turn(Transaction* tx) {
  ControlState* state = tx->state;
  if (!tx->flush_pending) {
    tx->flush_pending = true;
    state->flush.streams.push_back(tx);
  }
  schedule_flush(state);
}

int start_event_stream(Transaction* tx, const HttpResponse& r) {
  HttpResponse headers = r;
  headers.headers.emplace_back("X-Accel-Buffering", "no");
  if (!render_headers(tx->wsi, headers, 0, true, tx->out)) return -1;
  tx->sse = true;

  tx->out += "retry: 2000\n\n";
  // An SSE stream outlives a normal transaction: give back the header
  // table (a bounded pool) and drop any pending transaction timeout.
  // (lws_http_mark_sse() only does this for h2 in 4.1.6 and logs an error on h1.)
  lws_http_headers_detach(tx->wsi);
  lws_set_timeout(tx->wsi, NO_PENDING_TIMEOUT, 0);
  ControlState* state = tx->state;
  tx->subscription = state->fleet->events().subscribe(r.event_types, [tx](const FleetEvent& event) {
    // Runs on the loop thread inside the Fleet (e.g. while a rig's ACK is read).
    if (tx->sse_closing) return;
    if (!tx->queue.push_event(event, tx->next_event_id++)) {
      tx->sse_closing = true;  // a client that does not read is dropped, not buffered forever
      tx->write_requested = true;
      lws_callback_on_writable(tx->wsi);
      return;
    }
    flush_at_end_of_turn(tx);
  });
  tx->subscribed = true;
  state->streams.insert(tx);
  lws_set_timer_usecs(tx->wsi, kSseHeartbeatUs);
  tx->write_requested = true;
  lws_callback_on_writable(tx->wsi);
  return 0;
}

// Routes the complete request and answers it (or starts holding it).
int respond(Transaction* tx) {
  if (tx->responding) return 0;  // lws may repeat BODY_COMPLETION; answer once
  tx->responding = true;
  ControlState* state = tx->state;
  HttpResponse r;
  if (tx->body_too_large) {
    r = json_error(413, "payload_too_large",
                   "request body over " + std::to_string(kMaxControlBodyBytes) + " bytes");
    tx->close_after = true;
  } else if (state->shut_down || state->fleet == nullptr) {
    r = json_error(503, "shutting_down", "the broker is shutting down");
  } else {
    r = route_request(state, tx->request);
  }
  if (r.event_stream) return start_event_stream(tx, r);
  if (r.hold) return start_hold(tx, std::move(r));
  return send_and_complete(tx, std::move(r));
}

// Answers at once from LWS_CALLBACK_HTTP and hangs up (a body, if any, is
// not read). Only for small answers: one write, whatever is not taken now is lost.
int answer_now_and_close(lws* wsi, HttpResponse r) {
  if (r.event_stream) r = json_error(400, "bad_request", "an event stream needs GET");
  r.headers.emplace_back("Connection", "close");
  std::string out;
  if (!render_headers(wsi, r, r.body.size(), false, out)) return -1;
  out += r.body;
  std::vector<unsigned char> buf(LWS_PRE + out.size());
  std::memcpy(buf.data() + LWS_PRE, out.data(), out.size());
  lws_write(wsi, buf.data() + LWS_PRE, out.size(), LWS_WRITE_HTTP_FINAL);
  run_after_sent(state_of(wsi), r.after_sent);
  return -1;
}

// Whether the request lws just parsed came out of its per-connection buffer
// of bytes read after the previous request (HTTP/1.1 pipelining), rather
// than from a fresh socket read.
//
// lws 4.1.6 cannot read the body of such a request: lws_http_action() then
// feeds the connection's buffer to the body parser from the start of the
// request (headers and all), and once the transaction is complete it loops
// forever on the rest of the buffer (100% CPU, the whole event loop stalls).
// A request with a body that may be pipelined is therefore refused before
// lws gets there (see LWS_CALLBACK_HTTP); bodiless requests are fine.
//
// There is no public accessor for a connection's buffer, but
// lws_service_adjust_timeout() returns 0 while any connection has buffered
// input it can process (this one, when the request came from its buffer).
// Only a connection that already completed a request can have one, and when
// another connection is the cause the guess is still "pipelined": the cost
// of a wrong guess is one refused (retryable) request; the other way round
// it is a stalled broker.
bool request_is_pipelined(lws* wsi) {
  ControlState* state = state_of(wsi);
  // The first request on a connection never comes from that buffer.
  if (state == nullptr || state->kept_alive.count(wsi) == 0) return false;
  return lws_service_adjust_timeout(lws_get_context(wsi), 1, lws_get_tsi(wsi)) == 0;
}

// The answer to a pipelined request with a body: not processed, retry it on
// a new connection (RFC 9112 9.3.2: a client that pipelines must be ready to
// resend requests that were not answered).
HttpResponse pipelined_request_refused() {
  HttpResponse r = json_error(
      503, "pipelined_request",
      "a request with a body cannot follow another one in the same write on this connection; "
      "it was not processed: send it again on a new connection");
  r.headers.emplace_back("Retry-After", "0");
  return r;
}

// Writeable: a held POST whose wait ended, or the next piece of an SSE stream.
int write_pending(lws* wsi, Transaction* tx) {
  if (tx->hold) return tx->hold_done ? finish_hold(tx) : 0;
  if (!tx->sse) return 0;
  tx->write_requested = false;
  if (tx->out_pos >= tx->out.size() && !tx->queue.empty()) {
    tx->out = tx->queue.pop(kWriteChunk);
    tx->out_pos = 0;
  }
  if (tx->out_pos < tx->out.size()) {
    const std::size_t n = std::min(kWriteChunk, tx->out.size() - tx->out_pos);
    std::vector<unsigned char> buf(LWS_PRE + n);
    std::memcpy(buf.data() + LWS_PRE, tx->out.data() + tx->out_pos, n);
    const int written = lws_write(wsi, buf.data() + LWS_PRE, n, LWS_WRITE_HTTP);
    if (written < 0 || static_cast<std::size_t>(written) != n) return -1;
    tx->out_pos += n;
  }
  if (tx->out_pos >= tx->out.size()) {
    tx->out.clear();
    tx->out_pos = 0;
    if (tx->sse_closing) return -1;
  }
  if (!tx->queue.empty() || tx->out_pos < tx->out.size()) {
    tx->write_requested = true;
    lws_callback_on_writable(wsi);
  }
  return 0;
}

int callback_control(lws* wsi, lws_callback_reasons reason, void* user, void* in,
                     std::size_t len) {
  auto* pss = static_cast<PerSession*>(user);
  switch (reason) {
    case LWS_CALLBACK_PROTOCOL_DESTROY: {
      lws_vhost* vh = lws_get_vhost(wsi);
      if (vh != nullptr) {
        auto* state = static_cast<ControlState*>(lws_vhost_user(vh));
        if (state != nullptr && live_states().erase(state) > 0) {
          lws_sul_cancel(&state->pump.sul);
          lws_sul_cancel(&state->flush.sul);
          delete state;
        }
      }
      return 0;
    }

    case LWS_CALLBACK_HTTP: {
      if (pss == nullptr) return -1;
      destroy_transaction(pss);
      ControlState* state = state_of(wsi);
      if (state == nullptr) return -1;
      auto* tx = new (std::nothrow) Transaction();
      if (tx == nullptr) return -1;
      pss->tx = tx;
      tx->state = state;
      tx->wsi = wsi;
      tx->request.method = request_method(wsi);
      tx->request.path.assign(static_cast<const char*>(in), len);
      tx->request.query = query_string(wsi);
      if (!state->options.token.empty()) {
        tx->request.authorization = header_value(wsi, WSI_TOKEN_HTTP_AUTHORIZATION);
      }
      const std::string length = header_value(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH);
      // Any method: lws reads (or discards) a body whenever there is a Content-Length.
      if (!length.empty() && std::atoll(length.c_str()) > 0 && request_is_pipelined(wsi)) {
        return answer_now_and_close(wsi, pipelined_request_refused());
      }
      if (!method_has_body(tx->request.method)) return respond(tx);
      if (length.empty()) {
        // lws 4.1 would wait for a 100 MB body here. HTTP/1.1 says no
        // Content-Length and no Transfer-Encoding means no body (curl -X POST),
        // so route it with an empty body and close; chunked bodies get 411.
        if (!header_value(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING).empty()) {
          return answer_now_and_close(
              wsi, json_error(411, "length_required",
                              "a request body needs a Content-Length header"));
        }
        if (state->shut_down || state->fleet == nullptr) {
          return answer_now_and_close(
              wsi, json_error(503, "shutting_down", "the broker is shutting down"));
        }
        return answer_now_and_close(wsi, route_request(state, tx->request));
      }
      const long long declared = std::atoll(length.c_str());
      if (declared > kHugeBody || declared < 0) {
        return answer_now_and_close(
            wsi, json_error(413, "payload_too_large",
                            "request body over " + std::to_string(kMaxControlBodyBytes) +
                                " bytes"));
      }
      // lws now delivers the body (HTTP_BODY ... HTTP_BODY_COMPLETION),
      // also for an explicit Content-Length: 0.
      return 0;
    }

    case LWS_CALLBACK_HTTP_BODY: {
      if (pss == nullptr || pss->tx == nullptr) return -1;
      Transaction* tx = pss->tx;
      if (tx->request.body.size() + len > kMaxControlBodyBytes) {
        tx->body_too_large = true;  // keep reading (and dropping) so the answer is a clean 413
        tx->request.body.clear();
      } else if (!tx->body_too_large && len > 0) {
        tx->request.body.append(static_cast<const char*>(in), len);
      }
      return 0;
    }

    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
      if (pss == nullptr || pss->tx == nullptr) return -1;
      return respond(pss->tx);

    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
      // A WebSocket upgrade that did not ask for "fleetlink-stream" lands on this
      // (HTTP) protocol: there is nothing here to talk to.
      return 1;

    case LWS_CALLBACK_HTTP_WRITEABLE:
      if (pss == nullptr || pss->tx == nullptr || !pss->tx->responding) return 0;
      return write_pending(wsi, pss->tx);

    case LWS_CALLBACK_TIMER:
      if (pss != nullptr && pss->tx != nullptr && pss->tx->hold) {
        pss->tx->hold_done = true;  // timed out: answer with the state reached so far
        lws_callback_on_writable(wsi);
        return 0;
      }
      // SSE heartbeat: a comment line keeps idle proxies and clients honest.
      if (pss != nullptr && pss->tx != nullptr && pss->tx->sse) {
        pss->tx->queue.push(kSseHeartbeat);
        pss->tx->write_requested = true;
        lws_callback_on_writable(wsi);
        lws_set_timer_usecs(wsi, kSseHeartbeatUs);
      }
      return 0;

    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
      destroy_transaction(pss);
      return 0;

    case LWS_CALLBACK_CLOSED_HTTP:
    case LWS_CALLBACK_WSI_DESTROY:
      // (The state may already be gone while the context is destroyed.)
      if (ControlState* state = state_of(wsi); state != nullptr && live_states().count(state) > 0) {
        state->kept_alive.erase(wsi);
      }
      destroy_transaction(pss);
      return 0;

    default:
      break;
  }
  return lws_callback_http_dummy(wsi, reason, user, in, len);
}

// ---- the control stream (GET /v1/stream, subprotocol "fleetlink-stream") ----

constexpr std::size_t kMaxStreamFrame = 1024 * 1024;  // a request frame; more: 1009

void on_stream_line(StreamSession* s, std::string_view line) {
  ControlState* state = s->state;
  stream::Request request = stream::parse_line(line);
  if (auto* e = std::get_if<stream::LineError>(&request)) {
    queue_line(s, stream::error_line(*e));
    return;
  }
  auto& send = std::get<stream::SendRequest>(request);
  if (state->shut_down || state->fleet == nullptr) {
    queue_line(s, stream::error_line({send.ref, "shutting_down", "the broker is shutting down"}));
    return;
  }
  EnqueueOutcome outcome = state->fleet->enqueue(send.rig_id, std::move(send.kind), std::move(send.args));
  if (const auto* ok = std::get_if<EnqueueOk>(&outcome)) {
    queue_line(s, stream::queued_line(send.ref, *ok));
    s->watched[ok->cmd_id] = StreamSession::Watched{std::move(send.ref), send.until_done};
  } else {
    queue_line(s, stream::refused_line(send.ref, std::get<EnqueueFailure>(outcome)));
  }
}

// The Fleet's events about this stream's commands, as answer lines.
void on_stream_event(StreamSession* s, const FleetEvent& event) {
  if (s->closing || event.cmd_id.empty()) return;
  const std::string_view op = stream::op_for_event(event.type);
  if (op.empty()) return;
  const auto it = s->watched.find(event.cmd_id);
  if (it == s->watched.end()) return;
  queue_line(s, stream::event_line(op, it->second.ref, event.cmd_id, event.detail));
  if (op != "acked" || !it->second.until_done) s->watched.erase(it);
}

void destroy_session(StreamPerSession* pss) {
  if (pss == nullptr || pss->session == nullptr) return;
  StreamSession* s = pss->session;
  pss->session = nullptr;
  ControlState* state = s->state;
  // (The state may already be gone while the context is destroyed.)
  if (state != nullptr && live_states().count(state) > 0) {
    if (s->subscribed && !state->shut_down && state->fleet != nullptr) state->fleet->events().unsubscribe(s->subscription);
    state->sessions.erase(s);
    if (s->flush_pending) std::erase(state->flush.sessions, s);
  }
  delete s;
}

int callback_stream(lws* wsi, lws_callback_reasons reason, void* user, void* in, std::size_t len) {
  auto* pss = static_cast<StreamPerSession*>(user);
  StreamSession* s = pss != nullptr ? pss->session : nullptr;
  switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: {
      // The upgrade request's headers are still here: the same bearer token as the API.
      ControlState* state = state_of(wsi);
      if (state == nullptr || state->shut_down || state->fleet == nullptr) return 1;
      if (!state->options.token.empty() &&
          !bearer_token_matches(header_value(wsi, WSI_TOKEN_HTTP_AUTHORIZATION), state->options.token)) {
        return 1;
      }
      return 0;
    }
    case LWS_CALLBACK_ESTABLISHED: {
      ControlState* state = state_of(wsi);
      if (pss == nullptr || state == nullptr || state->shut_down || state->fleet == nullptr) return -1;
      s = new (std::nothrow) StreamSession();
      if (s == nullptr) return -1;
      s->state = state;
      s->wsi = wsi;
      pss->session = s;
      state->sessions.insert(s);
      const EventTypes answers{EventType::command_acked, EventType::command_done, EventType::command_nacked,
                               EventType::command_lost};
      s->subscription = state->fleet->events().subscribe(answers, [s](const FleetEvent& event) { on_stream_event(s, event); });
      s->subscribed = true;
      return 0;
    }
    case LWS_CALLBACK_RECEIVE: {
      if (s == nullptr) return -1;
      if (s->closing) return 0;
      if (lws_frame_is_binary(wsi)) {
        close_session(s, LWS_CLOSE_STATUS_UNACCEPTABLE_OPCODE, "text frames of JSON lines only");
        return 0;
      }
      if (s->rx.size() + len > kMaxStreamFrame) {
        close_session(s, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, "frame over 1 MiB");
        return 0;
      }
      s->rx.append(static_cast<const char*>(in), len);
      if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi) > 0) return 0;
      std::string frame;
      frame.swap(s->rx);
      std::string_view rest(frame);
      while (!rest.empty() && !s->closing) {
        const std::size_t nl = rest.find('\n');
        std::string_view line = rest.substr(0, nl);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (!line.empty()) on_stream_line(s, line);
        rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      }
      return 0;
    }
    case LWS_CALLBACK_SERVER_WRITEABLE:
      if (s == nullptr) return -1;
      s->write_requested = false;
      write_session(s);
      return 0;
    case LWS_CALLBACK_CLOSED:
    case LWS_CALLBACK_WSI_DESTROY:
      destroy_session(pss);
      return 0;
    default:
      break;
  }
  return 0;
}

const lws_protocols kProtocols[] = {
    {"fleetlink-control", callback_control, sizeof(PerSession), 0, 0, nullptr, 0},
    // The control stream: chosen by the upgrade's Sec-WebSocket-Protocol.
    {"fleetlink-stream", callback_stream, sizeof(StreamPerSession), 16 * 1024, 0, nullptr, 0},
    {nullptr, nullptr, 0, 0, 0, nullptr, 0},
};

}  // namespace

fleetlink::Expected<lws_vhost*> create_control_vhost(lws_context* context,
                                                     const ControlApiOptions& options,
                                                     Fleet& fleet, BrokerMetrics& metrics) {
  if (context == nullptr) return make_error(Errc::invalid_argument, "no lws context");
  if (options.port < 0 || options.port > 65535) {
    return make_error(Errc::invalid_argument,
                      "control port out of range: " + std::to_string(options.port));
  }
  auto* state = new (std::nothrow) ControlState();
  if (state == nullptr) return make_error(Errc::io, "out of memory");
  state->options = options;
  state->options.batches = &state->batches;
  state->fleet = &fleet;
  state->metrics = &metrics;
  state->context = context;
  state->pump.state = state;
  state->flush.state = state;
  live_states().insert(state);

  lws_context_creation_info info;
  std::memset(&info, 0, sizeof info);
  info.vhost_name = "fleetlink-control";
  info.port = options.port;  // 0: lws picks one (lws_get_vhost_listen_port)
  info.iface = state->options.host.empty() ? nullptr : state->options.host.c_str();
  info.protocols = kProtocols;
  info.user = state;
  info.keepalive_timeout = kKeepAliveIdleSecs;
  info.timeout_secs = 10;

  lws_vhost* vhost = lws_create_vhost(context, &info);
  if (vhost == nullptr) {
    if (live_states().erase(state) > 0) delete state;
    return make_error(Errc::io, "cannot listen for the control API on " + options.host + ":" +
                                    std::to_string(options.port));
  }
  return vhost;
}

void shutdown_control_api(lws_vhost* vhost) {
  if (vhost == nullptr) return;
  auto* state = static_cast<ControlState*>(lws_vhost_user(vhost));
  if (state == nullptr || live_states().count(state) == 0 || state->shut_down) return;
  // Unsubscribe first, while the Fleet is certainly alive; then ask each
  // stream's socket to close from its own writeable callback.
  for (Transaction* tx : state->streams) {
    if (tx->subscribed) state->fleet->events().unsubscribe(tx->subscription);
    tx->subscribed = false;
    if (tx->sse) tx->sse_closing = true;
    if (tx->hold) tx->hold_done = true;  // answered with what is known now
    lws_callback_on_writable(tx->wsi);
  }
  for (StreamSession* s : state->sessions) {
    if (s->subscribed) state->fleet->events().unsubscribe(s->subscription);
    s->subscribed = false;
    close_session(s, LWS_CLOSE_STATUS_GOINGAWAY, "broker shutting down");
  }
  if (state->batch_subscribed) state->fleet->events().unsubscribe(state->batch_subscription);
  state->batch_subscribed = false;
  lws_sul_cancel(&state->pump.sul);
  state->pump.scheduled = false;
  lws_sul_cancel(&state->flush.sul);
  state->flush.scheduled = false;
  state->flush.streams.clear();
  for (StreamSession* s : state->flush.sessions) s->flush_pending = false;
  state->flush.sessions.clear();
  for (Transaction* tx : state->streams) tx->flush_pending = false;
  state->shut_down = true;
  state->fleet = nullptr;
}

}  // namespace fleetlink::broker
