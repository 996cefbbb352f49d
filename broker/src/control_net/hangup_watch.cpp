// The event streams, looked at for clients that went away (control_state.hpp
// says why lws does not tell us in time).
#include <poll.h>

#include <cerrno>

#include "control_net/control_state.hpp"

namespace fleetlink::broker::control_net {
namespace {

constexpr lws_usec_t kLookEveryUs = LWS_US_PER_SEC / 10;

void look_at_streams(lws_sorted_usec_list_t* sul);

// Closed at once (its queued events are of no use to a client that left), not
// from its writeable callback: a client that half-closed and stopped reading
// would never make the socket writeable, and the loop would spin meanwhile.
void close_stream(Transaction* tx) {
  tx->sse->closing = true;
  lws_set_timeout(tx->wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
}

// Whether the client at the other end of `fd` sent anything that lws has not
// read, its hang-up included; nothing is read.
bool client_became_readable(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  int n = 0;
  do {
    n = ::poll(&p, 1, 0);
  } while (n < 0 && errno == EINTR);
  return n > 0 && p.revents != 0;
}

void schedule(ControlState* state) {
  state->hangup_watch.scheduled = true;
  lws_sul_schedule(state->context, 0, &state->hangup_watch.sul, look_at_streams, kLookEveryUs);
}

void look_at_streams(lws_sorted_usec_list_t* sul) {
  auto* watch = reinterpret_cast<HangupWatch*>(sul);
  ControlState* state = watch->state;
  watch->scheduled = false;
  bool open_streams = false;
  for (Transaction* tx : state->streams) {
    // A held POST is not looked at: lws is still reading its connection (its
    // body made it LRS_BODY, not LRS_DOING_TRANSACTION) and closes it itself.
    if (!tx->sse) continue;
    const int fd = lws_get_socket_fd(tx->wsi);
    // The close is asynchronous: the set stays as it is while it is walked.
    if (fd >= 0 && client_became_readable(fd)) close_stream(tx);
    else open_streams = true;
  }
  if (open_streams && state->serving()) schedule(state);
}

}  // namespace

void watch_for_hangups(ControlState* state) {
  if (!state->hangup_watch.scheduled && state->context != nullptr && state->serving()) schedule(state);
}

void cancel_hangup_watch(ControlState* state) {
  lws_sul_cancel(&state->hangup_watch.sul);
  state->hangup_watch.scheduled = false;
}

}  // namespace fleetlink::broker::control_net
