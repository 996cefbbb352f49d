#pragma once
// The rig endpoint's libwebsockets protocol: the callback only translates lws
// reasons into calls on the fleet core (FleetCore) and writes what the core asks
// for, and this class is the core's RigTransport. Each connection's RigSession
// lives inside lws's per-connection allocation.
#include <libwebsockets.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "fleet/fleet_core.hpp"
#include "fleet/observer.hpp"
#include "fleet/transport.hpp"
#include "net/accept_gate.hpp"
#include "net/jwt_verifier.hpp"
#include "net/artifact_endpoint.hpp"
#include "net/lws_io.hpp"
#include "net/rig_trust.hpp"
#include "net/tls_tickets.hpp"

namespace fleetlink::broker::net {

class RigProtocol final : public RigTransport {
 public:
  explicit RigProtocol(FleetObserver& observer) : observer_(observer) {}
  RigProtocol(const RigProtocol&) = delete;
  RigProtocol& operator=(const RigProtocol&) = delete;

  // Before the rig vhosts are created: the SSL_CTX set-up and the ticket callback read them.
  void set_tls(RigTlsSettings tls) { tls_ = std::move(tls); }
  // Before the rig vhosts are created: installed in the TLS vhost's SSL_CTX when lws makes it.
  void set_trust(std::shared_ptr<const RigTrust> trust) { trust_ = std::move(trust); }
  // A reload: new handshakes use `trust` from now on. On an error the previous
  // trust is installed again (and stays in use).
  Expected<void> replace_trust(std::shared_ptr<const RigTrust> trust);
  const std::shared_ptr<const RigTrust>& trust() const noexcept { return trust_; }
  // Whether s's client certificate still verifies under the trust in use:
  // nullopt yes (or no certificate to check: plain ws), else the verifier's reason.
  std::optional<std::string> certificate_refusal(const RigSession& s) const;
  // Both must outlive every rig connection (the lws context).
  void attach(FleetCore& core, AcceptGate& gate) {
    core_ = &core;
    gate_ = &gate;
  }
  // Rig tokens (--rig-token other than off): each connection's Authorization
  // header is verified against these keys when it opens. Null: not read. Must
  // outlive every rig connection.
  void set_rig_tokens(const JwtVerifier* verifier) { tokens_ = verifier; }
  // Artifact uploads on this port (null: none, every upload is answered 404).
  void attach_artifacts(ArtifactEndpoint* endpoint) { artifacts_ = endpoint; }
  // Runs when a session's reading is paused: the application starts the timer
  // that calls FleetCore::resume_paused.
  void on_paused(std::function<void()> start_resume_timer) { start_resume_timer_ = std::move(start_resume_timer); }

  // The protocol list for the rig vhosts (one entry and the terminator). The
  // receive buffer is the most lws reads from a rig per wakeup, and stays
  // allocated per connection; frames larger than it are reassembled by the core.
  lws_protocols* protocols(std::size_t max_frame_bytes, std::size_t rx_buffer_bytes);
  // The context's user pointer must be this object (lws_context_creation_info::user).
  static int callback(lws* wsi, lws_callback_reasons reason, void* user, void* in, std::size_t len);

  // RigTransport
  void write_soon(RigSession& s) override;
  void write_now(RigSession& s) override;
  void close(RigSession& s, CloseCode code, std::string_view reason) override;
  void pause_reading(RigSession& s) override;
  void resume_reading(RigSession& s) override;
  void stop_accepting() override;
  std::string peer_address(const RigSession& s) const override;
  std::optional<CertIdentity> peer_identity(const RigSession& s) const override;

 private:
  int on_callback(lws* wsi, lws_callback_reasons reason, void* user, void* in, std::size_t len);
  void open_session(lws* wsi, void* user);
  // A handshake verified (or a ticket issued) under trust that a reload has replaced since.
  bool verified_under_older_trust(SSL* ssl) const;
  // Writes the most urgent frame the core has for s (the single writer).
  WriteStatus write_next(RigSession& s);

  FleetObserver& observer_;
  RigTlsSettings tls_;  // read by the rig SSL_CTX's ticket callback: lives as long as the context
  std::shared_ptr<const RigTrust> trust_;  // the CAs, CRLs, certificate and key in use
  SSL_CTX* ssl_ctx_ = nullptr;             // the TLS vhost's (lws owns it)
  std::uintptr_t trust_generation_ = 1;    // one more at every reload; recorded on each SSL at verification
  FleetCore* core_ = nullptr;
  AcceptGate* gate_ = nullptr;
  const JwtVerifier* tokens_ = nullptr;
  ArtifactEndpoint* artifacts_ = nullptr;
  std::function<void()> start_resume_timer_;
  TxBuffer tx_;  // every frame is encoded behind lws's headroom in this one buffer
  lws_protocols protocols_[2] = {};
};

}  // namespace fleetlink::broker::net
