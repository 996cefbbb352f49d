#pragma once
// AWS Signature Version 4 for query-string ("presigned") URLs of an
// S3-compatible store: the broker hands a rig a URL it may PUT one artifact to
// (and fleetctl one it may GET it from) without the rig ever holding the
// store's credentials (docs/PROTOCOL.md §10.1).
//
// Pure computation: strings in, a URL out; HMAC-SHA256 and SHA-256 from
// OpenSSL. Checked against AWS's published presigned-URL example
// (tests/unit/broker/s3/test_sigv4.cpp) so a wrong canonical form cannot pass
// silently: a lenient test server would accept it.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fleetlink::broker::s3 {

struct Credentials {
  std::string access_key;
  std::string secret_key;
};

struct PresignRequest {
  std::string method;                // "PUT", "GET", "HEAD"
  std::string scheme = "https";      // "http" or "https"
  std::string host;                  // as in the Host header: "host" or "host:port"
  std::string path;                  // "/bucket/key" (path-style) or "/key"; unencoded, '/' separates segments
  std::string region = "us-east-1";
  std::string service = "s3";
  std::uint64_t time_s = 0;          // the signing time, Unix seconds (UTC)
  std::uint32_t expires_s = 3600;    // 1..604800
  // Headers the request must carry with exactly these values, besides host
  // (e.g. content-length, x-amz-meta-*). Names lower-case.
  std::vector<std::pair<std::string, std::string>> headers;
};

// RFC 3986 percent-encoding as SigV4 wants it: unreserved characters kept,
// everything else %XX (upper-case hex); '/' kept when keep_slash.
std::string uri_encode(std::string_view s, bool keep_slash);

// "20130524T000000Z" for a Unix time.
std::string amz_date(std::uint64_t time_s);

// The pieces, exposed for the tests: the canonical request, the string to
// sign, and the signature (lower-case hex).
std::string canonical_request(const PresignRequest& r, const Credentials& c);
std::string string_to_sign(const PresignRequest& r, const Credentials& c);
std::string signature(const PresignRequest& r, const Credentials& c);

// The whole presigned URL: scheme://host/path?X-Amz-...&X-Amz-Signature=...
std::string presign_url(const PresignRequest& r, const Credentials& c);

}  // namespace fleetlink::broker::s3
