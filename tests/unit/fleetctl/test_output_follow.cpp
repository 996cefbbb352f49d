// Following a command's output: the stored output, then events, each byte printed
// once; SSE parsed from arbitrary pieces.
#include <doctest/doctest.h>

#include "output_follow.hpp"

using fleetctl::OutputFollower;
using fleetctl::SseReader;

TEST_CASE("fleetctl follow: stored output then events, overlaps printed once, gaps counted") {
  OutputFollower f;
  CHECK(f.take(0, "line 1\nline 2\n") == "line 1\nline 2\n");
  CHECK(f.printed_to() == 14);
  CHECK(f.take(7, "line 2\n") == "");              // an event the stored output had
  CHECK(f.take(7, "line 2\nline 3\n") == "line 3\n");  // half old, half new
  CHECK(f.take(21, "line 4\n") == "line 4\n");
  CHECK(f.gap_bytes() == 0);
  CHECK(f.take(40, "line 9\n") == "line 9\n");     // 12 bytes the broker never had
  CHECK(f.gap_bytes() == 12);
  CHECK(f.printed_to() == 47);
}

TEST_CASE("fleetctl follow: a stored tail that starts late counts its missing head") {
  OutputFollower f;
  CHECK(f.take(65536, "tail\n") == "tail\n");
  CHECK(f.gap_bytes() == 65536);
  CHECK(f.take(65536, "tail\nmore\n") == "more\n");
  OutputFollower empty;
  CHECK(empty.take(0, "") == "");
  CHECK(empty.take(0, "first\n") == "first\n");
}

TEST_CASE("fleetctl SSE: events from pieces cut anywhere; comments and retry give nothing") {
  const std::string wire =
      "retry: 2000\n\n"
      ": heartbeat\n\n"
      "id: 1\nevent: command_output\ndata: {\"offset\":0,\"data\":\"a\"}\n\n"
      "id: 2\r\nevent: command_done\r\ndata: {\"detail\":\"succeeded\"}\r\n\n"
      "data: one\ndata: two\n\n";
  for (std::size_t cut = 1; cut < wire.size(); ++cut) {
    SseReader r;
    auto a = r.feed(std::string_view(wire).substr(0, cut));
    auto b = r.feed(std::string_view(wire).substr(cut));
    a.insert(a.end(), b.begin(), b.end());
    REQUIRE(a.size() == 3);
    CHECK(a[0].name == "command_output");
    CHECK(a[0].data == "{\"offset\":0,\"data\":\"a\"}");
    CHECK(a[1].name == "command_done");
    CHECK(a[1].data == "{\"detail\":\"succeeded\"}");
    CHECK(a[2].name.empty());
    CHECK(a[2].data == "one\ntwo");
    CHECK(r.pending().empty());
  }
  SseReader err;
  CHECK(err.feed("{\"error\":\"unauthorized\"}").empty());
  CHECK(err.pending() == "{\"error\":\"unauthorized\"}");
}
