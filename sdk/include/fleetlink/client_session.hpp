#pragma once
// ClientSession: the reusable rig-side connection to a fleetlink broker.
//
// It owns one WebSocket connection at a time (mutual TLS, or plain ws:// to a
// loopback address when allowed), says HELLO on every connect, hands decoded
// frames to handlers, writes outbound frames through a single writer, and
// reconnects with fleetlink::Backoff (honouring HTTP 503 Retry-After and GOAWAY's
// reconnect_after_ms). The agent uses it; a custom tool can use it the same way.
//
// Threading: run() drives the session's own event loop on the calling thread and
// every handler is called on that thread. send(), post(), reconnect() and stop()
// may be called from any thread. Handlers must not throw (exceptions are caught
// and logged, never let through the C callbacks underneath).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fleetlink/export.hpp"
#include "fleetlink/backoff.hpp"
#include "fleetlink/close_codes.hpp"
#include "fleetlink/codec.hpp"
#include "fleetlink/expected.hpp"
#include "fleetlink/messages.hpp"

namespace fleetlink {

// A broker address: wss://host:port/path or ws://host:port/path.
struct BrokerUrl {
  bool tls = true;
  std::string host;         // without IPv6 brackets
  std::uint16_t port = 0;
  std::string path = "/";
  std::string text;         // as given
};

// Parses ws:// and wss:// URLs; the port defaults to 80/443 and the path to "/".
FLEETLINK_API Expected<BrokerUrl> parse_broker_url(std::string_view url);
// "localhost", 127.0.0.0/8 and ::1.
FLEETLINK_API bool is_loopback_host(std::string_view host) noexcept;

enum class SessionState : std::uint8_t {
  idle,        // run() not called yet
  connecting,  // TCP/TLS/HTTP upgrade in progress
  open,        // WebSocket open, HELLO sent, WELCOME not yet received
  welcomed,    // WELCOME received: commands may arrive
  backoff,     // waiting before the next attempt
  stopped,     // run() returned or is returning
};
FLEETLINK_API const char* to_string(SessionState s) noexcept;

struct ClientSessionConfig {
  std::vector<std::string> broker_urls;   // tried in turn; the next one after a failure
  std::string cert_path;                  // client certificate (PEM); required for wss
  std::string key_path;                   // its private key (PEM)
  std::string ca_path;                    // CA that signs the broker's certificate
  bool allow_plain = false;               // permit ws:// (loopback addresses only)
  msg::Hello hello;                       // sent as the first frame of every connection
  BackoffPolicy backoff;
  std::uint64_t backoff_seed = 0;         // 0: random
  std::size_t max_frame_bytes = kDefaultMaxFrameBytes;  // inbound, after reassembly
  std::size_t max_queued_bytes = 8u << 20;  // outbound queue bound; send() fails beyond it
  Strictness strictness = Strictness::lenient;
  std::chrono::milliseconds stop_grace{1000};  // how long stop() waits for the close handshake
  // Half-open detection from this side: after keepalive_idle without a valid frame
  // the session PINGs, and drops the connection if nothing valid (a PONG) arrived
  // by keepalive_timeout. Whole seconds (libwebsockets' resolution); 0 disables.
  std::chrono::seconds keepalive_idle{60};
  std::chrono::seconds keepalive_timeout{90};
  // Where to keep TLS sessions across restarts (created 0600), so that a restarted
  // client resumes its session with a broker that issues tickets instead of a full
  // handshake. Sessions made with another certificate are not offered. Empty: in
  // memory only (still resumed after a broker restart while this process runs).
  std::string tls_session_file;
  // Called before every connection attempt: a token to send as
  // "Authorization: Bearer <token>" on the WebSocket upgrade (a broker with
  // --rig-token limits the rig to the command kinds it grants). Asked again
  // each time, so a renewed token is used from the next connection on. Unset,
  // or an empty answer: no Authorization header.
  std::function<std::string()> bearer_token;
};

struct ClientSessionHandlers {
  std::function<void(const msg::Welcome&)> on_welcome;
  std::function<void(const msg::Command&)> on_command;
  // A COMMAND frame decode() refused (a field of the wrong type, a bad cmd_id...):
  // what could still be read of it (see peek_command) and why it was refused.
  // Unset: such a frame closes the connection 4400 like any undecodable frame.
  std::function<void(const CommandPeek& peek, std::string_view why)> on_malformed_command;
  std::function<void(const msg::Cancel&)> on_cancel;
  std::function<void(const msg::Goaway&)> on_goaway;
  // The connection ended (or an attempt failed). code is the WebSocket close code
  // (1006 when the connection broke without one, 0 when it never opened).
  std::function<void(std::uint16_t code, std::string_view reason)> on_disconnected;
  // Any other message type the broker sent (ack, result, event, ... for custom tools).
  std::function<void(const Message&)> on_message;
  // Frames accepted by send() but not written before the connection ended, in order.
  std::function<void(std::vector<Message> unsent)> on_unsent;
  // The writer emptied the outbound queue: a caller that backed off because send()
  // returned false (queue over max_queued_bytes) can send more now.
  std::function<void()> on_queue_empty;
  // Diagnostics: level 3 error, 4 warning, 6 info, 7 debug (syslog numbering).
  std::function<void(int level, std::string_view line)> on_log;
};

class FLEETLINK_API ClientSession {
 public:
  ClientSession(ClientSessionConfig config, ClientSessionHandlers handlers);
  ~ClientSession();
  ClientSession(const ClientSession&) = delete;
  ClientSession& operator=(const ClientSession&) = delete;

  // Checks the configuration (URLs parse, plain only to loopback when allowed,
  // TLS files given for wss) without touching the network.
  Expected<void> validate() const;

  // Runs the event loop until stop(). Returns 0 after stop(), non-zero if the
  // session could not start (bad configuration, TLS files unusable).
  int run();
  // Thread-safe. Ends run(): closes the connection with 1001 and returns.
  void stop();

  // Thread-safe. Queues one frame for the single writer. False when there is no
  // open connection or the queue is over max_queued_bytes (the caller keeps it).
  bool send(const Message& m);
  // Thread-safe. Runs task on the session's loop thread, in order.
  void post(std::function<void()> task);
  // Thread-safe. Closes the current connection with code/reason after the frames
  // already queued are written, then reconnects after the backoff delay.
  void reconnect(CloseCode code, std::string reason);

  SessionState state() const noexcept;
  // The broker URL of the current or last attempt.
  std::string current_url() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fleetlink
