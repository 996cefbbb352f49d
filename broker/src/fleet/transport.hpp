#pragma once
// What the fleet core asks of the connections under it: the core decides, the
// transport (net/rig_protocol.cpp, libwebsockets) does. Everything is called on
// the loop thread, from inside the core's handlers.
#include <optional>
#include <string>
#include <string_view>

#include "fleet/hello_policy.hpp"
#include "fleetlink/close_codes.hpp"

namespace fleetlink::broker {

struct RigSession;

class RigTransport {
 public:
  virtual ~RigTransport() = default;
  // Frames wait in the session (FleetCore::next_frame gives them, most urgent
  // first): have them written when the socket can take them.
  virtual void write_soon(RigSession& s) = 0;
  // The same, but written at once when nothing is buffered for the socket: one
  // send() where waiting for writability costs two epoll_ctl() and a loop turn.
  // It may be called from inside this session's own input handling (the WELCOME
  // answers a HELLO from its receive callback): lws 4.1.6 keeps what the socket
  // does not take and sends it before the next writeable callback, and a failed
  // write closes the connection asynchronously, after the callback returns.
  virtual void write_now(RigSession& s) = 0;
  // Close with a code and a reason (a close frame first, then the socket). The
  // core has already forgotten the session's registration; on_closed follows.
  virtual void close(RigSession& s, CloseCode code, std::string_view reason) = 0;
  // Stop/restart reading the socket (the inbound rate limit): TCP pushes back.
  virtual void pause_reading(RigSession& s) = 0;
  virtual void resume_reading(RigSession& s) = 0;
  // Stop accepting new connections (a drain started).
  virtual void stop_accepting() = 0;
  // "ip:port" of the peer, for views and logs.
  virtual std::string peer_address(const RigSession& s) const = 0;
  // Who the peer's client certificate says it is; nullopt without TLS.
  virtual std::optional<CertIdentity> peer_identity(const RigSession& s) const = 0;
};

}  // namespace fleetlink::broker
