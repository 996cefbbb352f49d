// The control stream (GET /v1/stream, WebSocket subprotocol "fleetlink-stream";
// its lines are control/stream_protocol.hpp): many commands over one
// connection. A frame's request lines are enqueued as they are read; the
// answers of a whole turn of the loop leave in one text frame (the end-of-turn
// flush). One typed Fleet subscription per stream, filtered through the
// stream's `watched` map: a per-command subscription would cost as much per
// command (an insert and an erase either way) and would still need a list of
// them to unsubscribe when the stream closes.
#include <libwebsockets.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "control/audit.hpp"
#include "control/control_json.hpp"
#include "control/handler_support.hpp"
#include "control/http_util.hpp"
#include "control/stream_protocol.hpp"
#include "control_net/control_state.hpp"
#include "common/log.hpp"
#include "net/lws_io.hpp"

namespace fleetlink::broker::control_net {
namespace {

constexpr std::size_t kMaxStreamFrame = 1024 * 1024;  // a request frame; more: 1009
// What a control stream buffers for a client that does not read: past it, 1008.
constexpr std::size_t kMaxStreamBacklog = 16 * 1024 * 1024;

void close_session(StreamSession* s, lws_close_status code, std::string_view reason) {
  if (s->closing) return;
  s->closing = true;
  net::close_politely(s->wsi, static_cast<std::uint16_t>(code), reason);
}

void request_write(StreamSession* s) {
  s->write_requested = true;
  lws_callback_on_writable(s->wsi);
}

void queue_line(StreamSession* s, std::string line) {
  if (s->closing) return;
  if (s->out.size() - s->out_pos + line.size() > kMaxStreamBacklog) {
    close_session(s, LWS_CLOSE_STATUS_POLICY_VIOLATION, "client does not read its answers");
    return;
  }
  s->out += line;
  flush_at_end_of_turn(s);
}

void settle_answers(StreamSession* s, std::vector<StreamSession::Pending>& answers, const Expected<void>& kept);

void on_stream_event(StreamSession* s, const FleetEvent& event);

// The stream's subscription, with command_output once one of its requests asks
// for output (until then the broker builds no output event for it).
void subscribe(StreamSession* s, bool with_output) {
  EventBus& bus = s->state->fleet->events();
  if (s->subscribed) bus.unsubscribe(s->subscription);
  EventTypes answers{EventType::command_acked, EventType::command_done};
  if (with_output) answers.add(EventType::command_output);
  s->subscription = bus.subscribe(answers, [s](const FleetEvent& event) { on_stream_event(s, event); });
  s->subscribed = true;
  s->hears_output = with_output;
}

void hear_output(StreamSession* s) {
  if (!s->hears_output) subscribe(s, true);
}

// The audit line of one command the stream sent (control/audit.hpp).
void audit_send(StreamSession* s, std::string_view rig_id, std::string_view status, const std::string& result) {
  AuditLog* audit = s->state->options.audit;
  if (audit == nullptr) return;
  const std::string target = rig_id.empty() ? std::string("-") : "rig:" + std::string(rig_id);
  AuditEntry e;
  e.at_ms = unix_now_ms();
  e.caller = &s->caller;
  e.peer = s->peer;
  e.request = "stream send";
  e.target = target;
  e.status = status;
  e.result = result;
  audit->write(e);
}

void on_stream_line(StreamSession* s, std::string_view line, std::vector<StreamSession::Pending>& answers) {
  ControlState* state = s->state;
  stream::Request request = stream::parse_line(line);
  if (auto* e = std::get_if<stream::LineError>(&request)) {
    audit_send(s, {}, "refused", "error:" + e->error);
    answers.push_back({{}, true, false, std::nullopt, stream::error_line(*e)});
    return;
  }
  auto& send = std::get<stream::SendRequest>(request);
  if (!state->serving()) {
    audit_send(s, send.request.rig_id, "refused", "error:shutting_down");
    answers.push_back(
        {{}, true, false, std::nullopt, stream::error_line({send.ref, "shutting_down", "the broker is shutting down"})});
    return;
  }
  send.request.operator_name = s->caller.name;
  const bool waits_for_record = !send.request.idempotency_key.empty();
  if (send.with_output) hear_output(s);
  if (state->fleet->routes_elsewhere(send.request.rig_id) || state->fleet->names_a_stored_command(send.request)) {
    // Several brokers: answered when the broker holding the rig answers (this
    // line may come after later ones: clients match answers by ref).
    state->fleet->enqueue_routed(
        std::move(send.request), [s, alive = std::weak_ptr<bool>(s->alive), ref = std::move(send.ref),
                                  until_done = send.until_done, with_output = send.with_output,
                                  waits_for_record](Fleet::RoutedOutcome out) mutable {
          if (alive.expired()) return;
          std::vector<StreamSession::Pending> one;
          one.push_back({std::move(ref), until_done, with_output, std::move(out.outcome), {}, waits_for_record});
          settle_answers(s, one, out.unrecorded ? Expected<void>{*out.unrecorded} : Expected<void>{});
        });
    return;
  }
  answers.push_back(
      {std::move(send.ref), send.until_done, send.with_output, state->fleet->enqueue(std::move(send.request)), {},
       waits_for_record});
}

// A command whose record was being written while its rig acknowledged (or
// finished) it: those lines now, from its state; otherwise watched for them.
void report_or_watch(StreamSession* s, const std::string& cmd_id, std::string ref, bool until_done,
                     bool with_output, CommandState answered) {
  bool acked = false, final_state = false, duplicate = false;
  std::string state_name;
  const bool here = s->state->fleet->read_command(cmd_id, [&](const CommandView& c) {
    final_state = is_final(c.state);
    acked = c.acked_at_ms.has_value() || c.state == CommandState::acked || c.state == CommandState::running;
    duplicate = c.duplicate;
    state_name = to_string(c.state);
  });
  if (!here) {
    // Held by another broker: the state its answer gave (an ACK, or its end,
    // may have come before the answer did).
    final_state = is_final(answered);
    acked = answered != CommandState::queued && answered != CommandState::sent &&
            answered != CommandState::undeliverable && answered != CommandState::rejected;
    state_name = to_string(answered);
  }
  if (acked) queue_line(s, stream::event_line("acked", ref, cmd_id, duplicate ? "duplicate" : ""));
  if (final_state && (until_done || !acked)) queue_line(s, stream::event_line("done", ref, cmd_id, state_name));
  if (final_state || (acked && !until_done)) return;
  s->watched[cmd_id] = StreamSession::Watched{std::move(ref), until_done, with_output};
}

void settle_answers(StreamSession* s, std::vector<StreamSession::Pending>& answers, const Expected<void>& kept) {
  for (StreamSession::Pending& a : answers) {
    if (!a.outcome) {
      queue_line(s, std::move(a.line));
      continue;
    }
    if (const auto* ok = std::get_if<EnqueueOk>(&*a.outcome)) {
      if (!kept && !ok->existing) {
        EnqueueFailure f;
        f.error = EnqueueError::store_unavailable;
        f.rig_id = ok->rig_id;
        f.cmd_id = ok->cmd_id;
        f.detail = unrecorded_detail(kept.error(), !a.waits_for_record);
        audit_send(s, f.rig_id, "refused", std::string("error:") + to_string(f.error));
        queue_line(s, stream::refused_line(a.ref, f));
        continue;
      }
      audit_send(s, ok->rig_id, "queued", "cmd_id:" + ok->cmd_id);
      queue_line(s, stream::queued_line(a.ref, *ok));
      report_or_watch(s, ok->cmd_id, std::move(a.ref), a.until_done, a.with_output, ok->state);
    } else {
      const auto& f = std::get<EnqueueFailure>(*a.outcome);
      audit_send(s, f.rig_id, "refused", std::string("error:") + to_string(f.error));
      queue_line(s, stream::refused_line(a.ref, f));
    }
  }
}

// The Fleet's events about this stream's commands, as answer lines.
void on_stream_event(StreamSession* s, const FleetEvent& event) {
  if (s->closing || event.cmd_id.empty()) return;
  const std::string_view op = stream::op_for_event(event.type);
  if (op.empty()) return;
  const auto it = s->watched.find(event.cmd_id);
  if (it == s->watched.end()) return;
  if (event.type == EventType::command_output) {
    if (it->second.with_output) queue_line(s, stream::output_line(it->second.ref, event.cmd_id, event.offset, event.detail));
    return;
  }
  queue_line(s, stream::event_line(op, it->second.ref, event.cmd_id, event.detail));
  if (op != "acked" || !it->second.until_done) s->watched.erase(it);
}

// A frame's lines ('\n'-separated, a '\r' before it dropped), in order, until
// one of them closes the stream. Answered at the end of the turn (settle_answers),
// when the fleet has recorded every command of the turn.
void on_frame(StreamSession* s, std::string_view frame) {
  while (!frame.empty() && !s->closing) {
    const std::size_t nl = frame.find('\n');
    std::string_view line = frame.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) on_stream_line(s, line, s->pending);
    frame = nl == std::string_view::npos ? std::string_view() : frame.substr(nl + 1);
  }
  if (!s->pending.empty()) flush_at_end_of_turn(s);
}

}  // namespace

