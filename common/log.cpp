#include "common/log.hpp"

#include "common/log_repeat.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <vector>

namespace fleetlink::log {
namespace {

std::atomic<Level> g_level{Level::info};

bool journal_from_env() noexcept {
  const char* js = std::getenv("JOURNAL_STREAM");
  return js != nullptr && *js != '\0';
}
std::atomic<bool> g_journal{journal_from_env()};

const char* padded_name(Level l) noexcept {
  switch (l) {
    case Level::debug: return "DEBUG";
    case Level::info: return "INFO ";
    case Level::warn: return "WARN ";
    case Level::error: return "ERROR";
  }
  return "?    ";
}

// The one limiter of the process, on the monotonic clock.
std::mutex g_repeat_mu;
RepeatLimiter& repeat_limiter() {
  static RepeatLimiter limiter;
  return limiter;
}
std::uint64_t steady_ms() noexcept {
  using namespace std::chrono;
  return static_cast<std::uint64_t>(duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count());
}

void write_suppressed(const std::vector<SuppressedLines>& due) {
  for (const auto& s : due)
    if (enabled(s.level)) write(s.level, suppressed_text(s));
}

// Whether a line under key goes out; the counts that came due are written first.
bool admit_limited(std::string_view key, Level level) {
  std::vector<SuppressedLines> due;
  bool admitted = false;
  {
    std::lock_guard lock(g_repeat_mu);
    admitted = repeat_limiter().admit(key, level, steady_ms(), due);
  }
  write_suppressed(due);
  return admitted;
}

// printf-checked at every caller (FL_* macros); the attribute tells the compiler so.
__attribute__((format(printf, 1, 0))) std::string vformat(const char* fmt, va_list ap) {
  va_list again;
  va_copy(again, ap);
  char msg[1024];
  const int n = std::vsnprintf(msg, sizeof msg, fmt, ap);
  std::string out;
  if (n >= 0 && static_cast<std::size_t>(n) < sizeof msg) {
    out.assign(msg, static_cast<std::size_t>(n));
  } else if (n > 0) {
    // Rare (an error detail of several KB): formatted again into a buffer that fits,
    // so a long line is never cut.
    out.resize(static_cast<std::size_t>(n) + 1);
    const int m = std::vsnprintf(out.data(), out.size(), fmt, again);
    out.resize(m < 0 ? 0 : std::min(out.size() - 1, static_cast<std::size_t>(m)));
  }
  va_end(again);
  return out;
}

}  // namespace

void set_repeat_policy(const RepeatPolicy& policy) {
  std::lock_guard lock(g_repeat_mu);
  repeat_limiter().set_policy(policy);
}

void write_limited(std::string_view key, Level level, std::string_view text) {
  if (admit_limited(key, level)) write(level, text);
}

void writef_limited(std::string_view key, Level level, const char* fmt, ...) {
  if (!admit_limited(key, level)) return;
  va_list ap;
  va_start(ap, fmt);
  const std::string text = vformat(fmt, ap);
  va_end(ap);
  if (!text.empty()) write(level, text);
}

void flush_suppressed(bool all) {
  std::vector<SuppressedLines> due;
  {
    std::lock_guard lock(g_repeat_mu);
    repeat_limiter().collect(steady_ms(), all, due);
  }
  write_suppressed(due);
}

bool parse_level(std::string_view text, Level& out) noexcept {
  if (text == "debug") out = Level::debug;
  else if (text == "info") out = Level::info;
  else if (text == "warn" || text == "warning") out = Level::warn;
  else if (text == "error") out = Level::error;
  else return false;
  return true;
}

const char* level_name(Level level) noexcept {
  switch (level) {
    case Level::debug: return "debug";
    case Level::info: return "info";
    case Level::warn: return "warn";
    case Level::error: return "error";
  }
  return "info";
}

void set_level(Level l) noexcept { g_level.store(l, std::memory_order_relaxed); }
Level level() noexcept { return g_level.load(std::memory_order_relaxed); }
void detect_journal() noexcept { g_journal = journal_from_env(); }

std::uint64_t wall_ms() noexcept {
  using namespace std::chrono;
  return static_cast<std::uint64_t>(duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
}

std::string iso8601_ms(std::uint64_t unix_ms) {
  const auto secs = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<unsigned>(unix_ms % 1000));
  return buf;
}

std::string format_line(Level level, std::string_view text, bool journal, std::uint64_t unix_ms) {
  std::string line;
  line.reserve(text.size() + 32);
  if (journal) {
    line += '<';
    line += std::to_string(static_cast<int>(level));
    line += '>';
  } else {
    line += iso8601_ms(unix_ms);
    line += ' ';
    line += padded_name(level);
    line += ' ';
  }
  for (char c : text) line += (c == '\n' || c == '\r') ? ' ' : c;
  return line;
}

void write(Level level, std::string_view text) {
  std::string line = format_line(level, text, g_journal.load(std::memory_order_relaxed), wall_ms());
  line += '\n';
  const char* p = line.data();
  std::size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

void writef(Level level, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const std::string text = vformat(fmt, ap);
  va_end(ap);
  if (!text.empty()) write(level, text);
}

}  // namespace fleetlink::log
