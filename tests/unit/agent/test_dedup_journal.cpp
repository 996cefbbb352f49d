// The dedup record as an append-only journal (format 3): group commit, a torn last
// record after a crash, corruption anywhere else, compaction, and the upgrade from
// the files earlier agents wrote.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "command_ledger.hpp"
#include "dedup_journal.hpp"

using namespace fleetlink;
using namespace fleetlink::agent;
namespace fs = std::filesystem;
using State = DedupWindow::State;

namespace {

constexpr const char* kBoot = "01936d3c-0000-7000-8000-00000000000a";
constexpr const char* kBoot2 = "01936d3c-0000-7000-8000-00000000000b";
const auto kWeek = std::chrono::hours(168);

struct TempDir {
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("fleetlink-journal-test-" + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path path;
};

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

DedupWindow::Entry entry(const char* id, State st = State::accepted, const char* boot = kBoot) {
  return DedupWindow::Entry{id, 0, boot, st};
}

std::string header() { return std::string(kJournalHeader) + "\n"; }

std::string parse_error(const std::string& text) {
  auto r = parse_journal(text, 100, kWeek, 0);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::malformed);
  return r.error().detail;
}

struct FakeClock {
  std::shared_ptr<std::uint64_t> now = std::make_shared<std::uint64_t>(1000);
  CommandLedger::Clock fn() const {
    return [n = now] { return *n; };
  }
};

}  // namespace

TEST_CASE("journal lines: a fixed shape with check digits over the rest of the line") {
  const std::string line = journal_entry_line(-5, entry("c1"));
  CHECK(line.rfind(std::string("e -5 a ") + kBoot + " c1 ", 0) == 0);
  CHECK(line.back() == '\n');
  CHECK(line.size() == std::string("e -5 a ").size() + std::strlen(kBoot) + 3 + 9 + 1);
  CHECK(journal_entry_line(0, entry("c1", State::unknown, "")).rfind("e 0 ? - c1 ", 0) == 0);
  CHECK(journal_finished_line(7, "c1").rfind("f 7 c1 ", 0) == 0);
  CHECK(journal_check("") == "811c9dc5");  // FNV-1a 32 of nothing: its offset basis
  CHECK(journal_check("a") == "e40c292c");
  CHECK(is_journal(header() + "x"));
  CHECK_FALSE(is_journal("fleetlink-dedup 2\nend 0\n"));
  CHECK_FALSE(is_journal("fleetlink-dedup 30\n"));
}

TEST_CASE("a snapshot and the records appended after it give back the window, ages from the newest record") {
  DedupWindow w(100, kWeek);
  w.insert("old", 1000, kBoot);
  w.mark_finished("old");
  w.insert("mid", 4000, "");
  std::string text = journal_snapshot(w, 6000);
  CHECK(text == header() + journal_entry_line(-5000, DedupWindow::Entry{"old", 5000, kBoot, State::finished}) +
                    journal_entry_line(-2000, DedupWindow::Entry{"mid", 2000, "", State::accepted}));
  // Appended by the same process 300 and 700 ms after that rewrite.
  text += journal_entry_line(300, entry("new"));
  text += journal_finished_line(700, "mid");
  text += journal_finished_line(700, "never-recorded");  // dropped by a rewrite: nothing to mark

  auto r = parse_journal(text, 100, kWeek, 50);  // read by a later process, whose clock reads 50
  REQUIRE(r);
  CHECK(r->records == 5);
  CHECK_FALSE(r->torn_tail);
  const auto es = r->window.entries(50);
  REQUIRE(es.size() == 3);
  CHECK(es[0] == DedupWindow::Entry{"old", 5700, kBoot, State::finished});
  CHECK(es[1] == DedupWindow::Entry{"mid", 2700, "", State::finished});
  CHECK(es[2] == DedupWindow::Entry{"new", 400, kBoot, State::accepted});
}