void await_answers(StreamSession* s, std::uint64_t batch) {
  auto answers = std::make_shared<std::vector<StreamSession::Pending>>();
  answers->swap(s->pending);
  s->state->fleet->when_recorded(batch, [s, alive = std::weak_ptr<bool>(s->alive), answers](const Expected<void>& kept) {
    if (!alive.expired()) settle_answers(s, *answers, kept);
  });
}

namespace {

// The upgrade's token: who opens the stream. Refused (nullopt) without an
// operator's token when tokens are configured, or with a viewer's (a stream sends commands).
std::optional<Caller> stream_caller(lws* wsi, const ControlState& state) {
  const AccessOutcome a = authenticate(header_value(wsi, WSI_TOKEN_HTTP_AUTHORIZATION), state.options.operators,
                                       state.options.token);
  if (a.status != AccessOutcome::Status::allowed) return std::nullopt;
  if (a.caller.authenticated && a.caller.role != Role::operator_) {
    FL_INFO("control stream refused: %s", forbidden_detail(a.caller).c_str());
    return std::nullopt;
  }
  return a.caller;
}

void remember_caller(StreamPerSession* pss, const Caller& c) {
  pss->checked = true;
  pss->authenticated = c.authenticated;
  pss->role = c.role;
  const std::size_t n = std::min(c.name.size(), sizeof pss->name - 1);
  std::memcpy(pss->name, c.name.data(), n);
  pss->name[n] = '\0';
}

int on_established(lws* wsi, StreamPerSession* pss) {
  ControlState* state = state_of(wsi);
  if (pss == nullptr || state == nullptr || !state->serving()) return -1;
  if (!pss->checked) {
    // lws gave the filter no session memory: the headers are still here.
    const std::optional<Caller> c = stream_caller(wsi, *state);
    if (!c) return -1;
    remember_caller(pss, *c);
  }
  auto* s = new (std::nothrow) StreamSession();
  if (s == nullptr) return -1;
  s->state = state;
  s->wsi = wsi;
  s->caller.authenticated = pss->authenticated;
  s->caller.role = pss->role;
  s->caller.name = pss->name;
  if (state->options.audit != nullptr) {
    char buf[64] = {};
    const char* p = lws_get_peer_simple(wsi, buf, sizeof buf);
    s->peer = p != nullptr ? audit_peer(p) : std::string();
  }
  pss->session = s;
  state->sessions.insert(s);
  subscribe(s, false);
  return 0;
}

int on_receive(lws* wsi, StreamSession* s, const char* in, std::size_t len) {
  if (s->closing) return 0;
  if (lws_frame_is_binary(wsi)) {
    close_session(s, LWS_CLOSE_STATUS_UNACCEPTABLE_OPCODE, "text frames of JSON lines only");
    return 0;
  }
  if (s->rx.size() + len > kMaxStreamFrame) {
    close_session(s, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, "frame over 1 MiB");
    return 0;
  }
  s->rx.append(in, len);
  if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi) > 0) return 0;
  std::string frame;
  frame.swap(s->rx);
  on_frame(s, frame);
  return 0;
}

