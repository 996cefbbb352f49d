// ClientSession configuration pieces the agent relies on: broker URLs, loopback, validate().
#include <doctest/doctest.h>

#include "fleetlink/client_session.hpp"

using namespace fleetlink;

TEST_CASE("broker URLs: scheme, host, port, path") {
  auto a = parse_broker_url("wss://broker.lab:8443/agent");
  REQUIRE(a);
  CHECK(a->tls);
  CHECK(a->host == "broker.lab");
  CHECK(a->port == 8443);
  CHECK(a->path == "/agent");
  auto b = parse_broker_url("ws://127.0.0.1/agent");
  REQUIRE(b);
  CHECK_FALSE(b->tls);
  CHECK(b->port == 80);
  auto c = parse_broker_url("wss://[::1]:9000");
  REQUIRE(c);
  CHECK(c->host == "::1");
  CHECK(c->port == 9000);
  CHECK(c->path == "/");
  CHECK(parse_broker_url("WSS://X:1/a"));
  for (const char* bad : {"http://x/agent", "wss://:80/x", "wss://x:0/", "wss://x:99999/", "wss://x:/",
                          "wss://user@x/", "wss://[::1/", "x", ""})
    CHECK_MESSAGE(!parse_broker_url(bad), bad);
}

TEST_CASE("loopback hosts") {
  CHECK(is_loopback_host("127.0.0.1"));
  CHECK(is_loopback_host("127.8.9.10"));
  CHECK(is_loopback_host("localhost"));
  CHECK(is_loopback_host("::1"));
  CHECK_FALSE(is_loopback_host("10.0.0.1"));
  CHECK_FALSE(is_loopback_host("broker.lab"));
  CHECK_FALSE(is_loopback_host("::2"));
}

TEST_CASE("validate: plain only with allow_plain and only to loopback; TLS needs a CA") {
  ClientSessionConfig c;
  c.hello.rig_id = "r";
  c.broker_urls = {"ws://127.0.0.1:1/agent"};
  CHECK_FALSE(ClientSession(c, {}).validate());
  c.allow_plain = true;
  CHECK(ClientSession(c, {}).validate());
  c.broker_urls = {"ws://10.1.1.1:1/agent"};
  CHECK_FALSE(ClientSession(c, {}).validate());
  c.broker_urls = {"wss://10.1.1.1:1/agent"};
  CHECK_FALSE(ClientSession(c, {}).validate());  // no CA
  c.ca_path = "/ca.crt";
  c.cert_path = "/rig.crt";
  CHECK_FALSE(ClientSession(c, {}).validate());  // cert without key
  c.key_path = "/rig.key";
  CHECK(ClientSession(c, {}).validate());
  c.hello.rig_id.clear();
  CHECK_FALSE(ClientSession(c, {}).validate());
}

TEST_CASE("send before run is refused, stop before run returns at once") {
  ClientSessionConfig c;
  c.hello.rig_id = "r";
  c.allow_plain = true;
  c.broker_urls = {"ws://127.0.0.1:1/agent"};
  ClientSession s(c, {});
  CHECK(s.state() == SessionState::idle);
  CHECK_FALSE(s.send(Message{msg::Cancel{}}));
  s.stop();
  CHECK(s.run() == 0);
  CHECK(s.state() == SessionState::stopped);
}
