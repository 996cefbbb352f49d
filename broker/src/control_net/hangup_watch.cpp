// The held POSTs and event streams, looked at for clients that went away
// (control_state.hpp says why lws does not tell us in time).
#include <poll.h>

#include <cerrno>
#include <vector>

#include "control_net/control_state.hpp"

namespace fleetlink::broker::control_net {
namespace {

constexpr lws_usec_t kLookEveryUs = LWS_US_PER_SEC / 10;

// As at shutdown: a held POST is answered with what is known (the command goes
// on), an event stream is closed, each from its own writeable callback.
void end_early(Transaction* tx) {
  if (tx->hold && !tx->hold->done) {
    tx->hold->done = true;
    lws_callback_on_writable(tx->wsi);
  } else if (tx->sse && !tx->sse->closing) {
    tx->sse->closing = true;
    tx->sse->write_requested = true;
    lws_callback_on_writable(tx->wsi);
  }
}

void look_at_streams(lws_sorted_usec_list_t* sul) {
  auto* watch = reinterpret_cast<HangupWatch*>(sul);
  ControlState* state = watch->state;
  watch->scheduled = false;
  std::vector<Transaction*> readable;
  for (Transaction* tx : state->streams) {
    const int fd = lws_get_socket_fd(tx->wsi);
    if (fd >= 0 && look_at_peer(fd) == PeerLook::readable) readable.push_back(tx);
  }
  for (Transaction* tx : readable) end_early(tx);  // only asks for callbacks: the set stays as it is
  watch_for_hangups(state);
}

}  // namespace

PeerLook look_at_peer(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  int n = 0;
  do {
    n = ::poll(&p, 1, 0);
  } while (n < 0 && errno == EINTR);
  return n > 0 && p.revents != 0 ? PeerLook::readable : PeerLook::quiet;
}

void watch_for_hangups(ControlState* state) {
  if (state->hangup_watch.scheduled || state->context == nullptr || state->streams.empty()) return;
  state->hangup_watch.scheduled = true;
  lws_sul_schedule(state->context, 0, &state->hangup_watch.sul, look_at_streams, kLookEveryUs);
}

void cancel_hangup_watch(ControlState* state) {
  lws_sul_cancel(&state->hangup_watch.sul);
  state->hangup_watch.scheduled = false;
}

}  // namespace fleetlink::broker::control_net
