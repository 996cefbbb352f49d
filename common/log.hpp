#pragma once
// The one logger of fleetlink-agent and fleetlink-broker: one line per event on
// stderr, "2026-11-29T20:31:46.123Z INFO  hello rig=... outcome=...". Under
// systemd (JOURNAL_STREAM set) a line starts with its sd-daemon "<N>" priority
// instead, and the journal keeps its own timestamps. Each line is one write(2),
// so threads (the agent's executors) never interleave within a line.
//
//   FL_INFO("hello rig=%s boot=%s", rig.c_str(), boot.c_str());
//
// printf-style on purpose: the compiler checks every format against its
// arguments, and a disabled level costs one comparison.
#include <cstdint>
#include <string>
#include <string_view>

namespace fleetlink::log {

// Ordered by severity; the numbers are syslog's.
enum class Level : std::uint8_t { error = 3, warn = 4, info = 6, debug = 7 };

// "debug" | "info" | "warn" (or "warning") | "error".
bool parse_level(std::string_view text, Level& out) noexcept;
const char* level_name(Level level) noexcept;

void set_level(Level level) noexcept;
Level level() noexcept;
inline bool enabled(Level l) noexcept { return static_cast<int>(l) <= static_cast<int>(level()); }

// Re-reads JOURNAL_STREAM (read once at start-up; tests call it after setenv).
void detect_journal() noexcept;

// The line as written, without its newline: embedded newlines become spaces, so
// one event stays one journal entry. `unix_ms` is used only outside the journal.
std::string format_line(Level level, std::string_view text, bool journal, std::uint64_t unix_ms);

void write(Level level, std::string_view text);
void writef(Level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Lines that repeat (common/log_repeat.hpp): at most policy.lines per key in
// each interval, then one line with the count of the rest. The key says what the
// line is about ("enqueue refused rig=rig-0414"), so one rig's flood never hides
// another's first warning. Thread-safe; a suppressed line is not even formatted.
struct RepeatPolicy;
void set_repeat_policy(const RepeatPolicy& policy);
void write_limited(std::string_view key, Level level, std::string_view text);
void writef_limited(std::string_view key, Level level, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
// Writes the counts of intervals that have ended (all: every count, ended or not,
// as a daemon stops). For a periodic timer; limited lines also do it as they come.
void flush_suppressed(bool all = false);

// ISO-8601 UTC with milliseconds: "2026-11-29T20:31:46.123Z".
std::string iso8601_ms(std::uint64_t unix_ms);
// The system clock in Unix milliseconds.
std::uint64_t wall_ms() noexcept;

}  // namespace fleetlink::log

#define FL_LOG(level, ...)                                  \
  do {                                                      \
    if (::fleetlink::log::enabled(level))                   \
      ::fleetlink::log::writef(level, __VA_ARGS__);         \
  } while (0)
#define FL_LOG_LIMITED(key, level, ...)                     \
  do {                                                      \
    if (::fleetlink::log::enabled(level))                   \
      ::fleetlink::log::writef_limited(key, level, __VA_ARGS__); \
  } while (0)
#define FL_WARN_LIMITED(key, ...) FL_LOG_LIMITED(key, ::fleetlink::log::Level::warn, __VA_ARGS__)
#define FL_INFO_LIMITED(key, ...) FL_LOG_LIMITED(key, ::fleetlink::log::Level::info, __VA_ARGS__)
#define FL_DEBUG(...) FL_LOG(::fleetlink::log::Level::debug, __VA_ARGS__)
#define FL_INFO(...) FL_LOG(::fleetlink::log::Level::info, __VA_ARGS__)
#define FL_WARN(...) FL_LOG(::fleetlink::log::Level::warn, __VA_ARGS__)
#define FL_ERROR(...) FL_LOG(::fleetlink::log::Level::error, __VA_ARGS__)
