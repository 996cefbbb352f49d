#include "log.hpp"

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

namespace fleetlink::broker {
namespace {
LogLevel g_level = LogLevel::info;
// Under systemd, stderr is a journal stream: sd-daemon "<N>" prefixes give each line
// its priority, and the journal keeps its own timestamps.
const bool g_journal = std::getenv("JOURNAL_STREAM") != nullptr;
const char* journal_priority(LogLevel l) {
  switch (l) {
    case LogLevel::debug: return "<7>";
    case LogLevel::info: return "<6>";
    case LogLevel::warn: return "<4>";
    case LogLevel::error: return "<3>";
  }
  return "<6>";
}
const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::debug: return "DEBUG";
    case LogLevel::info: return "INFO ";
    case LogLevel::warn: return "WARN ";
    case LogLevel::error: return "ERROR";
  }
  return "?    ";
}
}  // namespace

void set_log_level(LogLevel level) noexcept { g_level = level; }
bool log_enabled(LogLevel level) noexcept { return level >= g_level; }

std::uint64_t wall_ms() noexcept {
  using namespace std::chrono;
  return static_cast<std::uint64_t>(
      duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
}

std::string iso8601_ms(std::uint64_t unix_ms) {
  std::time_t secs = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<unsigned>(unix_ms % 1000));
  return buf;
}

void log_line(LogLevel level, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (g_journal)
    std::fprintf(stderr, "%s%s\n", journal_priority(level), msg);
  else
    std::fprintf(stderr, "%s %s %s\n", iso8601_ms(wall_ms()).c_str(), level_name(level), msg);
}

}  // namespace fleetlink::broker
