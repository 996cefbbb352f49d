#pragma once
// Where the broker sends artifacts when an S3-compatible store is configured
// (--artifact-s3-*; docs/OPERATIONS.md §12): the endpoint, bucket, key prefix
// and credentials, and the presigned URLs made from them. An object's key is
// <prefix>/<cmd_id>/<name>.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "s3/sigv4.hpp"

namespace fleetlink::broker::s3 {

struct TargetSettings {
  std::string endpoint;             // "http://127.0.0.1:9000" or "https://s3.example.net"
  std::string bucket;
  std::string region = "us-east-1";
  std::string prefix = "fleetlink";  // "" : keys start with the cmd_id
  bool path_style = true;           // URL /bucket/key on the endpoint; false: bucket.host/key
  Credentials credentials;
  std::uint32_t url_ttl_s = 900;    // how long a presigned URL is valid
};

class Target {
 public:
  // nullopt and why when the endpoint or bucket cannot make a URL.
  static std::optional<Target> make(TargetSettings settings, std::string& error);

  std::string object_key(std::string_view cmd_id, std::string_view name) const;
  // A presigned URL for method on key, signed at now_s; headers (lower-case
  // names) must then be sent with exactly these values.
  std::string presign(std::string method, std::string_view key, std::uint64_t now_s,
                      std::vector<std::pair<std::string, std::string>> headers = {}) const;

  const TargetSettings& settings() const noexcept { return settings_; }
  // "http://127.0.0.1:9000/bucket" : for logs and listings (no credentials).
  std::string describe() const;

 private:
  explicit Target(TargetSettings s) : settings_(std::move(s)) {}
  TargetSettings settings_;
  std::string scheme_;
  std::string host_;  // host[:port], with the bucket in front when not path-style
};

}  // namespace fleetlink::broker::s3
