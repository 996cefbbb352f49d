// The command ledger: nothing runs unless its cmd_id is on disk first, and what an
// earlier agent process accepted and never finished is reported, not forgotten.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "command_ledger.hpp"
#include "fleetlink/codec.hpp"

using namespace fleetlink;
using namespace fleetlink::agent;
namespace fs = std::filesystem;
using State = DedupWindow::State;

namespace {

struct TempDir {
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("fleetlink-ledger-test-" + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path path;
};

constexpr const char* kBootA = "01936d3c-0000-7000-8000-00000000000a";
constexpr const char* kBootB = "01936d3c-0000-7000-8000-00000000000b";
constexpr const char* kC1 = "01936d3c-5e2a-7b3c-8d4e-000000000001";
constexpr const char* kC2 = "01936d3c-5e2a-7b3c-8d4e-000000000002";
constexpr const char* kC3 = "01936d3c-5e2a-7b3c-8d4e-000000000003";
constexpr const char* kC4 = "01936d3c-5e2a-7b3c-8d4e-000000000004";
const auto kWeek = std::chrono::hours(168);

// A clock the test moves by hand.
struct FakeClock {
  std::shared_ptr<std::uint64_t> now = std::make_shared<std::uint64_t>(1000);
  CommandLedger::Clock fn() const {
    return [n = now] { return *n; };
  }
};

CommandLedger open_ledger(const fs::path& file, const std::string& boot, const FakeClock& clock) {
  auto w = load_command_record(file, 100, kWeek, *clock.now);
  REQUIRE(w);
  return CommandLedger(std::move(*w), file, boot, clock.fn());
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

bool no_result(std::string_view) { return false; }

}  // namespace

TEST_CASE("record() puts the cmd_id on disk, with the accepting boot_id, before anything runs") {
  TempDir t;
  const fs::path file = t.path / "dedup-window";
  FakeClock clock;
  auto a = open_ledger(file, kBootA, clock);
  REQUIRE(a.record(kC1));
  CHECK(a.window().contains(kC1, a.now()));
  CHECK(read_text(file).find(std::string("0 a ") + kBootA + " " + kC1) != std::string::npos);
  // A restart (new process, new monotonic origin) knows it, with its age and boot_id.
  *clock.now += 5000;
  REQUIRE(a.save());
  FakeClock later;
  *later.now = 3;
  auto b = open_ledger(file, kBootB, later);
  const auto e = b.find(kC1);
  REQUIRE(e);
  CHECK(e->age_ms == 5000);
  CHECK(e->boot_id == kBootA);
  CHECK(e->state == State::accepted);
}

TEST_CASE("a cmd_id that cannot be saved is not recorded at all, and recording works again by itself later") {
  TempDir t;
  const fs::path dir = t.path / "state";
  fs::create_directories(dir);
  FakeClock clock;
  auto l = open_ledger(dir / "dedup-window", kBootA, clock);
  REQUIRE(l.record(kC1));

  // The state directory goes away (a read-only or full disk fails the same way:
  // the temp file cannot be written).
  fs::remove_all(dir);
  auto failed = l.record(kC2);
  REQUIRE_FALSE(failed);
  CHECK(failed.error().code == Errc::io);
  CHECK_FALSE(l.window().contains(kC2, l.now()));  // a redelivery must run it, not call it a duplicate
  CHECK(l.window().contains(kC1, l.now()));

  const msg::Nack n = state_unwritable_nack(7, kC2, failed.error().detail);
  CHECK(n.seq == 7);
  CHECK(n.cmd_id == kC2);
  CHECK(n.reason == msg::NackReason::busy);  // no new reason in protocol v1
  CHECK(n.detail.rfind("state directory not writable: " + failed.error().detail, 0) == 0);
  CHECK(validate(Message{n}));

  // Writable again: the same cmd_id is recorded (and runs) normally.
  fs::create_directories(dir);
  REQUIRE(l.record(kC2));
  const auto back = load_command_record(dir / "dedup-window", 100, kWeek, 0);
  REQUIRE(back);
  CHECK(back->contains(kC1, 0));
  CHECK(back->contains(kC2, 0));
}

TEST_CASE("a state directory that is a file, not a directory, refuses too") {
  TempDir t;
  const fs::path not_dir = t.path / "plain-file";
  std::ofstream(not_dir) << "x";
  FakeClock clock;
  CommandLedger l(DedupWindow(100, kWeek), not_dir / "dedup-window", kBootA, clock.fn());
  auto r = l.record(kC1);
  REQUIRE_FALSE(r);
  CHECK(l.window().size() == 0);
  CHECK(state_unwritable_nack(1, kC1, r.error().detail).detail.find("Not a directory") != std::string::npos);
}

TEST_CASE("the refusal's detail stays within the protocol's limit and valid UTF-8") {
  std::string error(5000, 'e');
  error.replace(4090, 2, "\xc3\xa9");  // an e-acute across the cut
  const msg::Nack n = state_unwritable_nack(1, kC1, error);
  CHECK(n.detail.size() <= kMaxDetailBytes);
  CHECK(validate(Message{n}));
}

TEST_CASE("finished is on disk with the next commit, and at once when the result store drops its result") {
  TempDir t;
  const fs::path file = t.path / "dedup-window";
  FakeClock clock;
  auto l = open_ledger(file, kBootA, clock);
  REQUIRE(l.record(kC1));
  REQUIRE(l.record(kC2));
  l.finished(kC1);
  CHECK(l.find(kC1)->state == State::finished);
  const auto on_disk = [&](const char* id) {
    auto w = load_command_record(file, 100, kWeek, 0);
    REQUIRE(w);
    return w->find(id, 0)->state;
  };
  CHECK(on_disk(kC1) == State::accepted);  // not yet
  // The store dropping some other result does not need a commit.
  l.results_dropped({kC3});
  CHECK(on_disk(kC1) == State::accepted);
  // Its own result dropped: committed now, or a restart would call it interrupted.
  l.results_dropped({kC1});
  CHECK(on_disk(kC1) == State::finished);
  CHECK(read_text(file).find(std::string("f 0 ") + kC1 + " ") != std::string::npos);  // appended, not rewritten
  // Any record() commits every state too.
  l.finished(kC2);
  REQUIRE(l.record(kC3));
  CHECK(on_disk(kC2) == State::finished);
}

TEST_CASE("at start-up: accepted by an earlier process, no result, not spooled, within 24 h -> interrupted") {
  TempDir t;
  const fs::path file = t.path / "dedup-window";
  FakeClock clock;
  {
    auto a = open_ledger(file, kBootA, clock);
    REQUIRE(a.record(kC4));               // accepted 25 h before the end of this process
    *clock.now += 25ULL * 3'600'000;
    REQUIRE(a.record(kC1));               // running when the process was killed
    REQUIRE(a.record(kC2));               // finished
    a.finished(kC2);
    REQUIRE(a.record(kC3));               // finished, its result stored (a reboot's `scheduled`)
    // killed -9 here: kC3's finished state never reached the file
    CHECK(read_text(file).find(std::string(" a ") + kBootA + " " + kC3) != std::string::npos);
  }
  FakeClock after_reboot;
  *after_reboot.now = 40;
  auto b = open_ledger(file, kBootB, after_reboot);
  const auto found = interrupted_entries(
      b.window().entries(b.now()), kBootB, [](std::string_view id) { return id == kC3; },
      kInterruptedReportWindow);
  REQUIRE(found.size() == 1);
  CHECK(found[0].cmd_id == kC1);
  CHECK(found[0].boot_id == kBootA);
  // kC4 is older than the report looks back, but still interrupted when asked about.
  CHECK(recall(b.find(kC4), false, false) == Recall::interrupted);

  const msg::Result r = interrupted_result(found[0], kBootB, 1'764'448'306'123ULL);
  CHECK(r.cmd_id == kC1);
  CHECK(r.status == msg::Status::failed);
  CHECK(r.exit_code == 0);
  CHECK(r.interrupted);
  CHECK(r.detail == std::string("interrupted: accepted by an earlier agent process (boot_id ") + kBootA +
                        ") that ended before it finished");
  CHECK(r.finished_at_ms == 1'764'448'306'123ULL);
  CHECK(validate(Message{r}));
}

TEST_CASE("entries of this process, finished ones and ones an older agent recorded are not interrupted") {
  const std::vector<DedupWindow::Entry> entries{
      {kC1, 10, kBootB, State::accepted},   // this process's own (running)
      {kC2, 10, kBootA, State::finished},
      {kC3, 10, "", State::unknown},         // a version-1 file: its fate is not known
      {kC4, 10, "", State::accepted},        // accepted, boot_id not recorded
  };
  const auto found = interrupted_entries(entries, kBootB, no_result, kInterruptedReportWindow);
  REQUIRE(found.size() == 1);
  CHECK(found[0].cmd_id == kC4);
  CHECK(interrupted_result(found[0], kBootB, 0).detail ==
        "interrupted: accepted by an earlier agent process (boot_id unknown: not recorded) that ended "
        "before it finished");
  // Spooled (or stored) results are results: not interrupted.
  CHECK(interrupted_entries(entries, kBootB, [](std::string_view) { return true; }, kInterruptedReportWindow)
            .empty());
}

TEST_CASE("recall: what the rig says about a cmd_id asked about again") {
  const DedupWindow::Entry accepted{kC1, 0, kBootA, State::accepted};
  const DedupWindow::Entry finished{kC1, 0, kBootA, State::finished};
  const DedupWindow::Entry unknown{kC1, 0, "", State::unknown};
  CHECK(recall(accepted, false, true) == Recall::running);
  CHECK(recall(accepted, true, false) == Recall::stored);
  CHECK(recall(finished, true, false) == Recall::stored);
  CHECK(recall(std::nullopt, true, false) == Recall::stored);  // its dedup entry expired, its result is kept
  CHECK(recall(accepted, false, false) == Recall::interrupted);
  CHECK(recall(finished, false, false) == Recall::forgotten);
  CHECK(recall(unknown, false, false) == Recall::forgotten);
  CHECK(recall(std::nullopt, false, false) == Recall::never_seen);
}

TEST_CASE("the answers without a stored result are valid RESULTs") {
  const msg::Result f = forgotten_result(DedupWindow::Entry{kC1, 0, kBootA, State::finished});
  CHECK(f.status == msg::Status::duplicate);
  CHECK_FALSE(f.interrupted);
  CHECK(f.detail.find("no longer kept") != std::string::npos);
  CHECK(validate(Message{f}));
  const msg::Result u = forgotten_result(DedupWindow::Entry{kC1, 0, "", State::unknown});
  CHECK(u.detail.find("earlier agent version") != std::string::npos);
  const msg::Result n = never_received_result(kC2, 5);
  CHECK(n.cmd_id == kC2);
  CHECK(n.status == msg::Status::cancelled);
  CHECK(n.detail == "not running on this rig: never received");
  CHECK_FALSE(n.interrupted);
  CHECK(validate(Message{n}));
}

TEST_CASE("monotonic_ms does not go backwards") {
  const auto a = monotonic_ms();
  const auto b = monotonic_ms();
  CHECK(b >= a);
}
