// dmesg: line tail logic on a fixed buffer, args, the failure path.
#include <doctest/doctest.h>

#include "dmesg_executor.hpp"

using namespace fleetlink;
using namespace fleetlink::agent;

namespace {
const char* kRaw =
    "<6>[    0.000000] Linux version 6.1\n"
    "<4>[    0.100000] second\n"
    "<6>[    0.200000] third\n"
    "<3>[    0.300000] fourth\n";

struct CaptureReporter : Reporter {
  bool output(std::string_view) override { return true; }
  void finish(Outcome o) override {
    outcome = std::move(o);
    finished++;
  }
  Outcome outcome;
  int finished = 0;
};
}  // namespace

TEST_CASE("dmesg_tail keeps the last n lines and strips priorities") {
  CHECK(dmesg_tail(kRaw, 2) == "[    0.200000] third\n[    0.300000] fourth\n");
  CHECK(dmesg_tail(kRaw, 1) == "[    0.300000] fourth\n");
  CHECK(dmesg_tail(kRaw, 0).empty());
}

TEST_CASE("dmesg_tail with more lines asked than there are returns all") {
  const std::string all = dmesg_tail(kRaw, 100);
  CHECK(all.rfind("[    0.000000] Linux version 6.1\n", 0) == 0);
  CHECK(std::count(all.begin(), all.end(), '\n') == 4);
}

TEST_CASE("dmesg_tail copes with no trailing newline, NUL padding, empty input") {
  CHECK(dmesg_tail("<6>a\n<6>b", 1) == "b\n");
  CHECK(dmesg_tail(std::string_view("<6>a\n<6>b\n\0\0", 12), 1) == "b\n");
  CHECK(dmesg_tail("", 5).empty());
  CHECK(dmesg_tail("\n\n", 5).empty());
  CHECK(dmesg_tail("plain line", 5) == "plain line\n");
  CHECK(dmesg_tail("<x>not a priority", 1) == "<x>not a priority\n");
}

TEST_CASE("keep_tail_bytes keeps the newest part, from a line start") {
  std::string s = "aaaa\nbbbb\ncccc\n";
  const auto dropped = keep_tail_bytes(s, 8);
  CHECK(s == "cccc\n");
  CHECK(dropped == 10);
  std::string small = "ab\n";
  CHECK(keep_tail_bytes(small, 10) == 0);
  CHECK(small == "ab\n");
}

TEST_CASE("lines arg: default, cap, garbage") {
  DmesgOptions o{500, 1000};
  CHECK(*dmesg_lines_arg({}, o) == 500);
  CHECK(*dmesg_lines_arg({{"lines", "50"}}, o) == 50);
  CHECK(*dmesg_lines_arg({{"lines", "99999"}}, o) == 1000);
  CHECK_FALSE(dmesg_lines_arg({{"lines", "-1"}}, o));
  CHECK_FALSE(dmesg_lines_arg({{"lines", "0"}}, o));
  CHECK_FALSE(dmesg_lines_arg({{"lines", "12abc"}}, o));
}

TEST_CASE("the executor reports the tail, or a clear failure when the log is forbidden") {
  DmesgExecutor ok({500, 5000}, [] { return Expected<std::string>(std::string(kRaw)); });
  auto r1 = std::make_shared<CaptureReporter>();
  ok.start({"c1", "dmesg", {{"lines", "2"}}}, r1);
  CHECK(r1->finished == 1);
  CHECK(r1->outcome.status == msg::Status::ok);
  CHECK(r1->outcome.output == "[    0.200000] third\n[    0.300000] fourth\n");

  DmesgExecutor denied({500, 5000}, [] {
    return Expected<std::string>(make_error(Errc::io, "klogctl: Operation not permitted"));
  });
  auto r2 = std::make_shared<CaptureReporter>();
  denied.start({"c2", "dmesg", {}}, r2);
  CHECK(r2->outcome.status == msg::Status::failed);
  CHECK(r2->outcome.detail.find("Operation not permitted") != std::string::npos);

  auto r3 = std::make_shared<CaptureReporter>();
  ok.start({"c3", "dmesg", {{"lines", "many"}}}, r3);
  CHECK(r3->outcome.status == msg::Status::failed);
}

TEST_CASE("a huge log is capped at the result size, newest lines kept") {
  std::string raw;
  for (int i = 0; i < 5000; ++i) raw += "<6>[ " + std::to_string(i) + "] " + std::string(40, 'x') + "\n";
  DmesgExecutor big({5000, 5000}, [&] { return Expected<std::string>(raw); });
  auto r = std::make_shared<CaptureReporter>();
  big.start({"c", "dmesg", {{"lines", "5000"}}}, r);
  CHECK(r->outcome.output.size() <= kMaxResultOutput);
  CHECK(r->outcome.truncated);
  CHECK(r->outcome.dropped_bytes > 0);
  CHECK(r->outcome.output.find("[ 4999] ") != std::string::npos);
}