TEST_CASE("the window's bounds hold on reading, and an entry recorded again replaces the earlier one") {
  std::string text = header();
  for (int i = 0; i < 5; ++i) text += journal_entry_line(i, entry(("c" + std::to_string(i)).c_str()));
  text += journal_entry_line(10, entry("c1", State::accepted, kBoot2));  // expired and accepted again
  auto r = parse_journal(text, 3, kWeek, 0);
  REQUIRE(r);
  const auto es = r->window.entries(0);
  REQUIRE(es.size() == 3);  // the newest three
  CHECK(es[0].cmd_id == "c3");
  CHECK(es[1].cmd_id == "c4");
  CHECK(es[2].cmd_id == "c1");
  CHECK(es[2].boot_id == kBoot2);
  // Older than max_age by the newest record: not kept.
  auto aged = parse_journal(header() + journal_entry_line(-5000, entry("a")) + journal_entry_line(1000, entry("b")),
                            100, std::chrono::milliseconds(3000), 0);
  REQUIRE(aged);
  CHECK(aged->window.size() == 1);
  CHECK(aged->window.contains("b", 0));
}

TEST_CASE("a last record cut short by a crash is ignored, wherever it was cut") {
  const std::string base = header() + journal_entry_line(0, entry("kept"));
  const std::string last = journal_entry_line(5, entry("torn"));
  for (std::size_t cut = 1; cut < last.size(); ++cut) {  // cut == size() would be the whole line
    CAPTURE(cut);
    auto r = parse_journal(base + last.substr(0, cut), 100, kWeek, 0);
    REQUIRE(r);
    CHECK(r->torn_tail);
    CHECK(r->records == 1);
    CHECK(r->window.contains("kept", 0));
    CHECK_FALSE(r->window.contains("torn", 0));
  }
  // Zeros where the data never reached the disk are a torn tail too.
  auto zeros = parse_journal(base + std::string(64, '\0'), 100, kWeek, 0);
  REQUIRE(zeros);
  CHECK(zeros->torn_tail);
  CHECK(zeros->window.size() == 1);
}

TEST_CASE("corruption anywhere but a torn tail is an error naming the line, never a quietly different window") {
  const std::string l1 = journal_entry_line(-10, entry("c1"));
  const std::string l2 = journal_finished_line(3, "c1");
  const std::string l3 = journal_entry_line(4, entry("c2"));
  const std::string good = header() + l1 + l2 + l3;
  REQUIRE(parse_journal(good, 100, kWeek, 0));
  // Any one byte changed in a complete record (other than into a newline) is caught by its check digits.
  for (std::size_t i = header().size(); i < good.size(); ++i) {
    if (good[i] == '\n') continue;
    std::string bad = good;
    bad[i] = good[i] == 'x' ? 'y' : 'x';
    CAPTURE(i);
    const auto err = parse_error(bad);
    CHECK(err.rfind("line ", 0) == 0);
  }
  // A lost newline joins two records into one that is not a record.
  CHECK(parse_error(header() + l1.substr(0, l1.size() - 1) + l2 + l3).find("line 2:") == 0);

  const auto rec = [](const std::string& body) { return body + " " + journal_check(body) + "\n"; };
  CHECK(parse_error("fleetlink-dedup 2\n") == "line 1: not a format-3 header (expected 'fleetlink-dedup 3')");
  CHECK(parse_error("fleetlink-dedup 3") .find("line 1: not a format-3 header") == 0);  // no newline
  CHECK(parse_error(header() + "\n" + l1) == "line 2: not a record");
  CHECK(parse_error(header() + l1 + "e 1 a - c3 00000000\n" + l3) == "line 3: check digits do not match");
  CHECK(parse_error(header() + rec("x 1 c1")) == "line 2: not a record");
  CHECK(parse_error(header() + rec("e 1 a - c1 extra")) == "line 2: not a record");
  CHECK(parse_error(header() + rec("e 1 a  c1")) == "line 2: not a record");  // an empty field
  CHECK(parse_error(header() + rec("e 1 a -")) == "line 2: not a record");
  CHECK(parse_error(header() + rec("f 1")) == "line 2: not a record");
  CHECK(parse_error(header() + rec("e 1.5 a - c1")) == "line 2: bad time");
  CHECK(parse_error(header() + rec("e 99999999999999999999 a - c1")) == "line 2: bad time");
  CHECK(parse_error(header() + rec("f -x c1")) == "line 2: bad time");
  CHECK(parse_error(header() + rec("e 1 z - c1")) == "line 2: bad state");
  CHECK(parse_error(header() + rec("e 1 ab - c1")) == "line 2: bad state");
  CHECK(parse_error(header() + rec("e 1 a - " + std::string(129, 'c'))) == "line 2: bad cmd_id");
  CHECK(parse_error(header() + rec("e 1 a " + std::string(129, 'b') + " c1")) == "line 2: bad boot_id");
  CHECK(parse_error(header() + rec("e 1 a - c\tid")) == "line 2: bad cmd_id");
  CHECK(parse_error(header() + std::string(600, 'e') + "\n") == "line 2: longer than 512 bytes");
}

