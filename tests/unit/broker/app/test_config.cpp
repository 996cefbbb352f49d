#include <doctest/doctest.h>

#include <string>
#include <variant>
#include <vector>

#include "app/config.hpp"

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

namespace {
ParseOutcome parse(std::vector<std::string> args) {
  std::string program = "fleetlink-broker";
  std::vector<char*> argv{program.data()};
  for (auto& a : args) argv.push_back(a.data());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}
}  // namespace

TEST_CASE("ws-rx-buffer-bytes: default 128, bounded 128..65536") {
  const std::vector<std::string> base = {"--cert", "c", "--key", "k", "--ca", "a"};
  auto def = parse(base);
  REQUIRE(std::holds_alternative<BrokerConfig>(def));
  CHECK(std::get<BrokerConfig>(def).ws_rx_buffer_bytes == 128);

  auto with = [&](const char* v) {
    auto args = base;
    args.emplace_back("--ws-rx-buffer-bytes");
    args.emplace_back(v);
    return parse(args);
  };
  auto big = with("512");
  REQUIRE(std::holds_alternative<BrokerConfig>(big));
  CHECK(std::get<BrokerConfig>(big).ws_rx_buffer_bytes == 512);
  CHECK(std::holds_alternative<int>(with("64")));      // below lws's useful minimum
  CHECK(std::holds_alternative<int>(with("100000")));  // above 64 KiB
  CHECK(std::holds_alternative<int>(with("many")));
}
