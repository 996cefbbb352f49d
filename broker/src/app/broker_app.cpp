#include "app/broker_app.hpp"

#include <libwebsockets.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>

#include "common/log.hpp"
#include "control_net/control_listener.hpp"
#include "control_net/control_vhost.hpp"

namespace fleetlink::broker {

namespace {

// No lws "validity" timer per rig connection: the broker runs its own keepalive, and
// lws 4.1.6 re-inserts that timer into one sorted list, walking every connection, at each
// WebSocket establishment and each PONG: O(connections) per event. At 19,900 rigs that
// walk was 53% of the broker's CPU and starved HELLOs and pongs (4008/4002 closes).
const lws_retry_bo_t g_no_lws_validity = {};

constexpr std::uint64_t kResumeCheckMs = 20;  // paused rigs' buckets are looked at this often
constexpr std::uint64_t kPruneEveryMs = 60'000;
// A reload's re-check of open connections: this many certificates are verified
// per tick (~0.1 ms each), so 20,000 rigs take a few seconds and never stall the loop.
constexpr std::uint64_t kRecheckEveryMs = 10;
constexpr std::size_t kRecheckSlice = 64;

FleetSettings fleet_settings(const BrokerConfig& cfg) {
  FleetSettings s;
  s.broker_id = cfg.broker_id;
  s.keepalive.ping_interval_ms = cfg.ping_interval_ms;
  s.keepalive.pong_timeout_ms = cfg.pong_timeout_ms;
  s.keepalive.max_missed = cfg.max_missed_pongs;
  s.hello_timeout_ms = cfg.hello_timeout_ms;
  s.outbox_capacity = cfg.outbox_capacity;
  s.max_frame_bytes = cfg.max_frame_bytes;
  s.rig_rate = cfg.rig_rate;
  s.rig_burst = cfg.rig_burst;
  s.drain_deadline_ms = cfg.drain_deadline_ms;  // 0: each drain's own window + 5 s
  s.command_history = cfg.command_history;
  s.strictness = cfg.strict ? Strictness::strict : Strictness::lenient;
  s.store_commit_interval_ms = cfg.store_commit_interval_ms;
  s.reconcile_grace_ms = cfg.reconcile_grace_ms;
  s.cancel_grace_ms = cfg.cancel_grace_ms;
  s.registry_refresh_ms = cfg.registry_refresh_ms;
  s.unresponsive_after_ms = cfg.unresponsive_after_ms;
  s.mesh_answer_ms = cfg.mesh_answer_ms;
  s.rig_token = rig_token_mode_from_string(cfg.rig_token).value_or(RigTokenMode::off);
  return s;
}

AcceptGate::Settings gate_settings(const BrokerConfig& cfg) {
  AcceptGate::Settings s;
  s.accept_rate = cfg.accept_rate;
  s.accept_burst = cfg.accept_burst;
  s.retry_after_min_s = cfg.retry_after_min_s;
  s.retry_after_max_s = cfg.retry_after_max_s;
  s.max_pending_handshakes = cfg.max_pending_handshakes;
  s.tls_accept_timeout_s = cfg.tls_accept_timeout_s;
  s.handshake_timeout_ms = cfg.handshake_timeout_ms;
  s.max_handshakes_per_address = cfg.max_handshakes_per_address;
  s.fd_reserve = cfg.fd_reserve();
  return s;
}

void close_handle(void* handle) { uv_close(static_cast<uv_handle_t*>(handle), nullptr); }

std::string trimmed(std::string s) {
  const auto not_space = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  return s;
}

}  // namespace

std::uint64_t LoopClock::wall_ms() const { return log::wall_ms(); }

BrokerApp::BrokerApp(BrokerConfig cfg, uv_loop_t* loop, BrokerMetrics& metrics,
                     std::unique_ptr<RegistryBackend> registry, std::unique_ptr<CommandStore> store)
    : cfg_(std::move(cfg)), loop_(loop), metrics_(metrics),
      fabric_(cfg_.registry == "redis" ? std::make_unique<RedisFabric>(loop, cfg_) : nullptr),
      registry_(fabric_ ? nullptr : std::move(registry)),
      store_(store ? std::move(store) : fabric_ ? fabric_->make_store(loop, cfg_) : nullptr), clock_(loop),
      observer_(metrics, BrokerObserver::Limits{cfg_.rig_rate, cfg_.rig_burst}), rig_(observer_),
      core_(fleet_settings(cfg_), rig_, observer_, clock_, fabric_ ? fabric_->registry() : *registry_, *store_,
            std::random_device{}()),
      gate_(loop, gate_settings(cfg_), observer_, [this] { return core_.draining(); }) {
  metrics_.store = store_.get();
  rig_.attach(core_, gate_);
  rig_.on_paused([this] { start_resume_timer(); });
  core_.on_drained([this] { stop_loop(0); });
}

BrokerApp::~BrokerApp() {
  shutdown();
  metrics_.store = nullptr;
}

int BrokerApp::control_port() const noexcept {
  return control_listener_ ? control_listener_->port() : 0;
}

Expected<void> BrokerApp::start() {
  // The store's outcomes come back on the loop: commands waiting for their
  // record go, answers waiting for it leave.
  if (uv_async_init(loop_, &store_wakeup_, [](uv_async_t* a) {
        auto* self = static_cast<BrokerApp*>(a->data);
        self->core_.on_store_progress();
        // What that scheduled on lws timers (a control stream's answers, the
        // end-of-turn flush) is seen by lws only when it next wakes: wake it
        // now, or the answers wait for the next unrelated event (up to a ping
        // interval).
        if (self->context_ != nullptr) lws_cancel_service(self->context_);
      }) != 0)
    return make_error(Errc::io, "uv_async_init failed");
  store_wakeup_.data = this;
  store_wakeup_open_ = true;
  store_->set_wakeup([a = &store_wakeup_] { uv_async_send(a); });
  // The record first: commands and rigs the store holds are known before any rig connects.
  auto jobs = core_.load();
  if (!jobs) return make_error(jobs.error().code, "command store (" + std::string(store_->name()) + "): " +
                                                     jobs.error().detail);
  if (fabric_) fabric_->start(core_, [this] {
    if (context_ != nullptr) lws_cancel_service(context_);
  });
  int lws_levels = LLL_ERR | (log::enabled(log::Level::debug) ? LLL_WARN : 0);
  if (const char* env = std::getenv("FLEETLINK_LWS_LOG")) lws_levels = std::atoi(env);  // debugging lws itself
  lws_set_log_level(lws_levels, nullptr);

  lws_context_creation_info info{};
  void* foreign_loops[1] = {loop_};
  info.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_EXPLICIT_VHOSTS | LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
  info.foreign_loops = foreign_loops;
  info.port = CONTEXT_PORT_NO_LISTEN;
  info.user = &rig_;  // the rig protocol's callback finds its object here
  info.pt_serv_buf_size = 16 * 1024;
  // Header memory (~3 KB each with 2 KB of data) is only held during a handshake
  // (and by open control-API streams such as SSE): a bounded pool caps the peak of
  // a reconnect storm (later handshakes wait their turn), so the heap does not stay
  // fragmented at the storm's high-water mark, with room left for the control port.
  // Control connections take them too (one each while a request is read, or an
  // event stream open): room for both, so neither starves the other.
  info.max_http_header_pool = static_cast<unsigned short>(
      std::min<std::uint32_t>(cfg_.max_pending_handshakes + cfg_.control_max_connections, 65535));
  info.max_http_header_data = 2048;
  // PENDING_TIMEOUT_SSL_ACCEPT (and lws's other protocol-level waits) use this; the
  // default 5 s killed handshakes that were merely queued behind others in a storm.
  info.timeout_secs = cfg_.tls_accept_timeout_s;
  context_ = lws_create_context(&info);
  if (!context_) return make_error(Errc::io, "lws_create_context failed (is libwebsockets-evlib-uv installed?)");

  if (auto r = open_artifacts(); !r) return r;
  if (auto r = create_rig_vhosts(); !r) return r;

  ControlApiOptions copts;
  copts.host = cfg_.control.host;
  copts.port = cfg_.control.port;
  if (!cfg_.operators_file.empty() || !cfg_.control_token.empty()) {
    OperatorsParse ops = broker_operators(cfg_.operators_file, cfg_.control_token);
    if (!ops.errors.empty()) return make_error(Errc::invalid_argument, "operators: " + ops.errors.front());
    operators_ = std::make_unique<OperatorTable>(std::move(ops.table));
    copts.operators = operators_.get();
    FL_INFO("control API: %zu operator(s)%s", operators_->entries().size(),
            cfg_.operators_file.empty() ? " (the control token)" : (" from " + cfg_.operators_file).c_str());
  }
  if (!cfg_.audit_log.empty()) {
    auto audit = AuditLog::open_file(cfg_.audit_log);
    if (!audit) return make_error(audit.error().code, audit.error().detail);
    audit_ = std::move(*audit);
  } else {
    audit_ = std::make_unique<AuditLog>();  // to this log, "audit: "
  }
  copts.audit = audit_.get();
  copts.metrics_open = cfg_.metrics_open;
  copts.tls_cert = cfg_.control_cert;
  copts.tls_key = cfg_.control_key;
  copts.default_drain_window = std::chrono::milliseconds(cfg_.drain_window_ms);
  copts.store = store_.get();
  copts.artifacts = artifacts_.get();
  if (artifact_s3_) {
    copts.artifact_s3_url = [target = &*artifact_s3_](const ArtifactInfo& a) {
      const auto now = std::chrono::duration_cast<std::chrono::seconds>(
          std::chrono::system_clock::now().time_since_epoch());
      return target->presign("GET", a.s3_key, static_cast<std::uint64_t>(now.count()));
    };
  }
  copts.reloader = this;
  // The unfinished jobs go on: the control plane runs them, from the records the store loaded.
  auto cv = create_control_vhost(context_, copts, core_, metrics_, *jobs, /*own_listener=*/true);
  if (!cv) return make_error(Errc::io, "control API on " + cfg_.control.to_string() + ": " + cv.error().detail);
  control_vhost_ = *cv;
  control_listener_ = std::make_unique<ControlListener>(
      loop_, ControlListener::Settings{cfg_.control_max_connections, cfg_.control_idle_timeout_ms}, observer_);
  const bool https = !copts.tls_cert.empty() && !copts.tls_key.empty();
  if (auto r = control_listener_->open(control_vhost_, cfg_.control, /*own_accept=*/!https); !r)
    return make_error(Errc::io, "control API: " + r.error().detail);
  attach_control_listener(control_vhost_, control_listener_.get());

  core_.set_transport_ready(true);
  start_timers_and_signals();
  return {};
}

Expected<void> BrokerApp::open_artifacts() {
  // Memory-only brokers (--store none, benchmarks) keep no files unless told where.
  std::string dir = cfg_.artifact_dir;
  if (dir.empty() && cfg_.store != "none") dir = cfg_.state_dir + "/artifacts";
  if (dir.empty()) {
    FL_INFO("artifacts: off (no --artifact-dir with --store none): uploads are refused");
    return {};
  }
  ArtifactLimits limits;
  limits.max_artifact_bytes = std::uint64_t{cfg_.artifact_max_mib} << 20;
  limits.max_command_bytes = std::uint64_t{cfg_.artifact_command_max_mib} << 20;
  limits.max_total_bytes = std::uint64_t{cfg_.artifact_store_max_mib} << 20;
  limits.max_age_ms = std::uint64_t{cfg_.artifact_retention_days} * 24 * 3600 * 1000;
  limits.max_uploads = cfg_.artifact_max_uploads;
  auto opened = ArtifactStore::open(dir, limits);
  if (auto* no = std::get_if<ArtifactError>(&opened)) return make_error(Errc::io, no->detail);
  artifacts_ = std::move(std::get<std::unique_ptr<ArtifactStore>>(opened));
  artifacts_->prune(clock_.wall_ms());
  if (!cfg_.artifact_s3_endpoint.empty()) {
    // The keys are read from files: a secret on the command line is in every `ps`.
    auto read_key = [](const std::string& path, const char* option, std::string& out) -> Expected<void> {
      std::ifstream in(path);
      if (!in) return make_error(Errc::io, std::string(option) + " '" + path + "' cannot be read");
      std::stringstream ss;
      ss << in.rdbuf();
      out = trimmed(ss.str());
      if (out.empty()) return make_error(Errc::invalid_argument, std::string(option) + " '" + path + "' is empty");
      return {};
    };
    s3::TargetSettings s;
    s.endpoint = cfg_.artifact_s3_endpoint;
    s.bucket = cfg_.artifact_s3_bucket;
    s.region = cfg_.artifact_s3_region;
    s.prefix = cfg_.artifact_s3_prefix;
    s.path_style = cfg_.artifact_s3_addressing != "virtual";
    s.url_ttl_s = cfg_.artifact_s3_url_ttl_s;
    if (auto r = read_key(cfg_.artifact_s3_access_key_file, "--artifact-s3-access-key-file", s.credentials.access_key); !r)
      return r;
    if (auto r = read_key(cfg_.artifact_s3_secret_key_file, "--artifact-s3-secret-key-file", s.credentials.secret_key); !r)
      return r;
    std::string why;
    artifact_s3_ = s3::Target::make(std::move(s), why);
    if (!artifact_s3_) return make_error(Errc::invalid_argument, why);
    FL_INFO("artifacts: rigs upload to the S3 store %s (keys %s/<cmd_id>/<name>, URLs valid %u s); records in %s",
            artifact_s3_->describe().c_str(), cfg_.artifact_s3_prefix.c_str(), cfg_.artifact_s3_url_ttl_s, dir.c_str());
  }
  artifact_endpoint_ = std::make_unique<net::ArtifactEndpoint>(*artifacts_, core_,
                                                               artifact_s3_ ? &*artifact_s3_ : nullptr, loop_);
  rig_.attach_artifacts(artifact_endpoint_.get());
  FL_INFO("artifacts: %s (%llu MiB stored; at most %u MiB each, %u MiB per command, %u MiB in all, %u days)",
          dir.c_str(), static_cast<unsigned long long>(artifacts_->total_bytes() >> 20), cfg_.artifact_max_mib,
          cfg_.artifact_command_max_mib, cfg_.artifact_store_max_mib, cfg_.artifact_retention_days);
  return {};
}

Expected<void> BrokerApp::create_rig_vhosts() {
  // The CAs, CRLs, certificate and key, loaded and checked here (lws is given the
  // same files, and the callback that sets up its SSL_CTX installs this).
  auto trust = load_rig_trust(tls_files(), std::time(nullptr));
  if (!trust) return make_error(trust.error().code, trust.error().detail);
  for (const std::string& w : (*trust)->warnings()) FL_WARN("rig TLS: %s", w.c_str());
  if (!cfg_.crl.empty())
    FL_INFO("rig TLS: %zu CRL(s) from %s, %zu revoked serial(s); checked for %s", (*trust)->summary().crls,
            cfg_.crl.c_str(), (*trust)->summary().revoked,
            (*trust)->summary().crl_check_all ? "every certificate of a chain" : "rig certificates");
  rig_.set_trust(*trust);
  observer_.loaded(clock_.wall_ms());
  RigTlsSettings tls;
  tls.ticket_lifetime_s = cfg_.tls_ticket_lifetime_s;
  if (!cfg_.tls_ticket_key_file.empty()) {
    auto key = load_or_create_ticket_key(cfg_.tls_ticket_key_file);
    if (!key) return make_error(key.error().code, key.error().detail);
    tls.ticket_key = *key;
  }
  rig_.set_tls(std::move(tls));
  if (cfg_.rig_token != "off") {
    net::RigTokenRules rules;
    rules.max_lifetime_s = cfg_.rig_token_max_lifetime_s;
    rules.leeway_s = cfg_.rig_token_leeway_s;
    rules.audience = cfg_.rig_token_audience;
    auto keys = net::JwtVerifier::load(cfg_.rig_token_keys, std::move(rules));
    if (!keys) return make_error(keys.error().code, "--rig-token-keys: " + keys.error().detail);
    rig_tokens_ = std::make_unique<net::JwtVerifier>(std::move(*keys));
    rig_.set_rig_tokens(rig_tokens_.get());
    FL_INFO("rig tokens %s: %zu key(s) from %s", cfg_.rig_token.c_str(), rig_tokens_->key_count(),
            cfg_.rig_token_keys.c_str());
  }
  lws_protocols* protocols = rig_.protocols(cfg_.max_frame_bytes, cfg_.ws_rx_buffer_bytes);

  // The rig listener: TLS with a required client certificate, fed by the accept gate.
  lws_context_creation_info vh{};
  vh.vhost_name = "agents";
  vh.port = CONTEXT_PORT_NO_LISTEN_SERVER;
  vh.protocols = protocols;
  // DISABLE_OS_CA_CERTS: the broker never dials out, so lws need not parse the whole
  // system CA bundle into the vhost's client SSL_CTX at every start (finding 4).
  vh.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT |
               LWS_SERVER_OPTION_REQUIRE_VALID_OPENSSL_CLIENT_CERT | LWS_SERVER_OPTION_DISABLE_OS_CA_CERTS;
  vh.ssl_cert_filepath = cfg_.cert.c_str();
  vh.ssl_private_key_filepath = cfg_.key.c_str();
  vh.ssl_ca_filepath = cfg_.ca.c_str();
  vh.retry_and_idle_policy = &g_no_lws_validity;
  // lws drops a socket holding a header slot this long without a request (default 10 s,
  // counted from adoption): past the gate's own handshake deadline, which decides.
  vh.timeout_secs_ah_idle = cfg_.handshake_timeout_ms / 1000 + 2;
  agent_vhost_ = lws_create_vhost(context_, &vh);
  if (!agent_vhost_)
    return make_error(Errc::io, "cannot create the TLS listener: check --cert " + cfg_.cert + " --key " + cfg_.key +
                                    " --ca " + cfg_.ca);
  // Installed again now that lws has loaded the files itself (the SSL_CTX then holds
  // exactly what was checked); it fails if the SSL_CTX was not captured for reloads.
  if (!rig_.replace_trust(rig_.trust()))
    return make_error(Errc::io, "the TLS listener's context was not set up (no SSL_CTX from libwebsockets)");
  if (auto r = gate_.open(agent_vhost_, cfg_.listen, true); !r) return r;

  if (!cfg_.plain_listen.host.empty()) {
    lws_context_creation_info pv{};
    pv.vhost_name = "agents-plain";
    pv.port = CONTEXT_PORT_NO_LISTEN_SERVER;
    pv.protocols = protocols;
    pv.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_DISABLE_OS_CA_CERTS;
    pv.retry_and_idle_policy = &g_no_lws_validity;
    pv.timeout_secs_ah_idle = cfg_.handshake_timeout_ms / 1000 + 2;
    plain_vhost_ = lws_create_vhost(context_, &pv);
    if (!plain_vhost_) return make_error(Errc::io, "cannot create the plain ws vhost");
    if (auto r = gate_.open(plain_vhost_, cfg_.plain_listen, false); !r) return r;
    FL_WARN("plain ws listener on %s:%d: rig identities are NOT checked against certificates (bench/dev only)",
            cfg_.plain_listen.host.c_str(), gate_.plain_port());
  }
  return {};
}

void BrokerApp::start_timers_and_signals() {
  uv_timer_init(loop_, &resume_timer_);
  resume_timer_.data = this;
  uv_timer_init(loop_, &sweep_timer_);
  sweep_timer_.data = this;
  const std::uint64_t slice_ms = core_.sweep_interval_ms();
  uv_timer_start(
      &sweep_timer_,
      [](uv_timer_t* t) {
        static_cast<BrokerApp*>(t->data)->core_.sweep();
        log::flush_suppressed();  // the counts of repeated warnings whose interval ended
      },
      slice_ms, slice_ms);
  uv_timer_init(loop_, &store_timer_);
  store_timer_.data = this;
  // The pieces of a light interval (FleetCore::commit_if_due) run from an idle
  // handle: once per turn of the loop, with the I/O that came in handled
  // between two pieces. A zero timer restarted from its own callback would run
  // again at once (libuv 1.44, Debian 12's), before any I/O.
  uv_idle_init(loop_, &store_slices_);
  store_slices_.data = this;
  uv_timer_start(
      &store_timer_,
      [](uv_timer_t* t) {
        auto* self = static_cast<BrokerApp*>(t->data);
        if (!self->core_.commit_if_due()) return;
        uv_idle_start(&self->store_slices_, [](uv_idle_t* h) {
          if (!static_cast<BrokerApp*>(h->data)->core_.commit_more()) uv_idle_stop(h);
        });
      },
      cfg_.store_commit_interval_ms, cfg_.store_commit_interval_ms);
  uv_timer_init(loop_, &prune_timer_);
  prune_timer_.data = this;
  uv_timer_start(
      &prune_timer_,
      [](uv_timer_t* t) {
        auto* self = static_cast<BrokerApp*>(t->data);
        RetentionPolicy policy;
        policy.max_age_ms = std::uint64_t{self->cfg_.store_retention_days} * 24 * 3600 * 1000;
        policy.max_commands = self->cfg_.store_max_commands;
        if (const std::size_t gone = self->store_->prune(policy, self->clock_.wall_ms()); gone > 0)
          FL_INFO("command store: %zu finished commands and jobs past the retention removed", gone);
        if (self->artifacts_) {
          if (const std::size_t gone = self->artifacts_->prune(self->clock_.wall_ms()); gone > 0)
            FL_INFO("artifacts: %zu files past the retention removed", gone);
        }
      },
      kPruneEveryMs, kPruneEveryMs);
  auto on_signal = [](uv_signal_t* s, int signum) {
    auto* self = static_cast<BrokerApp*>(s->data);
    if (self->core_.draining()) {
      FL_WARN("signal %d during drain: exiting now", signum);
      self->stop_loop(0);
      return;
    }
    FL_INFO("signal %d: draining over %u ms", signum, self->cfg_.drain_window_ms);
    self->core_.start_drain(std::chrono::milliseconds(self->cfg_.drain_window_ms));
  };
  uv_signal_init(loop_, &sigterm_);
  sigterm_.data = this;
  uv_signal_start(&sigterm_, on_signal, SIGTERM);
  uv_signal_init(loop_, &sigint_);
  sigint_.data = this;
  uv_signal_start(&sigint_, on_signal, SIGINT);
  uv_signal_init(loop_, &sighup_);
  sighup_.data = this;
  uv_signal_start(
      &sighup_, [](uv_signal_t* sig, int) { static_cast<BrokerApp*>(sig->data)->reload("SIGHUP"); }, SIGHUP);
  uv_timer_init(loop_, &recheck_timer_);
  recheck_timer_.data = this;
  handles_open_ = true;
}

Expected<std::optional<OperatorTable>> BrokerApp::read_operators() const {
  if (!operators_) return std::optional<OperatorTable>();  // an open API stays open: restart to add tokens
  std::string token = cfg_.control_token;
  if (!cfg_.control_token_file.empty()) {
    std::ifstream in(cfg_.control_token_file);
    if (!in) return make_error(Errc::io, "--control-token-file '" + cfg_.control_token_file + "' cannot be read");
    std::stringstream ss;
    ss << in.rdbuf();
    token = trimmed(ss.str());
    if (token.empty())
      return make_error(Errc::invalid_argument, "--control-token-file '" + cfg_.control_token_file +
                                                    "' is empty: the control API would take requests without a token");
  }
  OperatorsParse ops = broker_operators(cfg_.operators_file, token);
  if (!ops.errors.empty()) return make_error(Errc::invalid_argument, "operators: " + ops.errors.front());
  return std::optional<OperatorTable>(std::move(ops.table));
}

ReloadOutcome BrokerApp::reload(std::string_view trigger) {
  ReloadOutcome out;
  auto failed = [&](std::string detail) {
    out.detail = std::move(detail);
    observer_.reload_failed(trigger, out.detail);
    return out;
  };
  // Everything is read and checked first: a failure leaves all of it as it was.
  auto trust = load_rig_trust(tls_files(), std::time(nullptr));
  if (!trust) return failed(trust.error().detail);
  const std::shared_ptr<const RigTrust> before = rig_.trust();
  if (before && !(*trust)->same_key_type_as(*before))
    return failed("--key '" + cfg_.key + "' is another kind of key (EC, RSA, ...) than the one in use: restart the "
                  "broker to change the kind of key");
  auto operators = read_operators();
  if (!operators) return failed(operators.error().detail);

  if (auto r = rig_.replace_trust(*trust); !r) return failed(r.error().detail);
  out.ok = true;
  out.changes = trust_changes(before.get(), **trust, tls_files());
  out.warnings = (*trust)->warnings();
  if (*operators && operators_) {
    std::string change = operators_change(*operators_, **operators);
    if (!change.empty())
      out.changes.push_back("operators" + (cfg_.operators_file.empty() ? std::string() : " from " + cfg_.operators_file) +
                            ": " + change);
    operators_->replace_with(std::move(**operators));
  }
  // Open connections were verified under the old CAs and CRLs: each is checked
  // again, a slice per tick, and closed 4401 if the new ones refuse it.
  if (!before || !(*trust)->same_trust_as(*before)) {
    core_.start_recheck([this](const RigSession& s) { return rig_.certificate_refusal(s); });
    out.rigs_to_check = core_.connection_count();
    if (handles_open_ && !uv_is_active(reinterpret_cast<uv_handle_t*>(&recheck_timer_)))
      uv_timer_start(
          &recheck_timer_,
          [](uv_timer_t* t) {
            auto* self = static_cast<BrokerApp*>(t->data);
            if (!self->core_.recheck_slice(kRecheckSlice)) uv_timer_stop(t);
          },
          0, kRecheckEveryMs);
  }
  observer_.reload_succeeded(trigger, out.changes, out.warnings, clock_.wall_ms());
  return out;
}

void BrokerApp::start_resume_timer() {
  if (!handles_open_ || uv_is_active(reinterpret_cast<uv_handle_t*>(&resume_timer_))) return;
  uv_timer_start(
      &resume_timer_,
      [](uv_timer_t* t) {
        auto* self = static_cast<BrokerApp*>(t->data);
        // Let lws deliver what it buffered while reading was paused.
        if (self->core_.resume_paused() > 0) lws_cancel_service(self->context_);
        if (!self->core_.has_paused()) uv_timer_stop(t);
      },
      kResumeCheckMs, kResumeCheckMs);
}

void BrokerApp::stop_loop(int code) {
  if (stopping_) return;
  stopping_ = true;
  exit_code_ = code;
  uv_stop(loop_);
}

void BrokerApp::shutdown() {
  // Answers waiting for the store get its outcome while the control API is there.
  if (store_ && control_vhost_) core_.flush_store();
  if (control_vhost_) shutdown_control_api(control_vhost_);
  control_vhost_ = nullptr;
  if (control_listener_) control_listener_->close();
  gate_.close();
  if (handles_open_) {
    handles_open_ = false;
    uv_timer_stop(&sweep_timer_);
    close_handle(&sweep_timer_);
    uv_timer_stop(&resume_timer_);
    close_handle(&resume_timer_);
    uv_timer_stop(&store_timer_);
    close_handle(&store_timer_);
    uv_idle_stop(&store_slices_);
    close_handle(&store_slices_);
    uv_timer_stop(&prune_timer_);
    close_handle(&prune_timer_);
    uv_signal_stop(&sigterm_);
    close_handle(&sigterm_);
    uv_signal_stop(&sigint_);
    close_handle(&sigint_);
    uv_signal_stop(&sighup_);
    close_handle(&sighup_);
    uv_timer_stop(&recheck_timer_);
    close_handle(&recheck_timer_);
  }
  if (context_) {
    lws_context* c = context_;
    context_ = nullptr;
    lws_context_destroy(c);
    // lws closes its libuv handles asynchronously on the foreign loop.
    for (int i = 0; i < 16 && uv_run(loop_, UV_RUN_NOWAIT); ++i) {
    }
  }
  // Its connections go after the rigs' (whose closes release their entries).
  if (fabric_) {
    core_.set_mesh(nullptr);
    for (int i = 0; i < 4 && uv_run(loop_, UV_RUN_NOWAIT); ++i) {
    }
  }
  // What the last turns and the closing connections changed (rigs' last_seen).
  if (store_) {
    core_.flush_store();
    store_->set_wakeup({});
  }
  if (store_wakeup_open_) {
    store_wakeup_open_ = false;
    close_handle(&store_wakeup_);
  }
  uv_run(loop_, UV_RUN_NOWAIT);
}

}  // namespace fleetlink::broker
