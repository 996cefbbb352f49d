// SeqTracker: in order, duplicates, and a gap that stops everything after it.
#include <doctest/doctest.h>

#include "fleetlink/seq_tracker.hpp"

using namespace fleetlink;
using V = SeqTracker::Verdict;

TEST_CASE("in order from 1") {
  SeqTracker t;
  CHECK(t.expected() == 1);
  for (std::uint64_t s = 1; s <= 100; ++s) CHECK(t.observe(s) == V::in_order);
  CHECK(t.last() == 100);
  CHECK_FALSE(t.broken());
}

TEST_CASE("duplicates do not advance") {
  SeqTracker t;
  CHECK(t.observe(1) == V::in_order);
  CHECK(t.observe(2) == V::in_order);
  CHECK(t.observe(2) == V::duplicate);
  CHECK(t.observe(1) == V::duplicate);
  CHECK(t.observe(0) == V::duplicate);  // seq 0 is never valid
  CHECK(t.last() == 2);
  CHECK(t.observe(3) == V::in_order);
}

TEST_CASE("a gap breaks the tracker until reset") {
  SeqTracker t;
  CHECK(t.observe(1) == V::in_order);
  CHECK(t.observe(3) == V::gap);
  CHECK(t.broken());
  CHECK(t.expected() == 2);
  CHECK(t.observe(2) == V::gap);  // even the missing one: the connection is done
  CHECK(t.observe(4) == V::gap);
  CHECK(t.observe(1) == V::duplicate);
  t.reset();
  CHECK_FALSE(t.broken());
  CHECK(t.observe(1) == V::in_order);
}

TEST_CASE("first seq other than 1 is a gap") {
  SeqTracker t;
  CHECK(t.observe(2) == V::gap);
  CHECK(t.expected() == 1);
}
