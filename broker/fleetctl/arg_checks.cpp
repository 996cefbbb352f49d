#include "arg_checks.hpp"

#include <charconv>
#include <cmath>
#include <limits>

namespace fleetctl {

std::string check_whole_number(const std::string& text, long min, long max) {
  long v = 0;
  const char* b = text.data();
  const char* e = b + text.size();
  auto [p, ec] = std::from_chars(b, e, v);
  const bool whole = !text.empty() && ec == std::errc{} && p == e;
  if (whole && v >= min && v <= max) return {};
  std::string range;
  if (max == std::numeric_limits<long>::max())
    range = min == 0 ? ", 0 or more" : ", " + std::to_string(min) + " or more";
  else
    range = " from " + std::to_string(min) + " to " + std::to_string(max);
  return "must be a whole number" + range + " (got '" + text + "')";
}

std::string check_positive_number(const std::string& text) {
  double v = 0;
  const char* b = text.data();
  const char* e = b + text.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (!text.empty() && ec == std::errc{} && p == e && v > 0 && std::isfinite(v)) return {};
  return "must be a positive number (got '" + text + "')";
}

}  // namespace fleetctl
