#pragma once
// A small blocking HTTP client for the broker's control API (libcurl). One
// connection is reused across calls (keep-alive), so polling is cheap.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace fleetctl {

struct HttpResult {
  long status = 0;
  std::string body;
};

struct TransportError {
  std::string detail;   // "Couldn't connect to server (http://127.0.0.1:8080/v1/rigs)"
};

class ControlClient {
 public:
  ControlClient(std::string base_url, std::string token);
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // Sends one request; `error` is set (and nullopt returned) when no HTTP
  // answer arrived at all.
  std::optional<HttpResult> call(std::string_view method, std::string_view path,
                                 const std::string& json_body, TransportError& error,
                                 long timeout_ms = 30000);

  // GET `path` and hand each received piece of the body to `on_data` until
  // the server closes, `on_data` returns false, or an error happens.
  // Returns the HTTP status (0 when there was none). timeout_ms > 0: it ends
  // then at the latest (timed_out() says so).
  long stream(std::string_view path, const std::function<bool(std::string_view)>& on_data,
              TransportError& error, long timeout_ms = 0);
  bool timed_out() const noexcept { return timed_out_; }

  // Percent-encodes one path segment (a rig id or cmd_id).
  std::string escape(std::string_view segment);

  const std::string& base_url() const noexcept { return base_url_; }

  // An https:// control URL: the broker's certificate is checked against this CA
  // bundle (PEM; fleetctl --ca) instead of the system's. Applies to every client
  // made after (fleetctl makes several: the calls, an event stream).
  static void set_ca_file(std::string path);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string base_url_;
  std::string token_;
  bool timed_out_ = false;
};

}  // namespace fleetctl
