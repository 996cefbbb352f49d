#pragma once
// A listener's address as the operator writes it: "0.0.0.0:8443", "[::1]:80", "localhost:0".
#include <string>

#include "fleetlink/expected.hpp"

namespace fleetlink::broker {

struct HostPort {
  std::string host;
  int port = 0;
  std::string to_string() const;
};

// "0.0.0.0:8443", "[::1]:80", "localhost:0". Error when the port is missing or out of range.
Expected<HostPort> parse_host_port(const std::string& text);
// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

}  // namespace fleetlink::broker
