// DedupWindow: bounds, ages on the caller's (monotonic) clock, and the file it is
// saved in: version 2 (ages), version 1 still read (a file written by an older agent).
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <limits>
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
  REQUIRE(w.save(file, 2000));
  // No temp file left behind, and the file is there.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) {
    (void)e;
    ++entries;
  }
  CHECK(entries == 1);
  const auto back = DedupWindow::load(file, 100, milliseconds{3'600'000}, 2000);
  REQUIRE(back);
  CHECK(back->size() == 50);
  CHECK(back->contains("01936d3c-5e2a-7b3c-8d4e-100000000007", 2000));
  // Saving again replaces the file atomically.
  DedupWindow w2(100, milliseconds{3'600'000});
  CHECK(w2.insert("only", 1));
  REQUIRE(w2.save(file, 1));
  const auto back2 = DedupWindow::load(file, 100, milliseconds{3'600'000}, 1);
  REQUIRE(back2);
  CHECK(back2->size() == 1);
  // Loading with a smaller bound keeps the newest.
  const auto small = DedupWindow::load(dir.path / "nothing", 5, milliseconds{1}, 0);
  REQUIRE(small);
  CHECK(small->size() == 0);
  REQUIRE(w.save(file, 2000));
  const auto five = DedupWindow::load(file, 5, milliseconds{3'600'000}, 2000);
  REQUIRE(five);
  CHECK(five->size() == 5);
  CHECK(five->contains("01936d3c-5e2a-7b3c-8d4e-100000000049", 2000));
  CHECK_FALSE(five->contains("01936d3c-5e2a-7b3c-8d4e-100000000000", 2000));
}

TEST_CASE("missing file is an empty window") {
  TempDir dir;
  const auto r = DedupWindow::load(dir.path / "absent", 10, milliseconds{1000}, 0);
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
    const auto r = DedupWindow::load(file, 10, milliseconds{1000}, 0);
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
  const auto r = w.save("/nonexistent-fleetlink-dir/sub/dedup", 0);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::io);
}

namespace {
std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}
void write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}
constexpr const char* kBoot = "01936d3c-0000-7000-8000-000000000001";
}  // namespace

