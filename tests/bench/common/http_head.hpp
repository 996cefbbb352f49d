#pragma once
// Parsing of an HTTP/1.1 response head (status line + headers), enough for the
// WebSocket upgrade answer (101 / 503 + Retry-After) and the control API's JSON.
#include <cstddef>
#include <optional>
#include <string_view>

namespace fleetlink::bench {

struct HttpHead {
  int status = 0;
  std::size_t head_bytes = 0;     // through the blank line
  std::string_view headers;       // the raw header block (after the status line)
  // Case-insensitive header lookup; the value trimmed of spaces.
  std::optional<std::string_view> header(std::string_view name) const noexcept;
};

// nullopt while the head is incomplete; status < 0 for garbage.
std::optional<HttpHead> parse_http_head(std::string_view buf) noexcept;

}  // namespace fleetlink::bench
