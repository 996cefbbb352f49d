#include <doctest/doctest.h>

#include "config.hpp"

using namespace fleetlink::broker;

TEST_CASE("host:port parsing") {
  auto a = parse_host_port("127.0.0.1:8443");
  REQUIRE(a);
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 8443);
  auto b = parse_host_port("[::1]:0");
  REQUIRE(b);
  CHECK(b->host == "::1");
  CHECK(b->port == 0);
  CHECK_FALSE(parse_host_port("nohost"));
  CHECK_FALSE(parse_host_port(":80"));
  CHECK_FALSE(parse_host_port("h:99999"));
}

TEST_CASE("plain listener only on loopback") {
  CHECK(is_loopback_host("127.0.0.1"));
  CHECK(is_loopback_host("127.3.4.5"));
  CHECK(is_loopback_host("::1"));
  CHECK(is_loopback_host("localhost"));
  CHECK_FALSE(is_loopback_host("0.0.0.0"));
  CHECK_FALSE(is_loopback_host("10.0.0.1"));
  CHECK_FALSE(is_loopback_host("::"));
  BrokerConfig cfg;
  cfg.cert = cfg.key = cfg.ca = "x";
  cfg.plain_listen = {"0.0.0.0", 9000};
  CHECK_FALSE(validate(cfg));
  cfg.plain_listen = {"127.0.0.1", 9000};
  CHECK(validate(cfg));
}
