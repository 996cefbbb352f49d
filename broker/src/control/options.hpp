#pragma once
// The control API's settings, as the router and its handlers see them.
#include <chrono>
#include <string>

namespace fleetlink::broker {

class BatchTable;

struct ControlApiOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0: pick a free port (read it with lws_get_vhost_listen_port)
  std::string token;               // empty = no auth; else "Authorization: Bearer <token>"
  // POST /v1/admin/drain without a window uses this (the broker's --drain-window-ms).
  std::chrono::milliseconds default_drain_window{10000};
  // Fan-out batches (POST /v1/commands, GET /v1/batches/{id}); set by the
  // control vhost, which owns the table. Null: those routes answer 503.
  BatchTable* batches = nullptr;
};

}  // namespace fleetlink::broker
