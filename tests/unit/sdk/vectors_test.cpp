// tests/vectors/frames.txt: every valid frame decodes and re-encodes to the same
// bytes; every invalid one is refused with the error its name starts with.
#include <doctest/doctest.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "fleetlink/codec.hpp"

using namespace fleetlink;

namespace {

struct Vector {
  std::string name;
  bool valid = false;
  Bytes bytes;
};

Bytes from_hex(const std::string& hex) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  Bytes out;
  REQUIRE(hex.size() % 2 == 0);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]);
    const int lo = nibble(hex[i + 1]);
    REQUIRE(hi >= 0);
    REQUIRE(lo >= 0);
    out.push_back(static_cast<std::uint8_t>(hi * 16 + lo));
  }
  return out;
}

std::vector<Vector> load_vectors() {
  std::ifstream in(std::string(FLEETLINK_SOURCE_DIR) + "/tests/vectors/frames.txt");
  REQUIRE(in.good());
  std::vector<Vector> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto t1 = line.find('\t');
    const auto t2 = line.find('\t', t1 + 1);
    REQUIRE(t1 != std::string::npos);
    REQUIRE(t2 != std::string::npos);
    Vector v;
    v.name = line.substr(0, t1);
    const std::string kind = line.substr(t1 + 1, t2 - t1 - 1);
    REQUIRE((kind == "valid" || kind == "invalid"));
    v.valid = kind == "valid";
    v.bytes = from_hex(line.substr(t2 + 1));
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace

TEST_CASE("valid vectors decode and re-encode byte for byte") {
  std::set<std::string> types;
  for (const auto& v : load_vectors()) {
    if (!v.valid) continue;
    CAPTURE(v.name);
    const auto m = decode(v.bytes);
    if (!m) FAIL(v.name << ": " << m.error().detail);
    types.insert(type_name(*m));
    CHECK(encode(*m) == v.bytes);
  }
  CHECK(types.size() == std::variant_size_v<Message>);  // one per message type at least
}

TEST_CASE("invalid vectors are refused with the named error") {
  int count = 0;
  for (const auto& v : load_vectors()) {
    if (v.valid) continue;
    ++count;
    CAPTURE(v.name);
    const auto m = decode(v.bytes);
    REQUIRE_FALSE(m.has_value());
    const std::string expected = v.name.substr(0, v.name.find('/'));
    CHECK(std::string(to_string(m.error().code)) == expected);
  }
  CHECK(count >= 10);
}
