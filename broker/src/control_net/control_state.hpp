#pragma once
// What the control vhost's transports share (internal to control_net/): the
// per-vhost state, each kind of connection's state, and the few calls one
// transport makes into another's file.
//
//   control_vhost.cpp  the vhost, its state, the protocol table, the job pump and
//                      tick, the end-of-turn flush
//   control_http.cpp   HTTP transactions, held POSTs   (protocol "fleetlink-control")
//   control_sse.cpp    GET /v1/events on a transaction
//   control_ws.cpp     the /v1/stream WebSocket         (protocol "fleetlink-stream")
//
// Everything runs on the loop thread.
#include <libwebsockets.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "control/jobs.hpp"
#include "control/http_message.hpp"
#include "control/options.hpp"
#include "control/sse_format.hpp"
#include "fleet/fleet.hpp"
#include "fleet/string_hash.hpp"
#include "observe/metrics.hpp"

namespace fleetlink::broker {
class ControlListener;
}

namespace fleetlink::broker::control_net {

// Bytes per write of an event stream or a control stream. One turn of the loop
// can read ~1000 rigs' ACKs and RESULTs (two events each, ~200 B): a stream must
// drain faster than that or a busy fan-out overflows its queue.
inline constexpr std::size_t kWriteChunk = 1024 * 1024;

struct ControlState;
struct StreamSession;

// GET /v1/events on a transaction (control_sse.cpp).
struct EventStream {
  std::string out;               // headers and events taken from the queue, not yet written
  std::size_t out_pos = 0;
  bool closing = false;          // hang up once `out` is written
  std::uint64_t next_event_id = 1;
  SseQueue queue;
  bool write_requested = false;  // a writeable callback is on its way
  bool flush_pending = false;    // listed in the end-of-turn flush
};

// A POST held until its command is acked/done (?wait=), or the timeout.
struct HeldPost {
  HeldCommand command;
  HttpResponse fallback;  // the answer if the Fleet is gone by then
  bool done = false;      // the wait is over: answer from the writeable callback
};

// An answer that promises a store batch: it leaves once the batch is durable.
struct RecordWait {
  HttpResponse answer;                    // its after_record already taken
  std::optional<Expected<void>> outcome;  // set: the wait is over (answer from the writeable callback)
  bool parked = false;                    // waiting past the request's own callback
};

// An answer that comes later (HttpResponse::deferred: another broker's).
struct DeferredWait {
  std::optional<HttpResponse> answer;  // set: it came (sent from the writeable callback)
  bool parked = false;
};

// One HTTP transaction: a request and its answer, a held POST, or an event stream.
// An answer whose body is a file (HttpResponse::file_path), written a piece per
// writeable callback.
struct FileBody {
  int fd = -1;
  std::uint64_t remaining = 0;
  std::vector<unsigned char> buf;  // lws's headroom, then one piece
  FileBody() = default;
  FileBody(const FileBody&) = delete;
  FileBody& operator=(const FileBody&) = delete;
  ~FileBody();
};

struct Transaction {
  ControlState* state = nullptr;
  lws* wsi = nullptr;
  HttpRequest request;
  bool body_too_large = false;
  bool responding = false;
  bool close_after = false;  // hang up once written (413 and friends)
  std::optional<RecordWait> record_wait;
  std::optional<DeferredWait> deferred_wait;
  std::optional<HeldPost> hold;
  std::optional<EventStream> sse;
  std::unique_ptr<FileBody> file;
  // A mutating call's audit context, kept until its answer leaves (control/audit.hpp).
  std::shared_ptr<const AuditContext> audit;
  // Expires with the transaction: what a Fleet callback that may outlive it checks.
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  // The Fleet subscription of a held POST or an event stream (listed in state->streams).
  std::uint64_t subscription = 0;
  bool subscribed = false;
};

// lws zero-allocates this per HTTP connection; it only holds our pointer.
struct PerSession {
  Transaction* tx;
};

// One WebSocket control stream (control/stream_protocol.hpp): the commands it
// sent and is still reporting on, and the answer lines not written yet.
struct StreamSession {
  ControlState* state = nullptr;
  lws* wsi = nullptr;
  std::string rx;   // a frame arriving in pieces
  std::string out;  // answer lines waiting for the end of the turn
  std::size_t out_pos = 0;
  // This turn's requests, answered once the store has the batch of every
  // command the turn created (one batch for all the frames of all streams).
  struct Pending {
    std::string ref;
    bool until_done = true;
    bool with_output = false;
    std::optional<EnqueueOutcome> outcome;  // unset: `line` is the answer (an error)
    std::string line;
    bool waits_for_record = false;          // named by idempotency_key: not sent before its record
  };
  std::vector<Pending> pending;
  struct Watched {
    std::string ref;
    bool until_done = true;
    bool with_output = false;
  };
  std::unordered_map<std::string, Watched, TransparentStringHash, std::equal_to<>> watched;  // by cmd_id
  std::uint64_t subscription = 0;
  bool subscribed = false;
  bool hears_output = false;  // its subscription takes command_output too (a "notify":"output" came)
  bool flush_pending = false;
  bool write_requested = false;
  bool closing = false;  // a close is under way: nothing more is read or written
  // Expires with the session: what a Fleet callback that may outlive it checks.
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  // Who opened it (the upgrade's token) and from where: its commands and audit lines say so.
  Caller caller;
  std::string peer;
};

// lws zero-allocates this per WebSocket connection: our pointer, and who the
// upgrade's token named (read while its headers are there; names are at most
// kMaxOperatorName bytes, app/operators.hpp).
struct StreamPerSession {
  StreamSession* session;
  bool checked;   // the upgrade's token was looked at
  bool authenticated;
  Role role;
  char name[72];
};

// Runs the fan-out jobs from the loop (never from inside a Fleet event sink,
// which must not enqueue) when their commands finish. The sul first, so the
// timer callback finds its state.
struct JobPump {
  lws_sorted_usec_list_t sul;  // must stay first
  ControlState* state = nullptr;
  bool scheduled = false;
};

// Every second while a job runs: deadlines, the records due (JobTable::tick).
struct JobTick {
  lws_sorted_usec_list_t sul;  // must stay first
  ControlState* state = nullptr;
  bool scheduled = false;
};

// Writes the streams once per turn of the loop: every event of the turn (up to a
// thousand ACKs read in one go) in one write per stream, right after the turn's
// I/O, without arming POLLOUT. A zero-delay timer, which libuv fires before it
// waits for I/O again. The sul first, like JobPump.
struct TurnFlush {
  lws_sorted_usec_list_t sul;  // must stay first
  ControlState* state = nullptr;
  bool scheduled = false;
  std::vector<Transaction*> streams;     // event streams with events queued since the last flush
  std::vector<StreamSession*> sessions;  // control streams likewise
};

// Looks at the connections of the event streams ten times a second for
// clients that went away (hangup_watch.cpp).
struct HangupWatch {
  lws_sorted_usec_list_t sul;  // must stay first
  ControlState* state = nullptr;
  bool scheduled = false;
};

// One per control vhost, reached through the vhost's per-protocol private data
// (control_vhost.cpp).
struct ControlState {
  ControlApiOptions options;  // options.host's buffer is the vhost's iface string
  Fleet* fleet = nullptr;
  BrokerMetrics* metrics = nullptr;
  lws_context* context = nullptr;
  bool shut_down = false;
  std::set<Transaction*> streams;     // transactions subscribed to the Fleet (SSE, held POSTs)
  std::set<StreamSession*> sessions;  // open control streams
  // Connections that already completed a keep-alive transaction: only their
  // later requests can be pipelined ones (control_http.cpp).
  std::unordered_set<lws*> kept_alive;
  // The control port's listener (control_listener.hpp): told of requests and of
  // connections gone, for its bound and idle timeout. Null: lws listens itself.
  ControlListener* listener = nullptr;
  // Fan-out jobs. The Fleet is listened to only while one runs (events cost
  // the data plane something only when somebody listens).
  JobTable jobs;
  JobPump pump;
  JobTick tick;
  TurnFlush flush;
  HangupWatch hangup_watch;
  std::vector<std::string> finished_cmds;  // from the sink, for the pump
  std::uint64_t job_subscription = 0;
  bool job_subscribed = false;

