#pragma once
// Admission: the broker owns accept(). Its listening socket has SO_REUSEPORT so
// several broker processes can share one port; a uv_poll_t watches it and every
// accepted socket is handed to libwebsockets (lws_adopt_socket_vhost), TLS included.
// The accept-rate token bucket itself is applied at the HTTP upgrade (see
// Broker::on_confirm_upgrade), where a 503 with Retry-After can still be answered.
#include <uv.h>

#include <cstdint>
#include <functional>
#include <string>

#include "config.hpp"
#include "fleetlink/expected.hpp"

struct lws_vhost;

namespace fleetlink::broker {

class AdmissionListener {
 public:
  // Called for each accepted fd; returns false if it could not be adopted (fd closed by callee).
  using OnAccept = std::function<void(int fd)>;

  AdmissionListener(uv_loop_t* loop, OnAccept on_accept) : loop_(loop), on_accept_(std::move(on_accept)) {}
  ~AdmissionListener();
  AdmissionListener(const AdmissionListener&) = delete;
  AdmissionListener& operator=(const AdmissionListener&) = delete;

  // Bind (SO_REUSEADDR + SO_REUSEPORT), listen, start watching.
  Expected<void> open(const HostPort& where, int backlog = 4096);
  int port() const noexcept { return port_; }
  // Stop accepting and close the socket (drain). Idempotent.
  void close();

 private:
  static void on_readable(uv_poll_t* handle, int status, int events);
  uv_loop_t* loop_;
  OnAccept on_accept_;
  uv_poll_t* poll_ = nullptr;   // heap: freed in the uv close callback
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace fleetlink::broker
