#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tls_session_file.hpp"

using fleetlink::detail::format_session_file;
using fleetlink::detail::parse_session_file;
using fleetlink::detail::StoredSession;

namespace {
const std::string kCert(64, 'a');
const std::string kOtherCert(64, 'b');
}  // namespace

TEST_CASE("tls session file: what is written is read back, per certificate") {
  std::vector<StoredSession> in{{"broker-a:8443", {0x30, 0x82, 0x00, 0xff}}, {"10.0.0.7:9443", {0x01}}};
  const std::string text = format_session_file(in, kCert);
  CHECK(text.find("fleetlink-tls-session v1 broker-a:8443 " + kCert + " 308200ff\n") != std::string::npos);
  std::size_t skipped = 99;
  auto out = parse_session_file(text, kCert, &skipped);
  CHECK(skipped == 0);
  REQUIRE(out.size() == 2);
  CHECK(out[0].peer == "broker-a:8443");
  CHECK(out[0].der == in[0].der);
  CHECK(out[1].peer == "10.0.0.7:9443");
  CHECK(out[1].der == in[1].der);
  // Another certificate (the rig's was replaced): nothing is offered.
  CHECK(parse_session_file(text, kOtherCert, &skipped).empty());
  CHECK(skipped == 2);
}

TEST_CASE("tls session file: a later line for a broker replaces an earlier one") {
  const std::string text = "fleetlink-tls-session v1 b:1 " + kCert + " 01\n" +
                           "fleetlink-tls-session v1 b:1 " + kCert + " 0203\r\n";
  auto out = parse_session_file(text, kCert);
  REQUIRE(out.size() == 1);
  CHECK(out[0].der == std::vector<unsigned char>{2, 3});
}

TEST_CASE("tls session file: malformed lines are skipped, the rest is kept") {
  const std::string good = "fleetlink-tls-session v1 b:1 " + kCert + " 0a0B\n";
  const std::vector<std::string> bad = {
      "garbage\n",
      "fleetlink-tls-session v2 b:1 " + kCert + " 0a\n",        // another version
      "fleetlink-tls-session v1 b:1 " + kCert + " 0a0\n",       // odd hex
      "fleetlink-tls-session v1 b:1 " + kCert + " zz\n",        // not hex
      "fleetlink-tls-session v1 b:1 " + kCert + " \n",          // no session
      "fleetlink-tls-session v1 b:1 " + kCert + "\n",           // a field short
      "fleetlink-tls-session v1 b:1 " + kCert + " 0a extra\n",  // a field more
      "fleetlink-tls-session v1  " + kCert + " 0a\n",           // empty peer
      "fleetlink-tls-session v1 b:1  0a\n",                     // empty certificate hash
      std::string("fleetlink-tls-session v1 b\x01:1 ") + kCert + " 0a\n",  // control byte in the peer
      "fleetlink-tls-session v1 b:1 " + kCert + " " + std::string(40000, '0') + "\n",  // oversized
      std::string("\0\0\0\n", 4),
  };
  std::string text;
  for (const auto& line : bad) text += line;
  text += good;
  std::size_t skipped = 0;
  auto out = parse_session_file(text, kCert, &skipped);
  CHECK(skipped == bad.size());
  REQUIRE(out.size() == 1);
  CHECK(out[0].der == std::vector<unsigned char>{0x0a, 0x0b});
  // Empty input, blank lines, no final newline.
  CHECK(parse_session_file("", kCert).empty());
  CHECK(parse_session_file("\n\n", kCert).empty());
  CHECK(parse_session_file(good.substr(0, good.size() - 1), kCert).size() == 1);
}

TEST_CASE("tls session file: what cannot be read back is not written") {
  std::vector<StoredSession> in{{"", {1}}, {"has space:1", {1}}, {"ok:1", {}}, {"ok:2", {7}}};
  const std::string text = format_session_file(in, kCert);
  auto out = parse_session_file(text, kCert);
  REQUIRE(out.size() == 1);
  CHECK(out[0].peer == "ok:2");
}
