#include "s3/sigv4.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <ctime>

namespace fleetlink::broker::s3 {

namespace {

std::string hex(const unsigned char* p, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[p[i] >> 4]);
    out.push_back(kDigits[p[i] & 15]);
  }
  return out;
}

std::string sha256_hex(std::string_view s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (EVP_Digest(s.data(), s.size(), md, &n, EVP_sha256(), nullptr) != 1) return {};
  return hex(md, n);
}

std::string hmac(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
           data.size(), md, &n) == nullptr) {
    return {};
  }
  return std::string(reinterpret_cast<const char*>(md), n);
}

std::string date_of(std::uint64_t time_s) { return amz_date(time_s).substr(0, 8); }

std::string scope(const PresignRequest& r) {
  return date_of(r.time_s) + "/" + r.region + "/" + r.service + "/aws4_request";
}

// host and the request's own headers, sorted by name, as SigV4 lists them.
std::vector<std::pair<std::string, std::string>> signed_headers(const PresignRequest& r) {
  std::vector<std::pair<std::string, std::string>> h = r.headers;
  h.emplace_back("host", r.host);
  std::sort(h.begin(), h.end());
  return h;
}

std::string signed_header_names(const PresignRequest& r) {
  std::string out;
  for (const auto& [name, value] : signed_headers(r)) {
    if (!out.empty()) out += ';';
    out += name;
  }
  return out;
}

// The X-Amz-* query parameters but the signature, sorted, encoded: the
// canonical query string and the URL's query are the same text.
std::string query_without_signature(const PresignRequest& r, const Credentials& c) {
  std::vector<std::pair<std::string, std::string>> q = {
      {"X-Amz-Algorithm", "AWS4-HMAC-SHA256"},
      {"X-Amz-Credential", c.access_key + "/" + scope(r)},
      {"X-Amz-Date", amz_date(r.time_s)},
      {"X-Amz-Expires", std::to_string(r.expires_s)},
      {"X-Amz-SignedHeaders", signed_header_names(r)},
  };
  std::sort(q.begin(), q.end());
  std::string out;
  for (const auto& [k, v] : q) {
    if (!out.empty()) out += '&';
    out += uri_encode(k, false) + "=" + uri_encode(v, false);
  }
  return out;
}

std::string trimmed(std::string_view v) {
  const auto b = v.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  const auto e = v.find_last_not_of(" \t");
  return std::string(v.substr(b, e - b + 1));
}

}  // namespace

std::string uri_encode(std::string_view s, bool keep_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                            c == '_' || c == '.' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 15]);
    }
  }
  return out;
}

std::string amz_date(std::uint64_t time_s) {
  const std::time_t t = static_cast<std::time_t>(time_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  const std::size_t n = std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return std::string(buf, n);
}

std::string canonical_request(const PresignRequest& r, const Credentials& c) {
  std::string headers;
  for (const auto& [name, value] : signed_headers(r)) headers += name + ":" + trimmed(value) + "\n";
  // S3 encodes the path once (not twice, as other services do) and signs no
  // payload hash in a presigned URL: the body is whatever the holder sends.
  return r.method + "\n" + uri_encode(r.path.empty() ? "/" : r.path, true) + "\n" + query_without_signature(r, c) +
         "\n" + headers + "\n" + signed_header_names(r) + "\nUNSIGNED-PAYLOAD";
}

std::string string_to_sign(const PresignRequest& r, const Credentials& c) {
  return "AWS4-HMAC-SHA256\n" + amz_date(r.time_s) + "\n" + scope(r) + "\n" + sha256_hex(canonical_request(r, c));
}

std::string signature(const PresignRequest& r, const Credentials& c) {
  const std::string k_date = hmac("AWS4" + c.secret_key, date_of(r.time_s));
  const std::string k_region = hmac(k_date, r.region);
  const std::string k_service = hmac(k_region, r.service);
  const std::string k_signing = hmac(k_service, "aws4_request");
  const std::string sig = hmac(k_signing, string_to_sign(r, c));
  return hex(reinterpret_cast<const unsigned char*>(sig.data()), sig.size());
}

std::string presign_url(const PresignRequest& r, const Credentials& c) {
  return r.scheme + "://" + r.host + uri_encode(r.path.empty() ? "/" : r.path, true) + "?" +
         query_without_signature(r, c) + "&X-Amz-Signature=" + signature(r, c);
}

}  // namespace fleetlink::broker::s3