TEST_CASE("entries carry their age, accepting boot_id and state") {
  DedupWindow w(10, milliseconds{10'000});
  CHECK(w.insert("a", 100, kBoot));
  CHECK(w.insert("b", 300));
  CHECK(w.insert("c", 400, "has space"));  // not a token: recorded as not known
  CHECK(w.mark_finished("b"));
  CHECK_FALSE(w.mark_finished("nope"));
  const auto a = w.find("a", 1100);
  REQUIRE(a);
  CHECK(a->age_ms == 1000);
  CHECK(a->boot_id == kBoot);
  CHECK(a->state == DedupWindow::State::accepted);
  CHECK(w.find("b", 1100)->state == DedupWindow::State::finished);
  CHECK(w.find("c", 1100)->boot_id.empty());
  CHECK_FALSE(w.find("zzz", 1100));
  const auto all = w.entries(1100);
  REQUIRE(all.size() == 3);
  CHECK(all[0].cmd_id == "a");
  CHECK(all[2].cmd_id == "c");
  // A second insert leaves the entry as it was (its boot_id, its state).
  CHECK_FALSE(w.insert("b", 500, "other-boot"));
  CHECK(w.find("b", 600)->state == DedupWindow::State::finished);
  CHECK(w.find("b", 600)->boot_id.empty());
}

TEST_CASE("erase forgets an entry, wherever it is") {
  DedupWindow w(10, milliseconds{10'000});
  for (const char* id : {"a", "b", "c"}) CHECK(w.insert(id, 1));
  CHECK(w.erase("c"));
  CHECK(w.erase("a"));
  CHECK_FALSE(w.erase("a"));
  CHECK(w.size() == 1);
  CHECK_FALSE(w.contains("c", 2));
  CHECK(w.insert("c", 2));  // seen as new again
  CHECK(w.entries(3).size() == 2);
}

TEST_CASE("version 2: ages survive a save and a load on a clock with another origin") {
  TempDir dir;
  const auto file = dir.path / "dedup";
  const auto hour = milliseconds{3'600'000};
  DedupWindow w(100, hour);
  // Accepted at 1000 and 4000 on the saving process's monotonic clock.
  CHECK(w.insert("old", 1000, kBoot));
  CHECK(w.insert("new", 4000, kBoot));
  CHECK(w.mark_finished("old"));
  REQUIRE(w.save(file, 5000));
  const std::string text = read_text(file);
  CHECK(text == std::string("fleetlink-dedup 2\n4000 f ") + kBoot + " old\n1000 a " + kBoot + " new\nend 2\n");
  // The rig rebooted: the monotonic clock starts again near 0. The time the agent
  // was not running does not count, whatever the wall clock did meanwhile.
  const auto back = DedupWindow::load(file, 100, hour, 7);
  REQUIRE(back);
  CHECK(back->find("old", 7)->age_ms == 4000);
  CHECK(back->find("new", 7)->age_ms == 1000);
  CHECK(back->find("old", 7)->state == DedupWindow::State::finished);
  CHECK(back->find("new", 7)->boot_id == kBoot);
  // "old" expires 4000 ms earlier than "new", on the new clock.
  const std::uint64_t old_expires = 7 + 3'600'000 - 4000;
  CHECK(back->contains("old", old_expires));
  CHECK_FALSE(back->contains("old", old_expires + 1));
  CHECK(back->contains("new", old_expires + 1));
  // A load at a huge clock value works the same way.
  const auto late = DedupWindow::load(file, 100, hour, 1'000'000'000'000'000ULL);
  REQUIRE(late);
  CHECK(late->find("old", 1'000'000'000'000'000ULL)->age_ms == 4000);
}

TEST_CASE("expired entries are not saved; a smaller max_age at load drops older ones") {
  TempDir dir;
  const auto file = dir.path / "dedup";
  DedupWindow w(100, milliseconds{1000});
  CHECK(w.insert("gone", 900));
  CHECK(w.insert("kept", 1500));
  REQUIRE(w.save(file, 2000));  // "gone" is 1100 ms old by then
  CHECK(read_text(file) == "fleetlink-dedup 2\n500 a - kept\nend 1\n");
  const auto strict = DedupWindow::load(file, 100, milliseconds{499}, 0);
  REQUIRE(strict);
  CHECK(strict->size() == 0);
}

TEST_CASE("a wall clock that jumps changes nothing: the window never reads a clock") {
  TempDir dir;
  const auto file = dir.path / "dedup";
  const auto week = milliseconds{168LL * 3'600'000};
  // The agent's clock is monotonic; a wall clock stepped 30 days forward (or back)
  // between save and load is not seen at all: only ages are in the file.
  DedupWindow w(100, week);
  CHECK(w.insert("c1", 50'000));
  REQUIRE(w.save(file, 60'000));
  CHECK(read_text(file).find("50000") == std::string::npos);
  for (const std::uint64_t now : {std::uint64_t{0}, std::uint64_t{60'000}, std::uint64_t{1} << 40}) {
    const auto back = DedupWindow::load(file, 100, week, now);
    REQUIRE(back);
    CHECK(back->find("c1", now)->age_ms == 10'000);
  }
  // A version-1 file holds wall-clock stamps; whether they are days in the past or
  // in the future of the current wall clock, the entries load (age 0) and count.
  const auto day = std::uint64_t{86'400'000};
  const std::uint64_t wall_now = 1'764'448'306'123ULL;
  write_text(file, "fleetlink-dedup 1\n" + std::to_string(wall_now - 30 * day) + " past\n" +
                       std::to_string(wall_now + 30 * day) + " future\nend 2\n");
  const auto v1 = DedupWindow::load(file, 100, week, 123);
  REQUIRE(v1);
  CHECK(v1->contains("past", 123));
  CHECK(v1->contains("future", 123 + week.count()));
  CHECK_FALSE(v1->contains("future", 124 + week.count()));
}

TEST_CASE("version 1 (today's agent's file) loads: age 0, no boot_id, state unknown; saved again as version 2") {
  TempDir dir;
  const auto file = dir.path / "dedup-window";
  write_text(file,
             "fleetlink-dedup 1\n1764448306123 0192f3a4-7b1c-7def-8abc-0123456789ab\n"
             "1764448307000 0192f3a4-7b1c-7def-8abc-0123456789ac\nend 2\n");
  const auto w = DedupWindow::load(file, 100, milliseconds{3'600'000}, 900);
  REQUIRE(w);
  REQUIRE(w->size() == 2);
  const auto e = w->find("0192f3a4-7b1c-7def-8abc-0123456789ab", 900);
  REQUIRE(e);
  CHECK(e->age_ms == 0);
  CHECK(e->boot_id.empty());
  CHECK(e->state == DedupWindow::State::unknown);
  CHECK(w->entries(900)[1].cmd_id == "0192f3a4-7b1c-7def-8abc-0123456789ac");  // order kept
  REQUIRE(w->save(file, 1000));
  CHECK(read_text(file) ==
        "fleetlink-dedup 2\n100 ? - 0192f3a4-7b1c-7def-8abc-0123456789ab\n"
        "100 ? - 0192f3a4-7b1c-7def-8abc-0123456789ac\nend 2\n");
  const auto again = DedupWindow::load(file, 100, milliseconds{3'600'000}, 0);
  REQUIRE(again);
  CHECK(again->find("0192f3a4-7b1c-7def-8abc-0123456789ac", 0)->state == DedupWindow::State::unknown);
}

TEST_CASE("malformed version-2 files are errors, never a partial window") {
  TempDir dir;
  const auto file = dir.path / "dedup";
  auto load_error = [&](const std::string& text) -> std::string {
    write_text(file, text);
    const auto r = DedupWindow::load(file, 10, milliseconds{1000}, 0);
    if (r) return "ok";
    CHECK(r.error().code == Errc::malformed);
    return r.error().detail;
  };
  const std::string h = "fleetlink-dedup 2\n";
  CHECK(load_error(h + "5 a - x\n6 f b1 y\nend 2\n") == "ok");
  // Truncated lines, and files cut short.
  CHECK(load_error(h + "5 a -\nend 1\n").find("bad line 2") != std::string::npos);
  CHECK(load_error(h + "5 a\nend 1\n").find("bad line 2") != std::string::npos);
  CHECK(load_error(h + "5\nend 1\n").find("bad line 2") != std::string::npos);
  CHECK(load_error(h + "\nend 0\n").find("bad line 2") != std::string::npos);
  CHECK(load_error(h + "5 a - x\n5 a - ").find("bad line 3") != std::string::npos);
  CHECK(load_error(h + "5 a - x\n").find("missing footer") != std::string::npos);
  CHECK(load_error(h).find("missing footer") != std::string::npos);
  CHECK(load_error("fleetlink-dedup").find("bad header") != std::string::npos);
  // Bad numbers.
  for (const char* age : {"x", "-1", "+1", "1.5", "0x10", "18446744073709551616", " 1"}) {
    CAPTURE(age);
    CHECK(load_error(h + age + " a - x\nend 1\n").find("bad line 2") != std::string::npos);
  }
  // A huge but valid age is only old: expired, dropped, not an error.
  CHECK(load_error(h + "18446744073709551615 a - x\nend 1\n") == "ok");
  // Bad fields.
  CHECK(load_error(h + "5 x - x\nend 1\n").find("bad line 2") != std::string::npos);  // state
  CHECK(load_error(h + "5 af - x\nend 1\n").find("bad line 2") != std::string::npos);
  CHECK(load_error(h + "5 a - x extra\nend 1\n").find("bad line 2") != std::string::npos);
  CHECK(load_error(h + "5  a - x\nend 1\n").find("bad line 2") != std::string::npos);
  CHECK(load_error(h + "5 a " + std::string(129, 'b') + " x\nend 1\n").find("bad line 2") != std::string::npos);
  CHECK(load_error(h + "5 a - x\t\nend 1\n").find("bad line 2") != std::string::npos);
  CHECK(load_error(h + "5 a - x\n6 f - x\nend 2\n").find("duplicate id") != std::string::npos);
  // Footers: wrong or huge counts, data after them.
  CHECK(load_error(h + "5 a - x\nend 2\n").find("bad footer") != std::string::npos);
  CHECK(load_error(h + "5 a - x\nend 0\n").find("bad footer") != std::string::npos);
  CHECK(load_error(h + "5 a - x\nend 18446744073709551617\n").find("bad footer") != std::string::npos);
  CHECK(load_error(h + "5 a - x\nend 99999999999999999999999999\n").find("bad footer") != std::string::npos);
  CHECK(load_error(h + "5 a - x\nend -1\n").find("bad footer") != std::string::npos);
  CHECK(load_error(h + "5 a - x\nend 1\n6 a - y\n").find("data after footer") != std::string::npos);
  // A line far longer than any save() writes is refused without reading it whole.
  CHECK(load_error(h + std::string(100'000, '7') + " a - x\nend 1\n").find("longer than") != std::string::npos);
  // A newer format is named, not silently misread.
  CHECK(load_error("fleetlink-dedup 3\nend 0\n").find("unsupported version '3'") != std::string::npos);
}

TEST_CASE("a file with more entries than max_entries keeps the newest; memory stays bounded") {
  TempDir dir;
  const auto file = dir.path / "dedup";
  std::string text = "fleetlink-dedup 2\n";
  constexpr int kLines = 20'000;
  for (int i = 0; i < kLines; ++i) text += std::to_string(kLines - i) + " f - id" + std::to_string(i) + "\n";
  text += "end " + std::to_string(kLines) + "\n";
  write_text(file, text);
  const auto w = DedupWindow::load(file, 3, milliseconds{1'000'000}, 0);
  REQUIRE(w);
  CHECK(w->size() == 3);
  CHECK(w->contains("id19999", 0));
  CHECK(w->contains("id19997", 0));
  CHECK_FALSE(w->contains("id19996", 0));
}

TEST_CASE("extreme clocks and bounds do not overflow") {
  DedupWindow w(10, milliseconds::max());
  CHECK(w.insert("a", 0));
  CHECK(w.contains("a", std::numeric_limits<std::uint64_t>::max()));
  CHECK(w.insert("b", std::numeric_limits<std::uint64_t>::max()));
  CHECK(w.contains("b", 0));  // a clock that went backwards: still seen
  DedupWindow none(10, milliseconds{0});
  CHECK(none.insert("a", 5));
  CHECK(none.contains("a", 5));
  CHECK_FALSE(none.contains("a", 6));
}
