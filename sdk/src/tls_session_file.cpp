#include "tls_session_file.hpp"

#include <algorithm>
#include <cstddef>

namespace fleetlink::detail {

namespace {

constexpr std::string_view kMagic = "fleetlink-tls-session";
constexpr std::string_view kVersion = "v1";
constexpr std::size_t kMaxSessionBytes = 16 * 1024;  // a session with a client certificate is ~1-2 KiB

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool from_hex(std::string_view text, std::vector<unsigned char>& out) {
  if (text.empty() || text.size() % 2 != 0 || text.size() / 2 > kMaxSessionBytes) return false;
  out.resize(text.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_value(text[2 * i]);
    const int lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return true;
}

// Splits on single spaces; a field may not be empty.
std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> fields;
  while (!line.empty()) {
    const std::size_t sp = line.find(' ');
    fields.push_back(line.substr(0, sp));
    if (sp == std::string_view::npos) break;
    line.remove_prefix(sp + 1);
    if (line.empty()) fields.emplace_back();  // trailing space: an empty field
  }
  return fields;
}

bool valid_peer(std::string_view peer) {
  return !peer.empty() && peer.size() <= 300 &&
         std::none_of(peer.begin(), peer.end(), [](char c) { return c <= ' ' || c == 0x7f; });
}

}  // namespace

std::string format_session_file(const std::vector<StoredSession>& sessions, std::string_view cert_sha256) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const StoredSession& s : sessions) {
    if (!valid_peer(s.peer) || s.der.empty() || s.der.size() > kMaxSessionBytes) continue;
    out.append(kMagic).append(" ").append(kVersion).append(" ").append(s.peer).append(" ");
    out.append(cert_sha256).append(" ");
    for (unsigned char b : s.der) {
      out.push_back(kHex[b >> 4]);
      out.push_back(kHex[b & 15]);
    }
    out.push_back('\n');
  }
  return out;
}

std::vector<StoredSession> parse_session_file(std::string_view text, std::string_view cert_sha256,
                                              std::size_t* skipped) {
  std::vector<StoredSession> sessions;
  std::size_t bad = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const auto f = fields_of(line);
    StoredSession s;
    if (f.size() != 5 || f[0] != kMagic || f[1] != kVersion || !valid_peer(f[2]) || f[3].empty() ||
        f[3] != cert_sha256 || !from_hex(f[4], s.der)) {
      ++bad;
      continue;
    }
    s.peer = std::string(f[2]);
    auto same = std::find_if(sessions.begin(), sessions.end(), [&](const StoredSession& o) { return o.peer == s.peer; });
    if (same != sessions.end()) *same = std::move(s);
    else sessions.push_back(std::move(s));
  }
  if (skipped) *skipped = bad;
  return sessions;
}

}  // namespace fleetlink::detail
