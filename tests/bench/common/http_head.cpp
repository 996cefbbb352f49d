#include "http_head.hpp"

#include <cctype>

namespace fleetlink::bench {

namespace {
bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}
std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}
}  // namespace

std::optional<std::string_view> HttpHead::header(std::string_view name) const noexcept {
  std::string_view rest = headers;
  while (!rest.empty()) {
    const std::size_t eol = rest.find("\r\n");
    const std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view{} : rest.substr(eol + 2);
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    if (iequals(trim(line.substr(0, colon)), name)) return trim(line.substr(colon + 1));
  }
  return std::nullopt;
}

std::optional<HttpHead> parse_http_head(std::string_view buf) noexcept {
  const std::size_t end = buf.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (buf.size() >= 5 && buf.substr(0, 5) != "HTTP/") return HttpHead{-1, 0, {}};
    return std::nullopt;
  }
  HttpHead h;
  h.head_bytes = end + 4;
  const std::size_t eol = buf.find("\r\n");
  const std::string_view status_line = buf.substr(0, eol);
  const std::size_t sp = status_line.find(' ');
  if (status_line.substr(0, 5) != "HTTP/" || sp == std::string_view::npos ||
      status_line.size() < sp + 4) {
    h.status = -1;
    return h;
  }
  int code = 0;
  for (std::size_t i = sp + 1; i < sp + 4; ++i) {
    const char c = status_line[i];
    if (c < '0' || c > '9') {
      h.status = -1;
      return h;
    }
    code = code * 10 + (c - '0');
  }
  h.status = code;
  h.headers = eol + 2 <= end + 2 ? buf.substr(eol + 2, end + 2 - (eol + 2)) : std::string_view{};
  return h;
}

}  // namespace fleetlink::bench
