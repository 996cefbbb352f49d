// common/log_repeat: repeated lines limited per key and interval, on a clock the
// test drives; the count of the suppressed ones comes out once the interval ends.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/log_repeat.hpp"

namespace log = fleetlink::log;
using log::Level;
using log::RepeatLimiter;
using log::SuppressedLines;

namespace {

// Feeds `n` lines of `key` at `at` ms; returns how many were admitted.
int feed(RepeatLimiter& l, const std::string& key, int n, std::uint64_t at, std::vector<SuppressedLines>& due,
         Level level = Level::warn) {
  int written = 0;
  for (int i = 0; i < n; ++i) written += l.admit(key, level, at, due) ? 1 : 0;
  return written;
}

}  // namespace

TEST_CASE("a flood of one key: the first N lines, then one count when the interval ends") {
  RepeatLimiter l({3, 10'000});
  std::vector<SuppressedLines> due;
  CHECK(feed(l, "enqueue refused rig=r1", 128, 1'000, due) == 3);
  CHECK(due.empty());  // the interval is still running: nothing to say yet
  // 9.999 s later: still the same interval.
  CHECK_FALSE(l.admit("enqueue refused rig=r1", Level::warn, 10'999, due));
  CHECK(due.empty());
  // The next line after the interval: first the count, then the line itself.
  CHECK(l.admit("enqueue refused rig=r1", Level::warn, 11'000, due));
  REQUIRE(due.size() == 1);
  CHECK(due[0].key == "enqueue refused rig=r1");
  CHECK(due[0].count == 126);
  CHECK(due[0].level == Level::warn);
  CHECK(log::suppressed_text(due[0]) == "enqueue refused rig=r1: suppressed 126 similar lines in the last 10 s");
  // A fresh interval: its own three lines.
  due.clear();
  CHECK(feed(l, "enqueue refused rig=r1", 5, 11'500, due) == 2);
}

TEST_CASE("keys are limited apart: one rig's flood never hides another's first warning") {
  RepeatLimiter l({2, 60'000});
  std::vector<SuppressedLines> due;
  CHECK(feed(l, "rig=a", 50, 0, due) == 2);
  CHECK(feed(l, "rig=b", 1, 5, due) == 1);
  CHECK(feed(l, "rig=b", 3, 6, due) == 1);
  CHECK(l.keys() == 2);
}

TEST_CASE("a count comes due at any later limited line, not only its own key's") {
  RepeatLimiter l({1, 1'000});
  std::vector<SuppressedLines> due;
  CHECK(feed(l, "rig=a", 4, 0, due) == 1);
  CHECK(l.admit("rig=b", Level::info, 999, due));
  CHECK(due.empty());
  CHECK(l.admit("rig=b", Level::info, 1'000, due) == false);  // rig=b's own interval runs until 1999
  REQUIRE(due.size() == 1);
  CHECK(due[0].key == "rig=a");
  CHECK(due[0].count == 3);
  CHECK(log::suppressed_text(due[0]) == "rig=a: suppressed 3 similar lines in the last 1 s");
}

TEST_CASE("collect: ended intervals only, or every count at exit") {
  RepeatLimiter l({1, 1'000});
  std::vector<SuppressedLines> due;
  feed(l, "x", 2, 0, due);
  feed(l, "y", 3, 500, due);
  l.collect(999, false, due);
  CHECK(due.empty());
  l.collect(1'000, false, due);
  REQUIRE(due.size() == 1);
  CHECK(due[0].key == "x");
  CHECK(due[0].count == 1);
  CHECK(l.keys() == 1);  // x's interval is forgotten, y's runs on
  due.clear();
  l.collect(1'200, true, due);
  REQUIRE(due.size() == 1);
  CHECK(due[0].key == "y");
  CHECK(due[0].count == 2);
  CHECK(due[0].over_ms == 700);
  CHECK(log::suppressed_text(due[0]) == "y: suppressed 2 similar lines in the last 1 s");
  // Said once: a second collect has nothing more.
  due.clear();
  l.collect(1'300, true, due);
  CHECK(due.empty());
}

TEST_CASE("one suppressed line is worded in the singular") {
  CHECK(log::suppressed_text(SuppressedLines{"k", Level::warn, 1, 60'000}) ==
        "k: suppressed 1 similar line in the last 60 s");
}

TEST_CASE("the level of the count is the suppressed lines' level") {
  RepeatLimiter l({1, 100});
  std::vector<SuppressedLines> due;
  feed(l, "k", 1, 0, due, Level::warn);
  feed(l, "k", 1, 1, due, Level::error);
  l.collect(100, false, due);
  REQUIRE(due.size() == 1);
  CHECK(due[0].level == Level::error);
}

TEST_CASE("more keys than the limiter holds share one budget, and memory stays bounded") {
  RepeatLimiter l({2, 10'000}, 4);
  std::vector<SuppressedLines> due;
  int written = 0;
  for (int i = 0; i < 1000; ++i) written += l.admit("peer=" + std::to_string(i), Level::warn, 10, due) ? 1 : 0;
  // Three keys of their own (one line each), then the shared key's two lines.
  CHECK(written == 3 + 2);
  CHECK(l.keys() == 4);
  l.collect(10'010, false, due);
  REQUIRE(due.size() == 1);
  CHECK(due[0].key == std::string(RepeatLimiter::kOverflowKey));
  CHECK(due[0].count == 1000 - 3 - 2);
  CHECK(l.keys() == 0);
  // Room again once the intervals ended.
  CHECK(l.admit("peer=new", Level::warn, 10'020, due));
}

TEST_CASE("a policy of 0 lines limits nothing") {
  RepeatLimiter l({0, 1'000});
  std::vector<SuppressedLines> due;
  CHECK(feed(l, "k", 500, 0, due) == 500);
  CHECK(l.keys() == 0);
}

TEST_CASE("a quiet key is not reported: no count without suppressed lines") {
  RepeatLimiter l({5, 1'000});
  std::vector<SuppressedLines> due;
  CHECK(feed(l, "k", 5, 0, due) == 5);
  l.collect(5'000, true, due);
  CHECK(due.empty());
}
