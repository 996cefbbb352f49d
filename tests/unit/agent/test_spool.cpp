// Spool and result store: bounds, persistence, order.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <random>

#include "agent.hpp"
#include "fleetlink/uuid.hpp"
#include "result_store.hpp"

using namespace fleetlink;
using namespace fleetlink::agent;
namespace fs = std::filesystem;

namespace {
struct TempDir {
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("fleetlink-agent-test-" + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path path;
};
// The codec only accepts UUIDs as cmd_ids: a fixed one per test name.
std::string uid(const std::string& name) {
  static std::map<std::string, std::string> ids;
  auto it = ids.find(name);
  if (it == ids.end()) it = ids.emplace(name, uuid_v7().to_string()).first;
  return it->second;
}
msg::Result result(const std::string& name, std::uint64_t at = 1) {
  msg::Result r;
  r.cmd_id = uid(name);
  r.status = msg::Status::ok;
  r.output = {'h', 'i'};
  r.finished_at_ms = at;
  return r;
}
}  // namespace

TEST_CASE("the spool keeps results in order across a restart") {
  TempDir t;
  {
    Spool s(t.path / "spool", 10);
    REQUIRE(s.load());
    REQUIRE(s.push(result("a")));
    REQUIRE(s.push(result("b")));
    CHECK(s.size() == 2);
  }
  Spool s(t.path / "spool", 10);
  REQUIRE(s.load());
  auto p = s.pending();
  REQUIRE(p.size() == 2);
  CHECK(p[0].second.cmd_id == uid("a"));
  CHECK(p[1].second.cmd_id == uid("b"));
  CHECK(p[0].second.output == Bytes{'h', 'i'});
  s.remove(p[0].first);
  Spool again(t.path / "spool", 10);
  REQUIRE(again.load());
  REQUIRE(again.size() == 1);
  CHECK(again.pending()[0].second.cmd_id == uid("b"));
}

TEST_CASE("the spool is bounded: the oldest result is dropped and named") {
  TempDir t;
  Spool s(t.path / "spool", 3);
  REQUIRE(s.load());
  for (const char* id : {"a", "b", "c"}) {
    auto r = s.push(result(id));
    REQUIRE(r);
    CHECK_FALSE(r->has_value());
  }
  auto r = s.push(result("d"));
  REQUIRE(r);
  REQUIRE(r->has_value());
  CHECK(**r == uid("a"));
  CHECK(s.size() == 3);
  std::size_t files = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(t.path / "spool")) ++files;
  CHECK(files == 3);
  // A smaller bound on restart trims the oldest.
  Spool smaller(t.path / "spool", 2);
  REQUIRE(smaller.load());
  CHECK(smaller.size() == 2);
  CHECK(smaller.pending()[0].second.cmd_id == uid("c"));
}

TEST_CASE("the spool drops torn files on load") {
  TempDir t;
  fs::create_directories(t.path / "spool");
  REQUIRE(write_file_atomic(t.path / "spool" / "00000000000000000007.result", Bytes{0xc1, 0x00}));
  Spool s(t.path / "spool", 3);
  REQUIRE(s.load());
  CHECK(s.size() == 0);
  REQUIRE(s.push(result("x")));
  CHECK(s.pending()[0].first == 1);
}

TEST_CASE("the result store answers by cmd_id, is bounded, and survives a restart") {
  TempDir t;
  {
    ResultStore rs(t.path / "results", 2);
    REQUIRE(rs.load());
    REQUIRE(rs.put(result("c1", 1)));
    REQUIRE(rs.put(result("c2", 2)));
    REQUIRE(rs.put(result("c3", 3)));
    CHECK(rs.size() == 2);
    CHECK_FALSE(rs.get(uid("c1")));
    CHECK(rs.get(uid("c3"))->cmd_id == uid("c3"));
  }
  ResultStore rs(t.path / "results", 2);
  REQUIRE(rs.load());
  CHECK(rs.size() == 2);
  CHECK(rs.get(uid("c2")));
  CHECK(rs.get(uid("c3")));
  CHECK(rs.ids() == std::vector<std::string>{uid("c2"), uid("c3")});
}

TEST_CASE("cmd_ids that are not safe file names are kept in memory only") {
  TempDir t;
  ResultStore rs(t.path / "results", 5);
  REQUIRE(rs.load());
  msg::Result bad = result("x");
  bad.cmd_id = "../escape";
  CHECK_FALSE(rs.put(bad));
  CHECK(rs.get("../escape"));
  CHECK_FALSE(fs::exists(t.path / "escape.result"));
  CHECK(safe_file_stem("0192f3a4-7b1c-7def-8abc-0123456789ab"));
  CHECK_FALSE(safe_file_stem(".hidden"));
  CHECK_FALSE(safe_file_stem("a/b"));
}

TEST_CASE("make_result caps output at the result limit and counts what was dropped") {
  Outcome o;
  o.output.assign(kMaxResultOutput + 100, 'x');
  o.dropped_bytes = 5;
  auto r = make_result("c", o, 10, 20, 7);
  CHECK(r.output.size() == kMaxResultOutput);
  CHECK(r.truncated);
  CHECK(r.dropped_bytes == 112);
  CHECK(r.started_at_ms == 10);
  CHECK(r.finished_at_ms == 20);
}
