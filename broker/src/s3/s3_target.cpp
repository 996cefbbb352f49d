#include "s3/s3_target.hpp"

#include <algorithm>

namespace fleetlink::broker::s3 {

namespace {

// S3's rules for a bucket name, enough to keep it a single path segment and a DNS label.
bool valid_bucket(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  return std::all_of(b.begin(), b.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
  });
}

}  // namespace

std::optional<Target> Target::make(TargetSettings s, std::string& error) {
  std::string scheme;
  std::string rest;
  if (s.endpoint.rfind("https://", 0) == 0) {
    scheme = "https";
    rest = s.endpoint.substr(8);
  } else if (s.endpoint.rfind("http://", 0) == 0) {
    scheme = "http";
    rest = s.endpoint.substr(7);
  } else {
    error = "--artifact-s3-endpoint must start with http:// or https:// (got '" + s.endpoint + "')";
    return std::nullopt;
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.empty() || rest.find_first_of("/?#@ ") != std::string::npos) {
    error = "--artifact-s3-endpoint is scheme://host[:port] only (got '" + s.endpoint + "')";
    return std::nullopt;
  }
  if (!valid_bucket(s.bucket)) {
    error = "--artifact-s3-bucket must be 3..63 of [a-z0-9.-] (got '" + s.bucket + "')";
    return std::nullopt;
  }
  if (s.credentials.access_key.empty() || s.credentials.secret_key.empty()) {
    error = "the S3 store needs an access key and a secret key (--artifact-s3-access-key-file, --artifact-s3-secret-key-file)";
    return std::nullopt;
  }
  if (s.url_ttl_s < 1 || s.url_ttl_s > 604800) {
    error = "--artifact-s3-url-ttl-s must be 1..604800 (SigV4's limit is a week)";
    return std::nullopt;
  }
  while (!s.prefix.empty() && s.prefix.back() == '/') s.prefix.pop_back();
  while (!s.prefix.empty() && s.prefix.front() == '/') s.prefix.erase(0, 1);
  Target t(std::move(s));
  t.scheme_ = scheme;
  t.host_ = t.settings_.path_style ? rest : t.settings_.bucket + "." + rest;
  return t;
}

std::string Target::object_key(std::string_view cmd_id, std::string_view name) const {
  std::string key = settings_.prefix.empty() ? std::string() : settings_.prefix + "/";
  key.append(cmd_id);
  key += '/';
  key.append(name);
  return key;
}

std::string Target::presign(std::string method, std::string_view key, std::uint64_t now_s,
                            std::vector<std::pair<std::string, std::string>> headers) const {
  PresignRequest r;
  r.method = std::move(method);
  r.scheme = scheme_;
  r.host = host_;
  r.path = (settings_.path_style ? "/" + settings_.bucket + "/" : std::string("/")) + std::string(key);
  r.region = settings_.region;
  r.time_s = now_s;
  r.expires_s = settings_.url_ttl_s;
  r.headers = std::move(headers);
  return presign_url(r, settings_.credentials);
}

std::string Target::describe() const {
  return scheme_ + "://" + host_ + (settings_.path_style ? "/" + settings_.bucket : std::string());
}

}  // namespace fleetlink::broker::s3
