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
  // redirect set: a 3xx answer's body is not handed on, and its Location is
  // put there (an artifact kept in an S3 store answers 307 to a presigned URL).
  long stream(std::string_view path, const std::function<bool(std::string_view)>& on_data,
              TransportError& error, long timeout_ms = 0, std::string* redirect = nullptr);
  // The same for an absolute URL elsewhere (a presigned one): no token is sent
  // and the system's CAs check an https server.
  long stream_url(const std::string& url, const std::function<bool(std::string_view)>& on_data,
                  TransportError& error);
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
  long stream_impl(const std::string& url, bool to_broker, const std::function<bool(std::string_view)>& on_data,
                   TransportError& error, long timeout_ms, std::string* redirect);
  std::unique_ptr<Impl> impl_;
  std::string base_url_;
  std::string token_;
  bool timed_out_ = false;
};

}  // namespace fleetctl
