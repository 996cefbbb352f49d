// Close-code table: names, order, and that docs/PROTOCOL.md documents every code.
#include <doctest/doctest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "fleetlink/close_codes.hpp"
#include "fleetlink/expected.hpp"

using namespace fleetlink;

TEST_CASE("names") {
  CHECK(close_code_name(4410) == "superseded");
  CHECK(close_code_name(4401) == "identity_mismatch");
  CHECK(close_code_name(4002) == "keepalive_timeout");
  CHECK(close_code_name(1000) == "normal");
  CHECK(close_code_name(4999) == "unknown");
  CHECK(close_code_name(0) == "unknown");
}

TEST_CASE("table is complete, ascending and unique") {
  const auto table = close_code_table();
  CHECK(table.size() == 16);
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (i > 0) CHECK(static_cast<int>(table[i - 1].code) < static_cast<int>(table[i].code));
    CHECK_FALSE(table[i].name.empty());
    CHECK_FALSE(table[i].meaning.empty());
    const bool sender_ok =
        table[i].sender == "broker" || table[i].sender == "agent" || table[i].sender == "either";
    CHECK(sender_ok);
    names.insert(table[i].name);
    CHECK(close_code_name(static_cast<std::uint16_t>(table[i].code)) == table[i].name);
  }
  CHECK(names.size() == table.size());
}

TEST_CASE("docs/PROTOCOL.md documents every close code") {
  std::ifstream in(std::string(FLEETLINK_SOURCE_DIR) + "/docs/PROTOCOL.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (const auto& info : close_code_table()) {
    const std::string row =
        "| " + std::to_string(static_cast<int>(info.code)) + " | `" + std::string(info.name) + "`";
    CAPTURE(row);
    CHECK(doc.find(row) != std::string::npos);
  }
}

TEST_CASE("error code names") {
  CHECK(std::string(to_string(Errc::too_large)) == "too_large");
  CHECK(std::string(to_string(Errc::unknown_type)) == "unknown_type");
  CHECK(std::string(to_string(Errc::ok)) == "ok");
}
