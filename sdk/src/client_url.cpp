// Broker URL parsing for ClientSession: ws:// and wss:// only, no user info.
#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>

#include "fleetlink/client_session.hpp"

namespace fleetlink {

namespace {

bool iequals(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

Expected<BrokerUrl> parse_broker_url(std::string_view url) {
  BrokerUrl out;
  out.text = std::string(url);
  std::string_view rest;
  if (url.size() >= 6 && iequals(url.substr(0, 6), "wss://")) {
    out.tls = true;
    out.port = 443;
    rest = url.substr(6);
  } else if (url.size() >= 5 && iequals(url.substr(0, 5), "ws://")) {
    out.tls = false;
    out.port = 80;
    rest = url.substr(5);
  } else {
    return make_error(Errc::invalid_argument,
                      "'" + std::string(url) + "': scheme must be wss:// (or ws:// with allow_plain)");
  }
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) out.path = std::string(rest.substr(slash));
  if (authority.find('@') != std::string_view::npos)
    return make_error(Errc::invalid_argument, "'" + std::string(url) + "': user info is not supported");

  std::string_view host;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos)
      return make_error(Errc::invalid_argument, "'" + std::string(url) + "': unterminated [IPv6] host");
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':')
        return make_error(Errc::invalid_argument, "'" + std::string(url) + "': junk after ]");
      port = after.substr(1);
      if (port.empty())
        return make_error(Errc::invalid_argument, "'" + std::string(url) + "': empty port");
    }
  } else {
    const auto colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty())
        return make_error(Errc::invalid_argument, "'" + std::string(url) + "': empty port");
    }
  }
  if (host.empty()) return make_error(Errc::invalid_argument, "'" + std::string(url) + "': no host");
  if (!port.empty()) {
    unsigned value = 0;
    const auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc{} || p != port.data() + port.size() || value == 0 || value > 65535)
      return make_error(Errc::invalid_argument,
                        "'" + std::string(url) + "': port must be a number 1-65535");
    out.port = static_cast<std::uint16_t>(value);
  }
  out.host = std::string(host);
  return out;
}

bool is_loopback_host(std::string_view host) noexcept {
  if (iequals(host, "localhost")) return true;
  const std::string h(host);
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1)
    return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    static const in6_addr loop = IN6ADDR_LOOPBACK_INIT;
    return std::equal(std::begin(v6.s6_addr), std::end(v6.s6_addr), std::begin(loop.s6_addr));
  }
  return false;
}

const char* to_string(SessionState s) noexcept {
  switch (s) {
    case SessionState::idle: return "idle";
    case SessionState::connecting: return "connecting";
    case SessionState::open: return "open";
    case SessionState::welcomed: return "welcomed";
    case SessionState::backoff: return "backoff";
    case SessionState::stopped: return "stopped";
  }
  return "unknown";
}

}  // namespace fleetlink