TEST_CASE("group commit: the commands staged in one turn share one append and one fdatasync") {
  TempDir t;
  const fs::path file = t.path / "dedup-window";
  FakeClock clock;
  CommandLedger l(DedupWindow(100, kWeek), file, kBoot, clock.fn());
  REQUIRE(l.save());  // at start: rewritten
  CHECK(l.rewrites() == 1);
  CHECK(l.stage("c1"));
  CHECK(l.stage("c2"));
  CHECK_FALSE(l.stage("c1"));  // already staged: a duplicate
  CHECK(l.staged() == 2);
  CHECK(read_text(file) == header());  // nothing on disk before the commit
  *clock.now += 3;
  REQUIRE(l.commit());
  CHECK(l.staged() == 0);
  CHECK(l.rewrites() == 1);  // appended, not rewritten
  CHECK(read_text(file) == header() + journal_entry_line(0, entry("c1")) + journal_entry_line(0, entry("c2")));
  // A crash now (no save at stop): the next process knows both.
  auto back = load_command_record(file, 100, kWeek, 0);
  REQUIRE(back);
  CHECK(back->contains("c1", 0));
  CHECK(back->contains("c2", 0));
}

TEST_CASE("a failed commit records none of its turn's commands; the next commit rewrites the file whole") {
  TempDir t;
  const fs::path dir = t.path / "state";
  fs::create_directories(dir);
  const fs::path file = dir / "dedup-window";
  FakeClock clock;
  CommandLedger l(DedupWindow(100, kWeek), file, kBoot, clock.fn());
  REQUIRE(l.record("before"));
  fs::remove_all(dir);
  l.stage("c1");
  l.stage("c2");
  auto failed = l.commit();
  REQUIRE_FALSE(failed);
  CHECK(failed.error().code == Errc::io);
  CHECK_FALSE(l.window().contains("c1", l.now()));
  CHECK_FALSE(l.window().contains("c2", l.now()));
  CHECK(l.window().contains("before", l.now()));
  fs::create_directories(dir);
  const std::size_t rewrites = l.rewrites();
  REQUIRE(l.record("c1"));
  CHECK(l.rewrites() == rewrites + 1);
  auto back = load_command_record(file, 100, kWeek, 0);
  REQUIRE(back);
  CHECK(back->contains("before", 0));
  CHECK(back->contains("c1", 0));
  CHECK_FALSE(back->contains("c2", 0));
}

TEST_CASE("a record file someone removed comes back whole, not as the last few lines") {
  TempDir t;
  const fs::path file = t.path / "dedup-window";
  FakeClock clock;
  CommandLedger l(DedupWindow(100, kWeek), file, kBoot, clock.fn());
  REQUIRE(l.record("c1"));
  fs::remove(file);
  REQUIRE(l.record("c2"));
  auto back = load_command_record(file, 100, kWeek, 0);
  REQUIRE(back);
  CHECK(back->size() == 2);
}

