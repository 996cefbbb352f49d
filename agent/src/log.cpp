#include "log.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>

namespace fleetlink::agent {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::info)};
std::atomic<bool> g_journal{false};

const char* word(LogLevel level) {
  switch (level) {
    case LogLevel::error: return "ERROR ";
    case LogLevel::warn: return "WARN  ";
    case LogLevel::info: return "INFO  ";
    case LogLevel::debug: return "DEBUG ";
  }
  return "";
}
}  // namespace

bool parse_log_level(std::string_view text, LogLevel& out) noexcept {
  if (text == "debug") out = LogLevel::debug;
  else if (text == "info") out = LogLevel::info;
  else if (text == "warn" || text == "warning") out = LogLevel::warn;
  else if (text == "error") out = LogLevel::error;
  else return false;
  return true;
}

void set_log_level(LogLevel level) noexcept { g_level = static_cast<int>(level); }

bool log_enabled(LogLevel level) noexcept { return static_cast<int>(level) <= g_level.load(); }

void detect_journal() noexcept {
  const char* js = std::getenv("JOURNAL_STREAM");
  g_journal = js != nullptr && *js != '\0';
}

std::string format_log_line(LogLevel level, std::string_view text, bool journal) {
  std::string line;
  line.reserve(text.size() + 8);
  if (journal) {
    line += '<';
    line += std::to_string(static_cast<int>(level));
    line += '>';
  } else {
    line += word(level);
  }
  // One event, one line: embedded newlines would split it in journald.
  for (char c : text) line += (c == '\n' || c == '\r') ? ' ' : c;
  return line;
}

void log_line(LogLevel level, std::string_view text) {
  std::string line = format_log_line(level, text, g_journal.load());
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

}  // namespace fleetlink::agent
