// The control API's vhost: its own port, no mounts, two protocols. The first,
// "fleetlink-control", answers every HTTP request (control_http.cpp) and keeps
// GET /v1/events open as an event stream (control_sse.cpp); the second,
// "fleetlink-stream", is the /v1/stream WebSocket (control_ws.cpp). Here: the
// vhost's state and its lifetime, the job pump and tick, the end-of-turn flush.
#include "control_net/control_vhost.hpp"

#include <libwebsockets.h>

#include <algorithm>

#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "control/control_json.hpp"
#include "control/routes.hpp"
#include "control/stream_protocol.hpp"
#include "control_net/control_state.hpp"

namespace fleetlink::broker {
namespace control_net {
namespace {

constexpr int kKeepAliveIdleSecs = 60;

const lws_protocols kProtocols[] = {
    {"fleetlink-control", callback_control, sizeof(PerSession), 0, 0, nullptr, 0},
    // Chosen by the upgrade's Sec-WebSocket-Protocol.
    {stream::kSubprotocol.data(), callback_stream, sizeof(StreamPerSession), 16 * 1024, 0, nullptr, 0},
    {nullptr, nullptr, 0, 0, 0, nullptr, 0},
};

// The vhost's ControlState hangs off lws's per-vhost private data of the first
// protocol. lws frees that slot with the vhost; PROTOCOL_DESTROY, which lws
// sends only once the vhost's last connection is gone, deletes what it points
// to. So the state outlives every connection of its vhost, and a vhost that
// could not be created never had one.
ControlState** state_slot(lws_vhost* vh) {
  return vh != nullptr ? static_cast<ControlState**>(lws_protocol_vh_priv_get(vh, &kProtocols[0])) : nullptr;
}

ControlState* state_of_vhost(lws_vhost* vh) {
  ControlState** slot = state_slot(vh);
  return slot != nullptr ? *slot : nullptr;
}

// ---- the job pump and tick ----

constexpr lws_usec_t kJobTickUs = LWS_US_PER_SEC;

void sync_job_subscription(ControlState* state);

void run_job_pump(lws_sorted_usec_list_t* sul) {
  auto* pump = reinterpret_cast<JobPump*>(sul);
  ControlState* state = pump->state;
  pump->scheduled = false;
  if (state == nullptr || !state->serving()) return;
  std::vector<std::string> done;
  done.swap(state->finished_cmds);
  const std::uint64_t now = unix_now_ms();
  for (const std::string& cmd_id : done) state->jobs.command_finished(*state->fleet, cmd_id, now);
  // The jobs' next commands (sent as others finish) and their records are made durable before they go.
  (void)state->fleet->persist();
  sync_job_subscription(state);
}

void run_job_tick(lws_sorted_usec_list_t* sul) {
  auto* tick = reinterpret_cast<JobTick*>(sul);
  ControlState* state = tick->state;
  tick->scheduled = false;
  if (state == nullptr || !state->serving()) return;
  state->jobs.tick(*state->fleet, unix_now_ms());
  (void)state->fleet->persist();
  sync_job_subscription(state);
}

// Listen to the Fleet, and tick, while a job runs; stop when none does.
void sync_job_subscription(ControlState* state) {
  if (!state->serving()) return;
  const bool want = state->jobs.running() > 0 || state->jobs.arriving() > 0;
  if (want && !state->job_subscribed) {
    const EventTypes finals{EventType::command_done};
    state->job_subscription = state->fleet->events().subscribe(finals, [state](const FleetEvent& event) {
      state->finished_cmds.push_back(event.cmd_id);
      if (!state->pump.scheduled && state->context != nullptr) {
        state->pump.scheduled = true;
        lws_sul_schedule(state->context, 0, &state->pump.sul, run_job_pump, 1);
      }
    });
    state->job_subscribed = true;
  } else if (!want && state->job_subscribed) {
    state->fleet->events().unsubscribe(state->job_subscription);
    state->job_subscribed = false;
  }
  // Brokers sharing their jobs also tick for none: each looks for jobs whose holder is gone.
  const bool tick = want || state->fleet->shares_jobs();
  if (tick && !state->tick.scheduled && state->context != nullptr) {
    state->tick.scheduled = true;
    lws_sul_schedule(state->context, 0, &state->tick.sul, run_job_tick, kJobTickUs);
  }
}

// At start-up: the unfinished jobs of the store go on where their commands are
// (those this broker holds: with several brokers, another may drive one).
void resume_jobs(ControlState* state, const std::vector<JobRecord>& records) {
  if (records.empty()) return;
  state->jobs.resume_all(*state->fleet, records, unix_now_ms(), [state](Expected<const Job*> job) {
    if (!job) {
      FL_WARN("job not resumed: %s", job.error().detail.c_str());
      return;
    }
    const Job& j = **job;
    FL_INFO("job %s resumed (%s): %zu rigs, %zu in flight, %zu pending, %zu settled", j.job_id.c_str(),
            to_string(j.state()), j.rigs.size(), j.count(JobRigOutcome::dispatched), j.count(JobRigOutcome::pending),
            j.rigs.size() - j.count(JobRigOutcome::dispatched) - j.count(JobRigOutcome::pending));
    state->fleet->when_recorded(state->fleet->persist(), [](const Expected<void>& kept) {
      if (!kept) FL_ERROR("resumed jobs: their records could not be written: %s", kept.error().detail.c_str());
    });
    sync_job_subscription(state);
  });
}

// ---- the end-of-turn flush ----

void run_end_of_turn_flush(lws_sorted_usec_list_t* sul) {
  auto* flush = reinterpret_cast<TurnFlush*>(sul);
  flush->scheduled = false;
  std::vector<Transaction*> streams;
  streams.swap(flush->streams);
  for (Transaction* tx : streams) {
    tx->sse->flush_pending = false;
    flush_event_stream(tx);
  }
  std::vector<StreamSession*> sessions;
  sessions.swap(flush->sessions);
  // The turn's commands from every control stream go to the store in one
  // batch; their answers leave once it is durable.
  const bool asked = std::any_of(sessions.begin(), sessions.end(), [](const StreamSession* s) {
    return !s->pending.empty();
  });
  const bool serving = flush->state != nullptr && flush->state->serving();
  const std::uint64_t batch = asked && serving ? flush->state->fleet->persist() : 0;
  for (StreamSession* s : sessions) {
    // Still listed while settling: lines answered at once join this flush.
    if (!s->pending.empty() && serving) await_answers(s, batch);
    s->flush_pending = false;
    if (!s->write_requested) write_session(s);
  }
}

void schedule_flush(ControlState* state) {
  if (!state->flush.scheduled && state->context != nullptr) {
    state->flush.scheduled = true;
    lws_sul_schedule(state->context, 0, &state->flush.sul, run_end_of_turn_flush, 1);
  }
}

}  // namespace

ControlState* state_of(lws* wsi) { return state_of_vhost(lws_get_vhost(wsi)); }

void destroy_control_state(lws* wsi) {
  ControlState** slot = state_slot(lws_get_vhost(wsi));
  if (slot == nullptr || *slot == nullptr) return;
  ControlState* state = *slot;
  *slot = nullptr;
  lws_sul_cancel(&state->pump.sul);
  lws_sul_cancel(&state->tick.sul);
  lws_sul_cancel(&state->flush.sul);
  control_net::cancel_hangup_watch(state);
  delete state;
}

HttpResponse route_request(ControlState* state, const HttpRequest& request) {
  HttpResponse r = handle_control_request(request, *state->fleet, *state->metrics, state->options);
  sync_job_subscription(state);
  return r;
}

void flush_at_end_of_turn(Transaction* tx) {
  if (!tx->sse->flush_pending) {
    tx->sse->flush_pending = true;
    tx->state->flush.streams.push_back(tx);
  }
  schedule_flush(tx->state);
}

void flush_at_end_of_turn(StreamSession* s) {
  if (!s->flush_pending) {
    s->flush_pending = true;
    s->state->flush.sessions.push_back(s);
  }
  schedule_flush(s->state);
}

void cancel_end_of_turn_flush(Transaction* tx) {
  if (tx->sse && tx->sse->flush_pending) {
    std::erase(tx->state->flush.streams, tx);
    tx->sse->flush_pending = false;
  }
}

void cancel_end_of_turn_flush(StreamSession* s) {
  if (s->flush_pending) {
    std::erase(s->state->flush.sessions, s);
    s->flush_pending = false;
  }
}

}  // namespace control_net

using control_net::ControlState;

fleetlink::Expected<lws_vhost*> create_control_vhost(lws_context* context,
                                                     const ControlApiOptions& options,
                                                     Fleet& fleet, BrokerMetrics& metrics,
                                                     const std::vector<JobRecord>& unfinished_jobs,
                                                     bool own_listener) {
  if (context == nullptr) return make_error(Errc::invalid_argument, "no lws context");
  if (options.port < 0 || options.port > 65535) {
    return make_error(Errc::invalid_argument,
                      "control port out of range: " + std::to_string(options.port));
  }
  // Made before the vhost: lws keeps a pointer to the iface string (options.host).
  auto* state = new (std::nothrow) ControlState();
  if (state == nullptr) return make_error(Errc::io, "out of memory");
  state->options = options;
  // With a store, finished jobs are read back from it: memory keeps the last few
  // (a fleet-wide one holds ~3 MB of rigs).
  const bool durable = options.store != nullptr && options.store->durable();
  state->jobs.set_store(options.store, durable ? 16 : 1000);
  state->options.jobs = &state->jobs;
  state->jobs.set_notices([](const std::string& text) { FL_INFO("%s", text.c_str()); });
  state->fleet = &fleet;
  state->metrics = &metrics;
  state->context = context;
  state->pump.state = state;
  state->tick.state = state;
  state->flush.state = state;
  state->hangup_watch.state = state;

  lws_context_creation_info info;
  std::memset(&info, 0, sizeof info);
  info.vhost_name = "fleetlink-control";
  // 0: lws picks one (lws_get_vhost_listen_port). With its own listener the
  // broker accepts and hands sockets over (control_listener.hpp); not for HTTPS,
  // which lws serves only on a vhost that listens or is
  // CONTEXT_PORT_NO_LISTEN_SERVER, and that one would re-bind each request to
  // the rigs' vhost (the first with that port).
  const bool https = !state->options.tls_cert.empty() && !state->options.tls_key.empty();
  info.port = own_listener && !https ? CONTEXT_PORT_NO_LISTEN : options.port;
  info.iface = state->options.host.empty() ? nullptr : state->options.host.c_str();
  info.protocols = control_net::kProtocols;
  info.keepalive_timeout = control_net::kKeepAliveIdleSecs;
  info.timeout_secs = 10;
  if (!state->options.tls_cert.empty() && !state->options.tls_key.empty()) {
    // HTTPS, no client certificate asked for (the bearer token says who calls). The
    // strings are the state's: lws reads them while it makes the vhost's SSL_CTX.
    info.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT |
                   LWS_SERVER_OPTION_DISABLE_OS_CA_CERTS;
    info.ssl_cert_filepath = state->options.tls_cert.c_str();
    info.ssl_private_key_filepath = state->options.tls_key.c_str();
    // HTTP/1.1 only: the transports write HTTP/1.1 answers themselves (control_http.cpp),
    // and a client offered h2 by ALPN (curl does) would get none it can read.
    info.alpn = "http/1.1";
  }

  lws_vhost* vhost = lws_create_vhost(context, &info);
  if (vhost == nullptr) {
    delete state;
    return make_error(Errc::io, "cannot listen for the control API on " + options.host + ":" +
                                    std::to_string(options.port) +
                                    (options.tls_cert.empty() ? std::string()
                                                              : " (or its certificate " + options.tls_cert +
                                                                    " / key " + options.tls_key + " did not load)"));
  }
  auto** slot = static_cast<ControlState**>(
      lws_protocol_vh_priv_zalloc(vhost, &control_net::kProtocols[0], sizeof(ControlState*)));
  if (slot == nullptr) {
    lws_vhost_destroy(vhost);
    delete state;
    return make_error(Errc::io, "out of memory");
  }
  *slot = state;
  control_net::resume_jobs(state, unfinished_jobs);
  control_net::sync_job_subscription(state);
  return vhost;
}

void attach_control_listener(lws_vhost* vhost, ControlListener* listener) {
  if (ControlState* state = control_net::state_of_vhost(vhost)) state->listener = listener;
}

void shutdown_control_api(lws_vhost* vhost) {
  ControlState* state = control_net::state_of_vhost(vhost);
  if (state == nullptr || state->shut_down) return;
  // Unsubscribe first, while the Fleet is certainly alive; then ask each
  // stream's socket to close from its own writeable callback.
  for (control_net::Transaction* tx : state->streams) control_net::end_transaction_for_shutdown(tx);
  for (control_net::StreamSession* s : state->sessions) control_net::end_session_for_shutdown(s);
  if (state->job_subscribed) state->fleet->events().unsubscribe(state->job_subscription);
  state->job_subscribed = false;
  // What the running jobs did since their last record: the broker that resumes them starts from there.
  state->jobs.save_running(unix_now_ms());
  lws_sul_cancel(&state->pump.sul);
  state->pump.scheduled = false;
  lws_sul_cancel(&state->tick.sul);
  state->tick.scheduled = false;
  lws_sul_cancel(&state->flush.sul);
  state->flush.scheduled = false;
  control_net::cancel_hangup_watch(state);
  state->flush.streams.clear();
  for (control_net::StreamSession* s : state->flush.sessions) s->flush_pending = false;
  state->flush.sessions.clear();
  for (control_net::Transaction* tx : state->streams) {
    if (tx->sse) tx->sse->flush_pending = false;
  }
  state->shut_down = true;
  state->fleet = nullptr;
  state->listener = nullptr;
}

}  // namespace fleetlink::broker