TEST_CASE("compaction: once the appended records outnumber the window, the file is rewritten") {
  TempDir t;
  const fs::path file = t.path / "dedup-window";
  FakeClock clock;
  CommandLedger l(DedupWindow(10, kWeek), file, kBoot, clock.fn());
  REQUIRE(l.save());
  std::size_t biggest = 0;
  for (std::size_t i = 0; i < 3 * CommandLedger::kCompactMinRecords; ++i) {
    ++*clock.now;
    REQUIRE(l.record("c" + std::to_string(i)));
    l.finished("c" + std::to_string(i));
    biggest = std::max<std::size_t>(biggest, fs::file_size(file));
  }
  CHECK(l.rewrites() >= 3);
  CHECK(l.rewrites() <= 8);
  // Within about kCompactMinRecords records plus the window's 10.
  CHECK(biggest < (CommandLedger::kCompactMinRecords + 20) * 120);
  auto back = load_command_record(file, 10, kWeek, 0);
  REQUIRE(back);
  CHECK(back->size() == 10);
  CHECK(back->contains("c" + std::to_string(3 * CommandLedger::kCompactMinRecords - 1), 0));
}

TEST_CASE("upgrade in place: formats 1 and 2 are read, and rewritten as format 3 at the first save") {
  TempDir t;
  const fs::path file = t.path / "dedup-window";
  write_text(file, std::string("fleetlink-dedup 2\n4000 f ") + kBoot + " old\n1000 a - new\nend 2\n");
  FakeClock clock;
  auto v2 = load_command_record(file, 100, kWeek, *clock.now);
  REQUIRE(v2);
  CHECK(v2->find("old", *clock.now) == DedupWindow::Entry{"old", 4000, kBoot, State::finished});
  CHECK(v2->find("new", *clock.now) == DedupWindow::Entry{"new", 1000, "", State::accepted});
  CommandLedger l(std::move(*v2), file, kBoot2, clock.fn());
  REQUIRE(l.save());
  CHECK(is_journal(read_text(file)));
  auto v3 = load_command_record(file, 100, kWeek, 0);
  REQUIRE(v3);
  CHECK(v3->find("old", 0) == DedupWindow::Entry{"old", 4000, kBoot, State::finished});
  CHECK(v3->find("new", 0) == DedupWindow::Entry{"new", 1000, "", State::accepted});

  write_text(file, "fleetlink-dedup 1\n1764448306123 0192f3a4-7b1c-7def-8abc-0123456789ab\nend 1\n");
  auto v1 = load_command_record(file, 100, kWeek, *clock.now);
  REQUIRE(v1);
  CommandLedger l1(std::move(*v1), file, kBoot2, clock.fn());
  REQUIRE(l1.save());
  auto back = load_command_record(file, 100, kWeek, 0);
  REQUIRE(back);
  CHECK(back->find("0192f3a4-7b1c-7def-8abc-0123456789ab", 0)->state == State::unknown);
}

TEST_CASE("reading the file: missing is empty, torn is said, corrupt names the file and the line") {
  TempDir t;
  const fs::path file = t.path / "dedup-window";
  auto none = load_command_record(file, 100, kWeek, 0);
  REQUIRE(none);
  CHECK(none->size() == 0);

  write_text(file, header() + journal_entry_line(0, entry("c1")) + "e 3 a");
  bool torn = false;
  auto cut = load_command_record(file, 100, kWeek, 0, &torn);
  REQUIRE(cut);
  CHECK(torn);
  CHECK(cut->size() == 1);

  write_text(file, header() + "e 0 a - c1 00000000\n" + journal_entry_line(1, entry("c2")));
  auto bad = load_command_record(file, 100, kWeek, 0);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == Errc::malformed);
  CHECK(bad.error().detail == "corrupt dedup file " + file.string() + ": line 2: check digits do not match");

  // Far larger than a window of this size can make: refused before it is read whole.
  write_text(file, header() + std::string(4 << 20, 'x'));
  auto huge = load_command_record(file, 100, kWeek, 0);
  REQUIRE_FALSE(huge);
  CHECK(huge.error().detail.find("larger than") != std::string::npos);
}
