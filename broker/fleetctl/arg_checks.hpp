#pragma once
// Checks of fleetctl's numeric options, in plain words. Each returns "" when the text
// is fine, else what is wrong with it ("must be a whole number from 1 to 1000
// (got '0')"); CLI11 runs them on the text before converting it, and prints
// "--limit: " before the message.
#include <string>

namespace fleetctl {

std::string check_whole_number(const std::string& text, long min, long max);
std::string check_positive_number(const std::string& text);

}  // namespace fleetctl
