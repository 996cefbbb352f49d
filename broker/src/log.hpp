#pragma once
// One line per event on stderr: "2026-11-29T20:31:46.123Z INFO  hello rig=... outcome=...".
#include <cstdint>

#include "config.hpp"

namespace fleetlink::broker {

void set_log_level(LogLevel level) noexcept;
bool log_enabled(LogLevel level) noexcept;
void log_line(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// ISO-8601 UTC with milliseconds.
std::string iso8601_ms(std::uint64_t unix_ms);
std::uint64_t wall_ms() noexcept;

}  // namespace fleetlink::broker

#define FL_LOG(level, ...)                                                   \
  do {                                                                       \
    if (::fleetlink::broker::log_enabled(level))                             \
      ::fleetlink::broker::log_line(level, __VA_ARGS__);                     \
  } while (0)
#define FL_DEBUG(...) FL_LOG(::fleetlink::broker::LogLevel::debug, __VA_ARGS__)
#define FL_INFO(...) FL_LOG(::fleetlink::broker::LogLevel::info, __VA_ARGS__)
#define FL_WARN(...) FL_LOG(::fleetlink::broker::LogLevel::warn, __VA_ARGS__)
#define FL_ERROR(...) FL_LOG(::fleetlink::broker::LogLevel::error, __VA_ARGS__)
