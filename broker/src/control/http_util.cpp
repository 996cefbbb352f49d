#include "control/http_util.hpp"

#include <cctype>

namespace fleetlink::broker {
namespace {

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '%' && i + 2 < s.size()) {
      const int hi = hex_value(s[i + 1]);
      const int lo = hex_value(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && c == '+' ? ' ' : c);
  }
  return out;
}

}  // namespace

std::string percent_decode(std::string_view s) { return decode(s, false); }

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> segments;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (end > start) segments.push_back(percent_decode(path.substr(start, end - start)));
    start = end + 1;
  }
  return segments;
}

std::map<std::string, std::string> parse_query(std::string_view query) {
  std::map<std::string, std::string> out;
  std::size_t start = 0;
  while (start < query.size()) {
    std::size_t end = query.find('&', start);
    if (end == std::string_view::npos) end = query.size();
    const std::string_view pair = query.substr(start, end - start);
    if (!pair.empty()) {
      const std::size_t eq = pair.find('=');
      if (eq == std::string_view::npos) {
        out[decode(pair, true)] = "";
      } else {
        out[decode(pair.substr(0, eq), true)] = decode(pair.substr(eq + 1), true);
      }
    }
    start = end + 1;
  }
  return out;
}

std::optional<std::string_view> bearer_token_of(std::string_view authorization) noexcept {
  constexpr std::string_view kScheme = "bearer";
  while (!authorization.empty() && (authorization.back() == ' ' || authorization.back() == '\t'))
    authorization.remove_suffix(1);
  if (authorization.size() < kScheme.size()) return std::nullopt;
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return std::nullopt;
  }
  std::string_view given = authorization.substr(kScheme.size());
  if (given.empty()) return std::nullopt;                           // "Bearer"
  if (given.front() != ' ') return std::nullopt;                    // "Bearerish ..."
  while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
  if (given.empty()) return std::nullopt;
  return given;
}

BearerToken check_bearer_token(std::string_view authorization, std::string_view token) noexcept {
  const std::optional<std::string_view> found = bearer_token_of(authorization);
  if (!found) return BearerToken::missing;
  const std::string_view given = *found;
  if (token.empty()) return BearerToken::wrong;
  // Constant time over the configured token: no early exit on the first
  // differing byte, so response timing does not reveal a prefix.
  unsigned diff = given.size() == token.size() ? 0U : 1U;
  for (std::size_t i = 0; i < token.size(); ++i) {
    const char g = i < given.size() ? given[i] : '\0';
    diff |= static_cast<unsigned>(static_cast<unsigned char>(g) ^ static_cast<unsigned char>(token[i]));
  }
  return diff == 0 ? BearerToken::matches : BearerToken::wrong;
}

const char* http_reason_phrase(int status) noexcept {
  switch (status) {
    case 200: return "OK";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 307: return "Temporary Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 422: return "Unprocessable Entity";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

}  // namespace fleetlink::broker
