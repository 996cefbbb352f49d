#pragma once
// The broker's data plane: the libwebsockets context on a libuv loop, the rig
// listener(s), every rig connection, the outboxes, keepalive, admission and
// drain. Implements Fleet for the control plane. Single-threaded: everything
// runs on the loop thread.
#include <libwebsockets.h>
#include <uv.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>

#include "net/accept_gate.hpp"
#include "fleetlink/token_bucket.hpp"
#include "fleet/command_table.hpp"
#include "app/config.hpp"
#include "fleet/rig_session.hpp"
#include "fleet/drain.hpp"
#include "fleet/fleet.hpp"
#include "fleet/hello_policy.hpp"
#include "fleet/keepalive.hpp"
#include "observe/metrics.hpp"
#include "store/registry_backend.hpp"
#include "net/tls_tickets.hpp"

struct lws;
struct lws_context;
struct lws_vhost;

namespace fleetlink::broker {

class Broker final : public Fleet {
 public:
  Broker(BrokerConfig cfg, uv_loop_t* loop, BrokerMetrics& metrics,
         std::unique_ptr<RegistryBackend> registry);
  ~Broker() override;
  Broker(const Broker&) = delete;
  Broker& operator=(const Broker&) = delete;

  // Create the lws context, vhosts, listeners, timers and signal handlers.
  // On success the actual listen ports are known (listen_port()).
  Expected<void> start();
  // Tear down (after the loop stopped): closes handles, destroys the context.
  void shutdown();
  lws_context* context() const noexcept { return context_; }
  int listen_port() const noexcept { return listen_port_; }
  int plain_port() const noexcept { return plain_port_; }
  // The control API's actual port (0 when it is not built in).
  int control_port() const noexcept;
  // Exit code to return once the loop has stopped.
  int exit_code() const noexcept { return exit_code_; }

  // Fleet
  EnqueueOutcome enqueue(std::string_view rig_id, std::string kind, StringMap args) override;
  std::vector<RigView> rigs() const override;
  void visit_rig_labels(const RigLabelsVisitor& visit) const override;
  std::optional<RigView> rig(std::string_view rig_id) const override;
  std::optional<CommandView> command(std::string_view cmd_id) const override;
  bool read_command(std::string_view cmd_id,
                    const std::function<void(const CommandView&)>& read) const override;
  bool force_reconnect(std::string_view rig_id) override;
  void start_drain(std::chrono::milliseconds window) override;
  bool draining() const override { return drain_.active; }
  bool ready() const override;
  std::string broker_id() const override { return cfg_.broker_id; }
  EventBus& events() override { return bus_; }

  // Bonus: broker -> agent CANCEL for a command in flight. False if unknown/not live.
  bool cancel(std::string_view cmd_id) override;

  // The lws protocol callback (static trampoline -> instance).
  static int lws_callback(lws* wsi, enum lws_callback_reasons reason, void* user, void* in, std::size_t len);

 private:
  int on_callback(lws* wsi, int reason, void* user, void* in, std::size_t len);
  int on_confirm_upgrade(lws* wsi);
  void handshake_finished(lws* wsi);
  int on_receive(Connection& c, const std::uint8_t* in, std::size_t len);
  void on_frame(Connection& c, std::span<const std::uint8_t> frame);
  void on_hello(Connection& c, msg::Hello hello);
  void on_ack(Connection& c, const msg::Ack& ack);
  void on_nack(Connection& c, const msg::Nack& nack);
  void on_result(Connection& c, msg::Result result);
  void on_output(Connection& c, const msg::OutputChunk& chunk);
  void send_now_or_when_writable(Connection& c);
  int on_writeable(Connection& c);
  void on_closed(Connection& c);

  void request_close(Connection& c, CloseCode code, std::string reason);
  void unregister(Connection& c, const std::string& why);
  int write_frame(Connection& c, const Message& m);
  bool more_to_write(const Connection& c) const noexcept;
  void emit(EventType type, const std::string& rig_id, const std::string& cmd_id, std::string detail);
  RigView view_of(const Connection& c) const;
  std::optional<CertIdentity> peer_identity(lws* wsi) const;

  // Keepalive, hello timeouts and registry refresh walk every connection once per
  // pass, a slice of them per timer tick: at 20,000 rigs a whole walk at once
  // stalled the loop (and queued ~1,000 pings in one burst) every second.
  void sweep();
  void sweep_one(Connection& c, std::uint32_t now, bool refresh);
  void pause_reading(Connection& c);
  void resume_paused();
  void check_drain_done();
  void stop_loop(int code);

  std::uint32_t mono_ms() const noexcept;
  std::uint64_t mono_us() const noexcept;

  BrokerConfig cfg_;
  RigTlsSettings rig_tls_;  // read by the rig SSL_CTX's ticket callback: lives as long as the broker
  uv_loop_t* loop_;
  BrokerMetrics& metrics_;
  std::unique_ptr<RegistryBackend> registry_;
  KeepaliveSettings keepalive_;
  lws_context* context_ = nullptr;
  lws_vhost* agent_vhost_ = nullptr;
  lws_vhost* plain_vhost_ = nullptr;
  lws_vhost* control_vhost_ = nullptr;
  std::unique_ptr<AdmissionListener> listener_;
  std::unique_ptr<AdmissionListener> plain_listener_;
  TokenBucket accept_bucket_;
  PendingHandshakes pending_handshakes_{256, 40000};
  int listen_port_ = 0;
  int plain_port_ = 0;
  bool certs_loaded_ = false;
  bool stopping_ = false;
  int exit_code_ = 0;

  uv_timer_t sweep_timer_{};
  uv_timer_t resume_timer_{};                 // runs only while some rig is paused
  std::vector<Connection*> paused_;           // reading paused by the inbound rate limit
  uv_signal_t sigterm_{};
  uv_signal_t sigint_{};
  bool handles_open_ = false;
  std::uint64_t start_mono_ms_ = 0;
  std::uint32_t last_refresh_ms_ = 0;

  Connection* head_ = nullptr;     // every WebSocket connection
  Connection* sweep_cursor_ = nullptr;  // the next one the sweep visits; null: a new pass
  std::uint32_t sweep_slices_ = 1;      // timer ticks per pass
  bool refresh_pass_ = false;           // this pass also refreshes the registry entries
  std::size_t connection_count_ = 0;
  // Registered rigs; the key views the Connection's own rig_id (erased before it goes).
  std::unordered_map<std::string_view, Connection*> rigs_;
  // Interned agent versions, kind lists and label sets, reference-counted so a rig that
  // reconnects with ever new values cannot grow them without bound.
  std::map<std::string, std::uint32_t> versions_;
  std::map<std::vector<std::string>, std::uint32_t> kind_sets_;
  std::map<Fleet::LabelList, std::uint32_t> label_sets_;
  void release_interned(Connection& c);
  CommandTable commands_;
  DrainPlan drain_;
  std::mt19937_64 rng_;
  std::vector<std::uint8_t> tx_;   // LWS_PRE + frame, reused for every write
  // Rare, so kept here rather than in every connection (per-rig memory).
  std::unordered_map<Connection*, std::vector<std::string>> pending_cancels_;
  EventBus bus_;
};

}  // namespace fleetlink::broker
