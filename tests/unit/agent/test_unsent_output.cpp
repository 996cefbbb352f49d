// Output chunks a lost connection never wrote are dropped bytes of their command,
// never silently gone (UnsentOutput, make_result).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "agent.hpp"
#include "unsent_output.hpp"

using namespace fleetlink;
using namespace fleetlink::agent;

namespace {
Message chunk(const std::string& cmd, std::uint64_t offset, std::size_t n) {
  msg::OutputChunk c;
  c.cmd_id = cmd;
  c.offset = offset;
  c.data.assign(n, 'x');
  return Message{std::move(c)};
}
Message result(const std::string& cmd, std::uint64_t dropped) {
  msg::Result r;
  r.cmd_id = cmd;
  r.dropped_bytes = dropped;
  return Message{std::move(r)};
}
}  // namespace

TEST_CASE("unsent output: a result given back with its chunks gets their bytes as dropped") {
  UnsentOutput u;
  std::vector<Message> batch;
  batch.push_back(chunk("a", 0, 100));
  batch.push_back(chunk("a", 100, 50));
  batch.push_back(result("a", 7));
  auto results = u.absorb(std::move(batch));
  REQUIRE(results.size() == 1);
  CHECK(results[0].cmd_id == "a");
  CHECK(results[0].dropped_bytes == 157);
  CHECK(results[0].truncated);
  CHECK(u.empty());
}

TEST_CASE("unsent output: chunks of a command still running wait for its result") {
  UnsentOutput u;
  std::vector<Message> batch;
  batch.push_back(chunk("run", 0, 16384));
  batch.push_back(chunk("other", 0, 10));
  batch.push_back(result("other", 0));
  batch.push_back(chunk("run", 16384, 16384));
  batch.push_back(chunk("run", 32768, 0));  // an end-of-stream marker carries no bytes
  auto results = u.absorb(std::move(batch));
  REQUIRE(results.size() == 1);
  CHECK(results[0].dropped_bytes == 10);
  CHECK(u.pending_ids() == std::vector<std::string>{"run"});
  // A second lost connection adds to the same command.
  std::vector<Message> again;
  again.push_back(chunk("run", 40000, 1000));
  CHECK(u.absorb(std::move(again)).empty());
  CHECK(u.take("run") == 32768 + 1000);
  CHECK(u.take("run") == 0);
  CHECK(u.empty());
}

TEST_CASE("unsent output: add_dropped marks the result truncated only when bytes were dropped") {
  msg::Result r;
  add_dropped(r, 0);
  CHECK_FALSE(r.truncated);
  CHECK(r.dropped_bytes == 0);
  add_dropped(r, 5);
  CHECK(r.truncated);
  CHECK(r.dropped_bytes == 5);
}

TEST_CASE("make_result: stream bytes dropped on the rig make the result truncated") {
  Outcome o;
  o.output = "short";
  msg::Result r = make_result("c", o, 1, 2, 4096);
  CHECK(r.dropped_bytes == 4096);
  CHECK(r.truncated);
  msg::Result clean = make_result("c", o, 1, 2, 0);
  CHECK(clean.dropped_bytes == 0);
  CHECK_FALSE(clean.truncated);
}
