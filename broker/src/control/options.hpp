#pragma once
// The control API's settings, as the router and its handlers see them.
#include <chrono>
#include <functional>
#include <string>

namespace fleetlink::broker {

class ArtifactStore;
struct ArtifactInfo;
class AuditLog;
class Authenticator;
class CommandStore;
class JobTable;
class Reloader;

struct ControlApiOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0: pick a free port (read it with lws_get_vhost_listen_port)
  std::string token;               // empty = no auth; else "Authorization: Bearer <token>" (operator "token")
  // The operators (name, role, token hash; app/operators.hpp): set, it is asked
  // instead of `token`. Must outlive the control vhost.
  const Authenticator* operators = nullptr;
  // One line per mutating call (control/audit.hpp); null: none written. Must outlive the vhost.
  AuditLog* audit = nullptr;
  // GET /metrics without a token even when tokens are configured (Prometheus).
  bool metrics_open = false;
  // Both set: the control listener is HTTPS with this certificate and key (PEM files).
  std::string tls_cert;
  std::string tls_key;
  // POST /v1/admin/drain without a window uses this (the broker's --drain-window-ms).
  std::chrono::milliseconds default_drain_window{10000};
  // The broker's command store: jobs are recorded there, and GET /v1/jobs lists
  // their history from it. Null: jobs live in memory only.
  CommandStore* store = nullptr;
  // Fan-out jobs (POST /v1/jobs, POST /v1/commands, GET /v1/jobs/{id}); set by
  // the control vhost, which owns the table. Null: creating one answers 503.
  JobTable* jobs = nullptr;
  // Artifacts rigs uploaded (GET /v1/commands/{id}/artifacts...). Null: none kept.
  const ArtifactStore* artifacts = nullptr;
  // A presigned GET URL for an artifact kept in the S3-compatible store
  // (ArtifactInfo::s3_key): its GET answers 307 there. Empty: no S3 store configured.
  std::function<std::string(const ArtifactInfo&)> artifact_s3_url;
  // POST /v1/admin/reload (control/reload.hpp). Null: that route answers 503.
  Reloader* reloader = nullptr;
};

}  // namespace fleetlink::broker
