// fleetctl's checks of numeric options: plain words, never CLI11's bounds.
#include <doctest/doctest.h>

#include <limits>

#include "arg_checks.hpp"

using fleetctl::check_positive_number;
using fleetctl::check_whole_number;

TEST_CASE("fleetctl: whole numbers within bounds") {
  CHECK(check_whole_number("1", 1, 1000).empty());
  CHECK(check_whole_number("1000", 1, 1000).empty());
  CHECK(check_whole_number("0", 1, 1000) == "must be a whole number from 1 to 1000 (got '0')");
  CHECK(check_whole_number("1001", 1, 1000) == "must be a whole number from 1 to 1000 (got '1001')");
  CHECK(check_whole_number("ten", 1, 1000) == "must be a whole number from 1 to 1000 (got 'ten')");
  CHECK(check_whole_number("2.5", 1, 1000) == "must be a whole number from 1 to 1000 (got '2.5')");
  CHECK(check_whole_number("", 1, 1000) == "must be a whole number from 1 to 1000 (got '')");
  const long none = std::numeric_limits<long>::max();
  CHECK(check_whole_number("0", 0, none).empty());
  CHECK(check_whole_number("-1", 0, none) == "must be a whole number, 0 or more (got '-1')");
  CHECK(check_whole_number("99999999999999999999", 0, none) ==
        "must be a whole number, 0 or more (got '99999999999999999999')");
}

TEST_CASE("fleetctl: positive numbers") {
  CHECK(check_positive_number("30").empty());
  CHECK(check_positive_number("0.5").empty());
  CHECK(check_positive_number("-1") == "must be a positive number (got '-1')");
  CHECK(check_positive_number("0") == "must be a positive number (got '0')");
  CHECK(check_positive_number("inf") == "must be a positive number (got 'inf')");
  CHECK(check_positive_number("soon") == "must be a positive number (got 'soon')");
  for (const char* t : {"-1", "0", "x"}) CHECK(check_positive_number(t).find("1.79769e+308") == std::string::npos);
}
