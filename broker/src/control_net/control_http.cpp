// HTTP transactions of the control API (the vhost's first protocol). A request
// is assembled from lws (method, path, query, token, body), routed by the pure
// handle_control_request(), and answered from the callback that completed it.
// HTTP/1.1 keep-alive is kept: each answer has a Content-Length and ends with
// lws_http_transaction_completed(). A held POST (?wait=acked|done) waits on a
// Fleet subscription and is answered from the writeable callback; an event
// stream is handed to control_sse.cpp.
#include <fcntl.h>
#include <libwebsockets.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <cstdlib>
#include <functional>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "control/audit.hpp"
#include "control/control_json.hpp"
#include "control/handler_support.hpp"
#include "control/http_util.hpp"
#include "control/routes.hpp"
#include "control_net/control_listener.hpp"
#include "control_net/control_state.hpp"
#include "net/lws_io.hpp"

namespace fleetlink::broker::control_net {
namespace {

constexpr std::size_t kHeaderSpace = 2048;              // status line + headers
constexpr std::int64_t kHugeBody = 16LL * 1024 * 1024;  // hang up instead of reading it

// The audit line of a mutating call, as its answer leaves.
void audit_answer(ControlState* state, const AuditContext* audit, const HttpResponse& r) {
  if (audit == nullptr || state == nullptr || state->options.audit == nullptr) return;
  const std::string status = std::to_string(r.status);
  const std::string result = audit_result_of_body(r.body);
  AuditEntry e;
  e.at_ms = unix_now_ms();
  e.caller = &audit->caller;
  e.peer = audit->peer;
  e.request = audit->request;
  e.target = audit->target;
  e.status = status;
  e.result = result;
  state->options.audit->write(e);
}

// The client's address, for the audit log.
std::string peer_address(lws* wsi) {
  char buf[64] = {};
  const char* p = lws_get_peer_simple(wsi, buf, sizeof buf);
  return p != nullptr ? audit_peer(p) : std::string();
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

// Headers and body in one write behind lws's headroom, the body copied once
// (a job's answer can be megabytes).
net::WriteStatus write_answer(lws* wsi, std::string_view head, std::string_view body) {
  net::TxBuffer tx;  // a new one holds just the headroom
  std::vector<std::uint8_t>& b = tx.bytes();
  b.reserve(LWS_PRE + head.size() + body.size());
  b.insert(b.end(), head.begin(), head.end());
  b.insert(b.end(), body.begin(), body.end());
  return net::write_prepared(wsi, tx, LWS_WRITE_HTTP_FINAL);
}

// Ends the transaction's Fleet subscription (held POST or event stream).
void stop_listening(Transaction* tx) {
  ControlState* state = tx->state;
  if (tx->subscribed && state->serving()) state->fleet->events().unsubscribe(tx->subscription);
  tx->subscribed = false;
  state->streams.erase(tx);
  cancel_end_of_turn_flush(tx);
}

void destroy_transaction(PerSession* pss) {
  if (pss == nullptr || pss->tx == nullptr) return;
  Transaction* tx = pss->tx;
  pss->tx = nullptr;
  stop_listening(tx);
  delete tx;
}

void run_after_sent(ControlState* state, const std::function<void(Fleet&)>& action) {
  if (action && state != nullptr && state->serving()) action(*state->fleet);
}

int send_and_complete(Transaction* tx, HttpResponse r);
int start_file_body(Transaction* tx, HttpResponse r);
int finish_hold(Transaction* tx);
int await_record(Transaction* tx, HttpResponse r);

// An answer as the route gave it: now, after its record, held, or later.
int answer_with(Transaction* tx, HttpResponse r);

// Waits for an answer another broker gives (HttpResponse::deferred).
int await_deferred(Transaction* tx, HttpResponse r) {
  auto produce = std::move(r.deferred);
  r.deferred = nullptr;
  tx->deferred_wait.emplace(DeferredWait{std::nullopt, false});
  produce(*tx->state->fleet, [tx, alive = std::weak_ptr<bool>(tx->alive)](HttpResponse answer) {
    if (alive.expired() || !tx->deferred_wait || tx->deferred_wait->answer) return;
    tx->deferred_wait->answer = std::move(answer);
    if (tx->deferred_wait->parked) lws_callback_on_writable(tx->wsi);
  });
  if (tx->deferred_wait->answer) {  // known at once
    HttpResponse a = std::move(*tx->deferred_wait->answer);
    tx->deferred_wait.reset();
    return answer_with(tx, std::move(a));
  }
  tx->deferred_wait->parked = true;
  lws_set_timeout(tx->wsi, NO_PENDING_TIMEOUT, 0);
  return 0;
}

int answer_deferred(Transaction* tx) {
  HttpResponse a = std::move(*tx->deferred_wait->answer);
  tx->deferred_wait.reset();
  return answer_with(tx, std::move(a));
}

// Holds a POST until its command is acked/done (or the timeout): one Fleet
// subscription for the wait, the answer rendered when it ends.
int start_hold(Transaction* tx, HttpResponse r) {
  HeldCommand command = std::move(*r.hold);
  r.hold.reset();
  tx->hold.emplace(HeldPost{std::move(command), std::move(r), false});
  ControlState* state = tx->state;
  tx->subscription =
      state->fleet->events().subscribe_command(tx->hold->command.cmd_id, [tx](const FleetEvent& event) {
        // Inside the Fleet: only note it; the answer is built in the writeable callback.
        if (tx->hold && !tx->hold->done && event.cmd_id == tx->hold->command.cmd_id)
          note_held_event(tx->hold->command, event);
        if (tx->hold && !tx->hold->done && held_command_reached(tx->hold->command, event)) {
          tx->hold->done = true;
          lws_callback_on_writable(tx->wsi);
        }
      });
  tx->subscribed = true;
  state->streams.insert(tx);
  // It may have got that far already (while its record was being written).
  if (held_command_settled(tx->hold->command, *state->fleet)) return finish_hold(tx);
  // The wait may be longer than lws's own transaction timeouts.
  lws_set_timeout(tx->wsi, NO_PENDING_TIMEOUT, 0);
  lws_set_timer_usecs(tx->wsi, static_cast<lws_usec_t>(tx->hold->command.timeout_ms) * 1000);
  return 0;
}

// The store's batch is durable (or not): the answer, a held POST's wait, or the
// store_unavailable answer.
int answer_recorded(Transaction* tx) {
  const bool kept = tx->record_wait->outcome->has_value();
  const Error error = kept ? Error{} : tx->record_wait->outcome->error();
  HttpResponse r = std::move(tx->record_wait->answer);
  tx->record_wait.reset();
  if (!kept)
    return send_and_complete(tx, r.if_unrecorded ? r.if_unrecorded(error) : json_error(503, "store_unavailable", error.detail));
  if (r.hold) return start_hold(tx, std::move(r));
  return send_and_complete(tx, std::move(r));
}

// Waits for the store's batch behind an answer (HttpResponse::after_record).
int await_record(Transaction* tx, HttpResponse r) {
  const std::uint64_t batch = r.after_record;
  r.after_record = 0;
  tx->record_wait.emplace(RecordWait{std::move(r), std::nullopt, false});
  tx->state->fleet->when_recorded(batch, [tx, alive = std::weak_ptr<bool>(tx->alive)](const Expected<void>& kept) {
    if (alive.expired() || !tx->record_wait) return;
    tx->record_wait->outcome = kept;
    // Later, from the store's progress: answer from the writeable callback.
    if (tx->record_wait->parked) lws_callback_on_writable(tx->wsi);
  });
  if (tx->record_wait->outcome) return answer_recorded(tx);  // a store without a thread: known at once
  tx->record_wait->parked = true;
  lws_set_timeout(tx->wsi, NO_PENDING_TIMEOUT, 0);
  return 0;
}

// Writes the whole answer and completes the transaction, from inside the
// callback that produced it. lws 4.1.6 needs this: while a transaction is left
// open after BODY_COMPLETION, a pipelined next request in the same read makes
// it call BODY_COMPLETION again and again. lws keeps whatever the socket does
// not take at once and defers the completion until it is flushed. Frees `tx`.
int send_and_complete(Transaction* tx, HttpResponse r) {
  lws* wsi = tx->wsi;
  ControlState* state = tx->state;
  audit_answer(state, r.audit ? r.audit.get() : tx->audit.get(), r);
  tx->audit.reset();
  if (!r.file_path.empty()) return start_file_body(tx, std::move(r));
  std::string head;
  if (!render_headers(wsi, r, r.body.size(), false, head)) return -1;
  if (write_answer(wsi, head, r.body) != net::WriteStatus::written) return -1;
  if (tx->close_after) {
    run_after_sent(state, r.after_sent);
    return -1;
  }
  // Keep-alive: ready for the next request. This rebinds the protocol, which
  // frees `tx` (HTTP_DROP_PROTOCOL): it must not be touched after.
  const int rc = lws_http_transaction_completed(wsi) ? -1 : 0;
  if (rc == 0) state->kept_alive.insert(wsi);
  run_after_sent(state, r.after_sent);
  return rc;
}

// An artifact's bytes: the headers now, then the file a piece per writeable
// callback, so a large file never sits in memory or in lws's buffers.
constexpr std::size_t kFilePiece = 64 * 1024;

int start_file_body(Transaction* tx, HttpResponse r) {
  lws* wsi = tx->wsi;
  const int fd = ::open(r.file_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const std::string why = std::strerror(errno);
    r = json_error(500, "io", "cannot read the artifact: " + why);
    std::string head;
    if (!render_headers(wsi, r, r.body.size(), false, head)) return -1;
    (void)write_answer(wsi, head, r.body);
    return -1;
  }
  tx->file = std::make_unique<FileBody>();
  tx->file->fd = fd;
  tx->file->remaining = r.file_size;
  tx->file->buf.resize(LWS_PRE + kFilePiece);
  std::string head;
  if (!render_headers(wsi, r, r.file_size, false, head)) return -1;
  if (net::write_with_pre(wsi, head, LWS_WRITE_HTTP_HEADERS) != net::WriteStatus::written) return -1;
  lws_callback_on_writable(wsi);
  return 0;
}

int write_file_piece(Transaction* tx) {
  lws* wsi = tx->wsi;
  if (lws_partial_buffered(wsi)) {
    lws_callback_on_writable(wsi);
    return 0;
  }
  FileBody& f = *tx->file;
  const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(f.remaining, kFilePiece));
  unsigned char* payload = f.buf.data() + LWS_PRE;
  std::size_t got = 0;
  while (got < want) {
    const ssize_t n = ::read(f.fd, payload + got, want - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;  // the file shrank under us: the client sees a short body
    got += static_cast<std::size_t>(n);
  }
  f.remaining -= got;
  const bool last = f.remaining == 0;
  if (lws_write(wsi, payload, got, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < static_cast<int>(got)) return -1;
  if (!last) {
    lws_callback_on_writable(wsi);
    return 0;
  }
  tx->file.reset();
  ControlState* state = tx->state;
  // Frees `tx` (HTTP_DROP_PROTOCOL), as in send_and_complete.
  const int rc = lws_http_transaction_completed(wsi) ? -1 : 0;
  if (rc == 0) state->kept_alive.insert(wsi);
  return rc;
}

// The wait of a held POST is over: answer with the command's state now.
int finish_hold(Transaction* tx) {
  lws_set_timer_usecs(tx->wsi, LWS_SET_TIMER_USEC_CANCEL);
  ControlState* state = tx->state;
  HttpResponse r = state->serving() ? held_command_answer(tx->hold->command, *state->fleet) : tx->hold->fallback;
  stop_listening(tx);
  tx->hold.reset();
  return send_and_complete(tx, std::move(r));
}

// Routes the complete request and answers it (or starts holding or streaming it).
int respond(Transaction* tx) {
  if (tx->responding) return 0;  // lws may repeat BODY_COMPLETION; answer once
  tx->responding = true;
  ControlState* state = tx->state;
  HttpResponse r;
  if (tx->body_too_large) {
    r = json_error(413, "payload_too_large",
                   "request body over " + std::to_string(kMaxControlBodyBytes) + " bytes");
    tx->close_after = true;
  } else if (!state->serving()) {
    r = json_error(503, "shutting_down", "the broker is shutting down");
  } else {
    r = route_request(state, tx->request);
  }
  return answer_with(tx, std::move(r));
}

int answer_with(Transaction* tx, HttpResponse r) {
  if (r.audit) tx->audit = r.audit;  // the answer that finally leaves says how the call ended
  if (r.event_stream) return start_event_stream(tx, r);
  if (r.deferred) return await_deferred(tx, std::move(r));
  if (r.after_record != 0) return await_record(tx, std::move(r));
  if (r.hold) return start_hold(tx, std::move(r));
  return send_and_complete(tx, std::move(r));
}

// Answers at once from LWS_CALLBACK_HTTP and hangs up (a body, if any, is
// not read). Only for small answers: one write, whatever is not taken now is lost.
int answer_now_and_close(lws* wsi, HttpResponse r) {
  if (r.event_stream) r = json_error(400, "bad_request", "an event stream needs GET");
  audit_answer(state_of(wsi), r.audit.get(), r);
  r.headers.emplace_back("Connection", "close");
  std::string head;
  if (!render_headers(wsi, r, r.body.size(), false, head)) return -1;
  (void)write_answer(wsi, head, r.body);
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

// LWS_CALLBACK_HTTP: the request line and headers are in.
int on_request(lws* wsi, PerSession* pss, std::string_view path) {
  if (pss == nullptr) return -1;
  destroy_transaction(pss);
  ControlState* state = state_of(wsi);
  if (state == nullptr) return -1;
  if (state->listener != nullptr) state->listener->request_started(wsi);
  auto* tx = new (std::nothrow) Transaction();
  if (tx == nullptr) return -1;
  pss->tx = tx;
  tx->state = state;
  tx->wsi = wsi;
  tx->request.method = request_method(wsi);
  tx->request.path.assign(path);
  tx->request.query = query_string(wsi);
  if (access_enabled(state->options.operators, state->options.token)) {
    tx->request.authorization = header_value(wsi, WSI_TOKEN_HTTP_AUTHORIZATION);
  }
  if (state->options.audit != nullptr && needs_operator(tx->request.method)) tx->request.peer = peer_address(wsi);
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
          wsi, json_error(411, "length_required", "a request body needs a Content-Length header"));
    }
    if (!state->serving()) {
      return answer_now_and_close(wsi, json_error(503, "shutting_down", "the broker is shutting down"));
    }
    return answer_now_and_close(wsi, route_request(state, tx->request));
  }
  const long long declared = std::atoll(length.c_str());
  if (declared > kHugeBody || declared < 0) {
    return answer_now_and_close(
        wsi, json_error(413, "payload_too_large",
                        "request body over " + std::to_string(kMaxControlBodyBytes) + " bytes"));
  }
  // lws now delivers the body (HTTP_BODY ... HTTP_BODY_COMPLETION),
  // also for an explicit Content-Length: 0.
  return 0;
}

// LWS_CALLBACK_HTTP_BODY: a piece of the body.
int on_body(PerSession* pss, const char* in, std::size_t len) {
  if (pss == nullptr || pss->tx == nullptr) return -1;
  Transaction* tx = pss->tx;
  if (tx->request.body.size() + len > kMaxControlBodyBytes) {
    tx->body_too_large = true;  // keep reading (and dropping) so the answer is a clean 413
    tx->request.body.clear();
  } else if (!tx->body_too_large && len > 0) {
    tx->request.body.append(in, len);
  }
  return 0;
}

// Writeable: a held POST whose wait ended, or the next piece of an event stream.
int on_writeable(Transaction* tx) {
  if (tx->file) return write_file_piece(tx);
  if (tx->deferred_wait) return tx->deferred_wait->answer ? answer_deferred(tx) : 0;
  if (tx->record_wait) return tx->record_wait->outcome ? answer_recorded(tx) : 0;
  if (tx->hold) return tx->hold->done ? finish_hold(tx) : 0;
  if (!tx->sse) return 0;
  return write_event_stream(tx);
}

// The transaction's timer: a held POST timed out, or an event stream's heartbeat.
int on_timer(lws* wsi, Transaction* tx) {
  if (tx->hold) {
    tx->hold->done = true;  // answer with the state reached so far
    lws_callback_on_writable(wsi);
    return 0;
  }
  if (tx->sse) event_stream_heartbeat(tx);
  return 0;
}

}  // namespace

FileBody::~FileBody() {
  if (fd >= 0) ::close(fd);
}

std::string header_value(lws* wsi, lws_token_indexes token) {
  const int len = lws_hdr_total_length(wsi, token);
  if (len <= 0) return {};
  std::string value(static_cast<std::size_t>(len) + 1, '\0');
  const int n = lws_hdr_copy(wsi, value.data(), len + 1, token);
  value.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return value;
}

bool connection_busy(lws* wsi) {
  const lws_protocols* protocol = lws_get_protocol(wsi);
  if (protocol != nullptr && protocol->callback != callback_control) return true;   // a /v1/stream WebSocket
  const auto* pss = static_cast<const PerSession*>(lws_wsi_user(wsi));
  return pss != nullptr && pss->tx != nullptr;
}

bool render_headers(lws* wsi, const HttpResponse& r, std::size_t content_length, bool event_stream,
                    std::string& out) {
  unsigned char buf[kHeaderSpace];
  unsigned char* p = buf;
  unsigned char* end = buf + sizeof buf - 1;
  const lws_filepos_t len = event_stream ? LWS_ILLEGAL_HTTP_CONTENT_LEN : content_length;
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

void end_transaction_for_shutdown(Transaction* tx) {
  if (tx->subscribed) tx->state->fleet->events().unsubscribe(tx->subscription);
  tx->subscribed = false;
  if (tx->sse) tx->sse->closing = true;
  if (tx->hold) tx->hold->done = true;  // answered with what is known now
  if (tx->record_wait && !tx->record_wait->outcome)
    tx->record_wait->outcome = Expected<void>{make_error(Errc::io, "the broker is shutting down")};
  if (tx->deferred_wait && !tx->deferred_wait->answer)
    tx->deferred_wait->answer = json_error(503, "shutting_down", "the broker is shutting down");
  lws_callback_on_writable(tx->wsi);
}

int callback_control(lws* wsi, lws_callback_reasons reason, void* user, void* in, std::size_t len) {
  auto* pss = static_cast<PerSession*>(user);
  switch (reason) {
    case LWS_CALLBACK_PROTOCOL_DESTROY:
      destroy_control_state(wsi);
      return 0;

    case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED:
      // A connection accepted: the listener's bound (control_listener.hpp).
      if (ControlState* state = state_of(wsi); state != nullptr && state->listener != nullptr)
        return state->listener->connection_opened(wsi) ? 0 : -1;
      return 0;

    case LWS_CALLBACK_HTTP:
      return on_request(wsi, pss, std::string_view(static_cast<const char*>(in), len));

    case LWS_CALLBACK_HTTP_BODY:
      return on_body(pss, static_cast<const char*>(in), len);

    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
      if (pss == nullptr || pss->tx == nullptr) return -1;
      return respond(pss->tx);

    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
      // A WebSocket upgrade that did not ask for "fleetlink-stream" lands on this
      // (HTTP) protocol: there is nothing here to talk to.
      return 1;

    case LWS_CALLBACK_HTTP_WRITEABLE:
      if (pss == nullptr || pss->tx == nullptr || !pss->tx->responding) return 0;
      return on_writeable(pss->tx);

    case LWS_CALLBACK_TIMER:
      if (pss == nullptr || pss->tx == nullptr) return 0;
      return on_timer(wsi, pss->tx);

    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
      destroy_transaction(pss);
      return 0;

    case LWS_CALLBACK_CLOSED_HTTP:
    case LWS_CALLBACK_WSI_DESTROY:
      // lws sends WSI_DESTROY to the first protocol for every connection of the
      // vhost, control streams included: theirs has a null session pointer by
      // then (LWS_CALLBACK_CLOSED came first), which reads as no transaction.
      if (ControlState* state = state_of(wsi); state != nullptr) {
        state->kept_alive.erase(wsi);
        if (reason == LWS_CALLBACK_WSI_DESTROY && state->listener != nullptr) state->listener->connection_gone(wsi);
      }
      destroy_transaction(pss);
      return 0;

    default:
      break;
  }
  return lws_callback_http_dummy(wsi, reason, user, in, len);
}

}  // namespace fleetlink::broker::control_net
