#include "net/host_port.hpp"

#include <arpa/inet.h>

namespace fleetlink::broker {

std::string HostPort::to_string() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Expected<HostPort> parse_host_port(const std::string& text) {
  HostPort hp;
  std::string port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return make_error(Errc::invalid_argument, "'" + text + "' is not [IPV6]:PORT");
    hp.host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos)
      return make_error(Errc::invalid_argument, "'" + text + "' is not HOST:PORT");
    hp.host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  if (hp.host.empty()) return make_error(Errc::invalid_argument, "'" + text + "' has no host");
  if (port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos)
    return make_error(Errc::invalid_argument, "'" + text + "' has no valid port");
  hp.port = std::stoi(port_text);
  if (hp.port > 65535) return make_error(Errc::invalid_argument, "port out of range in '" + text + "'");
  return hp;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  in_addr a4{};
  if (inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  if (inet_pton(AF_INET6, host.c_str(), &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6) != 0;
  return false;
}

}  // namespace fleetlink::broker
