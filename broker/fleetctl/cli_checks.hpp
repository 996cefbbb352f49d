#pragma once
// The checks of arg_checks.hpp as CLI11 validators, for every fleetctl
// subcommand's numeric options: one wording everywhere.
#include <CLI/CLI.hpp>

#include <string>

#include "arg_checks.hpp"

namespace fleetctl {

inline constexpr long kWeekSeconds = 7L * 24 * 3600;  // the longest deadline a command or job takes

inline CLI::Validator whole_number(long min, long max) {
  return CLI::Validator([min, max](std::string& text) { return check_whole_number(text, min, max); }, "");
}

inline CLI::Validator positive_number() {
  return CLI::Validator([](std::string& text) { return check_positive_number(text); }, "");
}

}  // namespace fleetctl
