#pragma once
// Agent logging: one line per event on stderr, with a level. Under systemd
// (JOURNAL_STREAM set) lines carry sd-daemon "<N>" priority prefixes so journald
// records the level; otherwise a word ("INFO ") does. Thread-safe: each line is
// one write(2).
#include <sstream>
#include <string>
#include <string_view>

namespace fleetlink::agent {

enum class LogLevel : int { error = 3, warn = 4, info = 6, debug = 7 };

// "debug" | "info" | "warn" | "error" (also "warning").
bool parse_log_level(std::string_view text, LogLevel& out) noexcept;
void set_log_level(LogLevel level) noexcept;
bool log_enabled(LogLevel level) noexcept;
// Re-reads JOURNAL_STREAM; called once at start (tests call it after setenv).
void detect_journal() noexcept;
// The line as it would be written (without the newline): for tests.
std::string format_log_line(LogLevel level, std::string_view text, bool journal);
void log_line(LogLevel level, std::string_view text);

}  // namespace fleetlink::agent

// FL_LOG(info, "ack seq=" << seq << " cmd=" << id);
#define FL_LOG(level, expr)                                                          \
  do {                                                                               \
    if (::fleetlink::agent::log_enabled(::fleetlink::agent::LogLevel::level)) {      \
      std::ostringstream fl_log_stream_;                                             \
      fl_log_stream_ << expr;                                                        \
      ::fleetlink::agent::log_line(::fleetlink::agent::LogLevel::level,              \
                                   fl_log_stream_.str());                            \
    }                                                                                \
  } while (0)
