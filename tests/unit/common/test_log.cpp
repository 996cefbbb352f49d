// common/log: the line format (journal priority or timestamp and level word, one
// event one line), level names, and what reaches stderr.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/log.hpp"
#include "common/log_repeat.hpp"

namespace log = fleetlink::log;

namespace {

constexpr std::uint64_t kAt = 1795984306123;  // 2026-11-29T20:31:46.123Z

// Runs fn with stderr sent to a temporary file; returns what was written.
template <typename Fn>
std::string capture_stderr(Fn fn) {
  std::FILE* tmp = std::tmpfile();
  REQUIRE(tmp != nullptr);
  const int saved = ::dup(STDERR_FILENO);
  REQUIRE(saved >= 0);
  REQUIRE(::dup2(::fileno(tmp), STDERR_FILENO) >= 0);
  fn();
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::rewind(tmp);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, tmp)) > 0;) out.append(buf, n);
  std::fclose(tmp);
  return out;
}

// Journal mode (so the lines carry no timestamp) for one test; the level, the
// environment and the journal mode are put back when it ends.
struct JournalMode {
  log::Level level = log::level();
  const char* env = std::getenv("JOURNAL_STREAM");
  std::string saved = env ? env : "";
  JournalMode() {
    ::setenv("JOURNAL_STREAM", "8:1234", 1);
    log::detect_journal();
  }
  ~JournalMode() {
    if (env) ::setenv("JOURNAL_STREAM", saved.c_str(), 1);
    else ::unsetenv("JOURNAL_STREAM");
    log::set_level(level);
    log::detect_journal();
  }
};

}  // namespace

TEST_CASE("outside the journal a line starts with the UTC time in milliseconds and a padded level") {
  CHECK(log::format_line(log::Level::info, "hello rig=r1", false, kAt) ==
        "2026-11-29T20:31:46.123Z INFO  hello rig=r1");
  CHECK(log::format_line(log::Level::warn, "w", false, kAt) == "2026-11-29T20:31:46.123Z WARN  w");
  CHECK(log::format_line(log::Level::error, "e", false, kAt) == "2026-11-29T20:31:46.123Z ERROR e");
  CHECK(log::format_line(log::Level::debug, "d", false, kAt) == "2026-11-29T20:31:46.123Z DEBUG d");
  CHECK(log::iso8601_ms(0) == "1970-01-01T00:00:00.000Z");
  CHECK(log::iso8601_ms(1005) == "1970-01-01T00:00:01.005Z");
}

TEST_CASE("under the journal a line starts with its sd-daemon priority and no timestamp") {
  CHECK(log::format_line(log::Level::error, "e", true, kAt) == "<3>e");
  CHECK(log::format_line(log::Level::warn, "w", true, kAt) == "<4>w");
  CHECK(log::format_line(log::Level::info, "i", true, kAt) == "<6>i");
  CHECK(log::format_line(log::Level::debug, "d", true, kAt) == "<7>d");
}

TEST_CASE("embedded newlines are folded into spaces: one event stays one line") {
  CHECK(log::format_line(log::Level::info, "a\nb\r\nc", true, kAt) == "<6>a b  c");
  CHECK(log::format_line(log::Level::info, "x\n", false, kAt) == "2026-11-29T20:31:46.123Z INFO  x ");
}

TEST_CASE("level names parse both ways") {
  log::Level l{};
  for (const char* name : {"debug", "info", "warn", "error"}) {
    REQUIRE(log::parse_level(name, l));
    CHECK(std::string(log::level_name(l)) == name);
  }
  CHECK(log::parse_level("warning", l));
  CHECK(l == log::Level::warn);
  l = log::Level::debug;
  CHECK_FALSE(log::parse_level("verbose", l));
  CHECK_FALSE(log::parse_level("", l));
  CHECK_FALSE(log::parse_level("INFO", l));
  CHECK(l == log::Level::debug);
}

TEST_CASE("a line reaches stderr whole, with one newline, and levels below the threshold do not") {
  JournalMode journal;
  log::set_level(log::Level::info);
  const std::string out = capture_stderr([] {
    FL_DEBUG("not shown %d", 1);
    FL_INFO("ack seq=%d cmd=%s", 7, "c1");
    FL_WARN("two\nlines");
  });
  CHECK(out == "<6>ack seq=7 cmd=c1\n<4>two lines\n");
}

TEST_CASE("a long formatted line is not cut") {
  JournalMode journal;
  const std::string detail(5000, 'x');
  const std::string out = capture_stderr([&] { FL_ERROR("cannot start: %s", detail.c_str()); });
  CHECK(out == "<3>cannot start: " + detail + "\n");
}

TEST_CASE("limited lines: the process-wide limiter writes N per key, then the count at flush") {
  JournalMode journal;
  log::set_repeat_policy(log::RepeatPolicy{2, 3'600'000});
  const std::string out = capture_stderr([] {
    for (int i = 0; i < 5; ++i) FL_WARN_LIMITED("unit flood", "flood line %d", i);
    FL_WARN_LIMITED("unit other", "other line");
    log::write_limited("unit flood", log::Level::warn, "not written");
    log::flush_suppressed(true);
  });
  log::set_repeat_policy(log::RepeatPolicy{});
  CHECK(out ==
        "<4>flood line 0\n<4>flood line 1\n<4>other line\n"
        "<4>unit flood: suppressed 4 similar lines in the last 1 s\n");
}
