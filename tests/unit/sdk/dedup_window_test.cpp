// DedupWindow: bounds and the file it is saved in.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "fleetlink/dedup_window.hpp"

using namespace fleetlink;
using std::chrono::milliseconds;
namespace fs = std::filesystem;

namespace {
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("fleetlink-dedup-test-" + std::to_string(::getpid()) + "-" +
            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};
}  // namespace

TEST_CASE("insert and contains") {
  DedupWindow w(10, milliseconds{1000});
  CHECK(w.insert("a", 100));
  CHECK_FALSE(w.insert("a", 200));
  CHECK(w.contains("a", 200));
  CHECK_FALSE(w.contains("b", 200));
  CHECK(w.size() == 1);
}

TEST_CASE("bounded by count: the oldest goes first") {
  DedupWindow w(3, milliseconds{1'000'000});
  CHECK(w.insert("a", 1));
  CHECK(w.insert("b", 2));
  CHECK(w.insert("c", 3));
  CHECK(w.insert("d", 4));
  CHECK(w.size() == 3);
  CHECK_FALSE(w.contains("a", 5));
  CHECK(w.contains("b", 5));
  CHECK(w.contains("d", 5));
}

TEST_CASE("bounded by age") {
  DedupWindow w(100, milliseconds{1000});
  CHECK(w.insert("a", 0));
  CHECK(w.insert("b", 500));
  CHECK(w.contains("a", 1000));
  CHECK_FALSE(w.contains("a", 1001));
  w.prune(1001);
  CHECK(w.size() == 1);
  CHECK(w.contains("b", 1001));
  CHECK(w.insert("a", 1001));  // expired: may be seen again
  w.prune(5000);
  CHECK(w.size() == 0);
}

TEST_CASE("save and load round trip") {
  TempDir dir;
  const auto file = dir.path / "dedup";
  DedupWindow w(100, milliseconds{3'600'000});
  for (int i = 0; i < 50; ++i) {
    CHECK(w.insert("01936d3c-5e2a-7b3c-8d4e-" + std::to_string(100000000000 + i), 1000 + i));
  }
  REQUIRE(w.save(file));
  // No temp file left behind, and the file is there.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) {
    (void)e;
    ++entries;
  }
  CHECK(entries == 1);
  const auto back = DedupWindow::load(file, 100, milliseconds{3'600'000});
  REQUIRE(back);
  CHECK(back->size() == 50);
  CHECK(back->contains("01936d3c-5e2a-7b3c-8d4e-100000000007", 2000));
  // Saving again replaces the file atomically.
  DedupWindow w2(100, milliseconds{3'600'000});
  CHECK(w2.insert("only", 1));
  REQUIRE(w2.save(file));
  const auto back2 = DedupWindow::load(file, 100, milliseconds{3'600'000});
  REQUIRE(back2);
  CHECK(back2->size() == 1);
  // Loading with a smaller bound keeps the newest.
  const auto small = DedupWindow::load(dir.path / "nothing", 5, milliseconds{1});
  REQUIRE(small);
  CHECK(small->size() == 0);
  REQUIRE(w.save(file));
  const auto five = DedupWindow::load(file, 5, milliseconds{3'600'000});
  REQUIRE(five);
  CHECK(five->size() == 5);
  CHECK(five->contains("01936d3c-5e2a-7b3c-8d4e-100000000049", 2000));
  CHECK_FALSE(five->contains("01936d3c-5e2a-7b3c-8d4e-100000000000", 2000));
}

TEST_CASE("missing file is an empty window") {
  TempDir dir;
  const auto r = DedupWindow::load(dir.path / "absent", 10, milliseconds{1000});
  REQUIRE(r);
  CHECK(r->size() == 0);
}

TEST_CASE("corrupt files are errors") {
  TempDir dir;
  const auto file = dir.path / "dedup";
  auto write = [&](const std::string& text) {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
  };
  auto load_code = [&] {
    const auto r = DedupWindow::load(file, 10, milliseconds{1000});
    return r ? Errc::ok : r.error().code;
  };
  write("fleetlink-dedup 1\n1 a\nend 1\n");
  CHECK(load_code() == Errc::ok);
  write("");
  CHECK(load_code() == Errc::malformed);
  write("garbage\n");
  CHECK(load_code() == Errc::malformed);
  write("fleetlink-dedup 1\n1 a\n");  // cut short: no footer
  CHECK(load_code() == Errc::malformed);
  write("fleetlink-dedup 1\n1 a\nend 2\n");  // count mismatch
  CHECK(load_code() == Errc::malformed);
  write("fleetlink-dedup 1\nx a\nend 1\n");  // bad time
  CHECK(load_code() == Errc::malformed);
  write("fleetlink-dedup 1\n1 a\n2 a\nend 2\n");  // duplicate
  CHECK(load_code() == Errc::malformed);
  write(std::string("fleetlink-dedup 1\n1 a\0b\nend 1\n", 31));
  CHECK(load_code() == Errc::malformed);
}

TEST_CASE("save into a missing directory is an io error") {
  DedupWindow w(10, milliseconds{1000});
  const auto r = w.save("/nonexistent-fleetlink-dir/sub/dedup");
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::io);
}
