// Parsing of the upgrade answer: rigsim must tell 101 from 503 + Retry-After.
#include <doctest/doctest.h>

#include "http_head.hpp"

using namespace fleetlink::bench;

TEST_CASE("a 503 with Retry-After") {
  const char* text = "HTTP/1.1 503 Service Unavailable\r\nretry-after:  7 \r\ncontent-length: 0\r\n\r\nrest";
  auto h = parse_http_head(text);
  REQUIRE(h);
  CHECK(h->status == 503);
  CHECK(h->header("Retry-After").value() == "7");
  CHECK(h->header("Content-Length").value() == "0");
  CHECK_FALSE(h->header("Upgrade"));
  CHECK(std::string_view(text).substr(h->head_bytes) == "rest");
}

TEST_CASE("an incomplete head waits, garbage is flagged") {
  CHECK_FALSE(parse_http_head("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"));
  auto bad = parse_http_head("SSH-2.0-OpenSSH\r\n\r\n");
  REQUIRE(bad);
  CHECK(bad->status < 0);
}
