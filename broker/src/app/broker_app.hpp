#pragma once
// fleetlink-broker wired together: the libwebsockets context on the broker's
// libuv loop, the rig vhosts behind the accept gate, the control vhost, the
// fleet core between them, and the loop's timers and signals. Owns everything;
// the logic lives in the parts (docs/ARCHITECTURE.md).
#include <uv.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "app/config.hpp"
#include "app/operators.hpp"
#include "app/redis_fabric.hpp"
#include "artifacts/artifact_store.hpp"
#include "control/audit.hpp"
#include "control/reload.hpp"
#include "fleet/clock.hpp"
#include "fleet/fleet_core.hpp"
#include "net/accept_gate.hpp"
#include "net/artifact_endpoint.hpp"
#include "net/rig_protocol.hpp"
#include "observe/broker_observer.hpp"
#include "s3/s3_target.hpp"
#include "observe/metrics.hpp"
#include "store/command_store.hpp"
#include "store/registry_backend.hpp"

struct lws_context;
struct lws_vhost;

namespace fleetlink::broker {

// The loop's clock: uv_now() is the time of the current loop turn.
class LoopClock final : public Clock {
 public:
  explicit LoopClock(uv_loop_t* loop) : loop_(loop), start_ms_(uv_now(loop)) {}
  std::uint32_t mono_ms() const override { return static_cast<std::uint32_t>(uv_now(loop_) - start_ms_); }
  std::uint64_t wall_ms() const override;

 private:
  uv_loop_t* loop_;
  std::uint64_t start_ms_;
};

class ControlListener;

class BrokerApp final : public Reloader {
 public:
  // `registry` is used when the config says embedded; with --registry redis the
  // broker makes its own (RedisFabric) and `registry` may be null.
  BrokerApp(BrokerConfig cfg, uv_loop_t* loop, BrokerMetrics& metrics, std::unique_ptr<RegistryBackend> registry,
            std::unique_ptr<CommandStore> store);
  ~BrokerApp() override;
  BrokerApp(const BrokerApp&) = delete;
  BrokerApp& operator=(const BrokerApp&) = delete;

  // Loads the store, then creates the lws context, vhosts, listeners, timers and signal handlers.
  Expected<void> start();
  // Tears down (after the loop stopped): closes handles, destroys the context.
  void shutdown();
  int listen_port() const noexcept { return gate_.tls_port(); }
  int plain_port() const noexcept { return gate_.plain_port(); }
  int control_port() const noexcept;
  // The exit code once the loop has stopped.
  int exit_code() const noexcept { return exit_code_; }
  Fleet& fleet() noexcept { return core_; }
  // Several brokers: the Redis side (null: the embedded registry).
  const RedisFabric* fabric() const noexcept { return fabric_.get(); }

  // Reloader (SIGHUP, POST /v1/admin/reload): re-reads the rig listener's CA
  // bundle, CRLs, certificate and key, and the operators (--operators-file, the
  // control token file). Everything is read and checked before anything is
  // used; then new handshakes get the new material, open connections stay, and
  // those whose certificate the new CAs and CRLs refuse are closed 4401. A
  // failure changes nothing.
  ReloadOutcome reload(std::string_view trigger) override;

 private:
  Expected<void> open_artifacts();
  Expected<void> create_rig_vhosts();
  void start_timers_and_signals();
  void start_resume_timer();
  void stop_loop(int code);
  RigTlsFiles tls_files() const { return RigTlsFiles{cfg_.cert, cfg_.key, cfg_.ca, cfg_.crl}; }
  // The operators a reload would install (nullopt: none configured), or why not.
  Expected<std::optional<OperatorTable>> read_operators() const;

  BrokerConfig cfg_;
  uv_loop_t* loop_;
  BrokerMetrics& metrics_;
  std::unique_ptr<RedisFabric> fabric_;  // --registry redis: the registry and the mesh
  std::unique_ptr<RegistryBackend> registry_;
  std::unique_ptr<CommandStore> store_;
  // The control API's operators (null: no token, an open API) and audit log; they outlive the control vhost.
  std::unique_ptr<OperatorTable> operators_;
  std::unique_ptr<AuditLog> audit_;
  LoopClock clock_;
  BrokerObserver observer_;
  std::unique_ptr<net::JwtVerifier> rig_tokens_;  // --rig-token other than off; outlives the rig vhosts
  net::RigProtocol rig_;
  FleetCore core_;
  AcceptGate gate_;
  std::unique_ptr<ControlListener> control_listener_;   // the control port's accept() (control_listener.hpp)
  // Artifacts rigs upload on the rig port (null: no artifact directory, e.g. --store none).
  std::unique_ptr<ArtifactStore> artifacts_;
  std::optional<s3::Target> artifact_s3_;  // --artifact-s3-endpoint set: rigs upload there
  std::unique_ptr<net::ArtifactEndpoint> artifact_endpoint_;

  lws_context* context_ = nullptr;
  lws_vhost* agent_vhost_ = nullptr;
  lws_vhost* plain_vhost_ = nullptr;
  lws_vhost* control_vhost_ = nullptr;
  uv_timer_t sweep_timer_{};
  uv_timer_t resume_timer_{};  // runs only while some rig's reading is paused
  uv_timer_t store_timer_{};   // submits the store's pending steps
  uv_idle_t store_slices_{};   // ...a light interval's in pieces, one per turn of the loop
  uv_async_t store_wakeup_{};  // the store's writer has outcomes (any thread may send it)
  bool store_wakeup_open_ = false;
  uv_timer_t prune_timer_{};   // the store's retention
  uv_timer_t recheck_timer_{};  // runs while a reload's re-check of open connections goes on
  uv_signal_t sigterm_{};
  uv_signal_t sigint_{};
  uv_signal_t sighup_{};  // reload
  bool handles_open_ = false;
  bool stopping_ = false;
  int exit_code_ = 0;
};

}  // namespace fleetlink::broker