void destroy_session(StreamPerSession* pss) {
  if (pss == nullptr || pss->session == nullptr) return;
  StreamSession* s = pss->session;
  pss->session = nullptr;
  ControlState* state = s->state;
  if (s->subscribed && state->serving()) state->fleet->events().unsubscribe(s->subscription);
  state->sessions.erase(s);
  cancel_end_of_turn_flush(s);
  delete s;
}

}  // namespace

// As one text frame, unless lws still holds part of the last one (it sends that
// first, then calls the writeable callback, which writes these).
void write_session(StreamSession* s) {
  if (s->closing || s->out_pos >= s->out.size()) return;
  if (lws_partial_buffered(s->wsi)) {
    request_write(s);
    return;
  }
  const std::size_t n = std::min(kWriteChunk, s->out.size() - s->out_pos);
  const std::string_view piece(s->out.data() + s->out_pos, n);
  if (net::write_with_pre(s->wsi, piece, LWS_WRITE_TEXT) != net::WriteStatus::written) {
    close_session(s, LWS_CLOSE_STATUS_ABNORMAL_CLOSE, "write failed");
    return;
  }
  s->out_pos += n;
  if (s->out_pos >= s->out.size()) {
    s->out.clear();
    s->out_pos = 0;
  } else {
    request_write(s);
  }
}

void end_session_for_shutdown(StreamSession* s) {
  if (s->subscribed) s->state->fleet->events().unsubscribe(s->subscription);
  s->subscribed = false;
  close_session(s, LWS_CLOSE_STATUS_GOINGAWAY, "broker shutting down");
}

int callback_stream(lws* wsi, lws_callback_reasons reason, void* user, void* in, std::size_t len) {
  auto* pss = static_cast<StreamPerSession*>(user);
  StreamSession* s = pss != nullptr ? pss->session : nullptr;
  switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: {
      // The upgrade request's headers are still here: the same bearer token as the API.
      ControlState* state = state_of(wsi);
      if (state == nullptr || !state->serving()) return 1;
      const std::optional<Caller> c = stream_caller(wsi, *state);
      if (!c) return 1;
      if (pss != nullptr) remember_caller(pss, *c);
      return 0;
    }
    case LWS_CALLBACK_ESTABLISHED:
      return on_established(wsi, pss);
    case LWS_CALLBACK_RECEIVE:
      if (s == nullptr) return -1;
      return on_receive(wsi, s, static_cast<const char*>(in), len);
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

}  // namespace fleetlink::broker::control_net
