#include "control_client.hpp"

#include <curl/curl.h>

#include <utility>

namespace fleetctl {

struct ControlClient::Impl {
  CURL* curl = nullptr;
};

namespace {

std::size_t append_body(char* data, std::size_t size, std::size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

struct StreamSink {
  const std::function<bool(std::string_view)>* on_data;
  bool stopped = false;
  CURL* curl = nullptr;  // set: a 3xx answer's body is dropped (it is no artifact)
};

std::size_t stream_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto* sink = static_cast<StreamSink*>(user);
  if (sink->curl != nullptr) {
    long status = 0;
    curl_easy_getinfo(sink->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 300 && status < 400) return size * n;
  }
  if (!(*sink->on_data)(std::string_view(data, size * n))) {
    sink->stopped = true;
    return 0;  // makes curl abort the transfer
  }
  return size * n;
}

std::string& ca_file() {
  static std::string path;
  return path;
}

void set_tls(CURL* curl) {
  if (!ca_file().empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, ca_file().c_str());
}

std::string strip_trailing_slash(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

}  // namespace

void ControlClient::set_ca_file(std::string path) { ca_file() = std::move(path); }

ControlClient::ControlClient(std::string base_url, std::string token)
    : impl_(std::make_unique<Impl>()),
      base_url_(strip_trailing_slash(std::move(base_url))),
      token_(std::move(token)) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  impl_->curl = curl_easy_init();
}

ControlClient::~ControlClient() {
  if (impl_->curl != nullptr) curl_easy_cleanup(impl_->curl);
  curl_global_cleanup();
}

std::string ControlClient::escape(std::string_view segment) {
  if (impl_->curl == nullptr) return std::string(segment);
  char* out = curl_easy_escape(impl_->curl, segment.data(), static_cast<int>(segment.size()));
  if (out == nullptr) return std::string(segment);
  std::string s(out);
  curl_free(out);
  return s;
}

std::optional<HttpResult> ControlClient::call(std::string_view method, std::string_view path,
                                              const std::string& json_body,
                                              TransportError& error, long timeout_ms) {
  CURL* curl = impl_->curl;
  if (curl == nullptr) {
    error.detail = "libcurl could not be initialised";
    return std::nullopt;
  }
  curl_easy_reset(curl);  // keeps the connection cache: keep-alive survives
  const std::string url = base_url_ + std::string(path);
  HttpResult result;
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Accept: application/json");
  std::string auth;
  if (!token_.empty()) {
    auth = "Authorization: Bearer " + token_;
    headers = curl_slist_append(headers, auth.c_str());
  }
  const std::string method_str(method);
  if (method_str == "POST") {
    headers = curl_slist_append(headers, "Content-Type: application/json");
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, json_body.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(json_body.size()));
  } else if (method_str != "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method_str.c_str());
  }
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  set_tls(curl);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &result.body);
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);

  const CURLcode rc = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  if (rc != CURLE_OK) {
    error.detail = std::string(errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc)) + " (" +
                   url + ")";
    return std::nullopt;
  }
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &result.status);
  return result;
}

long ControlClient::stream(std::string_view path,
                           const std::function<bool(std::string_view)>& on_data,
                           TransportError& error, long timeout_ms, std::string* redirect) {
  return stream_impl(base_url_ + std::string(path), true, on_data, error, timeout_ms, redirect);
}

long ControlClient::stream_url(const std::string& url, const std::function<bool(std::string_view)>& on_data,
                               TransportError& error) {
  return stream_impl(url, false, on_data, error, 0, nullptr);
}

long ControlClient::stream_impl(const std::string& url, bool to_broker,
                                const std::function<bool(std::string_view)>& on_data, TransportError& error,
                                long timeout_ms, std::string* redirect) {
  timed_out_ = false;
  CURL* curl = impl_->curl;
  if (curl == nullptr) {
    error.detail = "libcurl could not be initialised";
    return 0;
  }
  curl_easy_reset(curl);
  curl_slist* headers = to_broker ? curl_slist_append(nullptr, "Accept: text/event-stream") : nullptr;
  std::string auth;
  if (to_broker && !token_.empty()) {
    auth = "Authorization: Bearer " + token_;
    headers = curl_slist_append(headers, auth.c_str());
  }
  StreamSink sink{&on_data, false, redirect != nullptr ? curl : nullptr};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  if (to_broker) set_tls(curl);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  if (timeout_ms > 0) curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, stream_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  const CURLcode rc = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  if (redirect != nullptr && status >= 300 && status < 400) {
    char* location = nullptr;
    curl_easy_getinfo(curl, CURLINFO_REDIRECT_URL, &location);
    *redirect = location != nullptr ? location : "";
  }
  if (rc == CURLE_OPERATION_TIMEDOUT && status == 200) {
    timed_out_ = true;
    return status;
  }
  if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && sink.stopped)) {
    error.detail = std::string(errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc)) + " (" +
                   url + ")";
  }
  return status;
}

}  // namespace fleetctl