  // The Fleet may still be used (shutdown_control_api() not called yet).
  bool serving() const noexcept { return !shut_down && fleet != nullptr; }
};

// ---- control_vhost.cpp ----
ControlState* state_of(lws* wsi);
// LWS_CALLBACK_PROTOCOL_DESTROY of the first protocol: the vhost is going.
void destroy_control_state(lws* wsi);
// Routes a request (where a job starts, so a place to start listening).
HttpResponse route_request(ControlState* state, const HttpRequest& request);
// Writes the stream at the end of this turn of the loop / forgets it was due.
void flush_at_end_of_turn(Transaction* tx);
void flush_at_end_of_turn(StreamSession* s);
void cancel_end_of_turn_flush(Transaction* tx);
void cancel_end_of_turn_flush(StreamSession* s);

// ---- hangup_watch.cpp ----
// lws 4.1.6 does not read a connection whose HTTP transaction is still open
// after a bodiless request (LRS_DOING_TRANSACTION: an event stream) yet keeps
// it in the poll set, level-triggered: a client that hangs up, or sends
// anything, turns the event loop into a busy loop until the answer ends (for an
// event stream: until a heartbeat's write fails, 15 s or more). lws 4.1.6
// cannot pause the reading of such a connection either (a flow-controlled HTTP
// connection is never given its POLLOUT). So the event streams are looked at
// ten times a second and one whose client became readable (its FIN, a reset, a
// TLS close_notify, or any byte: an event stream's client has nothing more to
// say) is closed: the loop spins for at most that tenth of a second. Bytes a
// client sent in the same read as its request are in lws's buffer, not the
// socket's, and are not seen; lws keeps them there without spinning, and the
// stream goes on (test_control_api checks both).
// An event stream started: the watch runs while there is one.
void watch_for_hangups(ControlState* state);
void cancel_hangup_watch(ControlState* state);

// ---- control_http.cpp ----
int callback_control(lws* wsi, lws_callback_reasons reason, void* user, void* in, std::size_t len);
std::string header_value(lws* wsi, lws_token_indexes token);
// Whether a control connection has something in progress (a request being
// answered, held or streamed, or a /v1/stream WebSocket): not idle.
bool connection_busy(lws* wsi);
// Status line and headers into `out`; `content_length` is ignored for an event stream.
bool render_headers(lws* wsi, const HttpResponse& r, std::size_t content_length, bool event_stream,
                    std::string& out);
// Shutdown, while the Fleet is still there: unsubscribe; a held POST is answered
// with what is known now, an event stream hangs up once its queue is written.
void end_transaction_for_shutdown(Transaction* tx);

// ---- control_sse.cpp ----
// Turns the transaction into an event stream: headers now, events as they come.
int start_event_stream(Transaction* tx, const HttpResponse& r);
// The event stream's writeable callback.
int write_event_stream(Transaction* tx);
// Writes what the stream has queued now (the end-of-turn flush).
void flush_event_stream(Transaction* tx);
// The stream's timer: a comment line keeps idle proxies and clients honest.
void event_stream_heartbeat(Transaction* tx);

// ---- control_ws.cpp ----
int callback_stream(lws* wsi, lws_callback_reasons reason, void* user, void* in, std::size_t len);
// Writes the session's pending lines (the end-of-turn flush).
void write_session(StreamSession* s);
// The session's pending requests are answered once `batch` (this turn's
// persist()) is durable: at once for a store without a thread of its own.
void await_answers(StreamSession* s, std::uint64_t batch);
// Shutdown, while the Fleet is still there: unsubscribe and close with 1001.
void end_session_for_shutdown(StreamSession* s);

}  // namespace fleetlink::broker::control_net
