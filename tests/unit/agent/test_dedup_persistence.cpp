// The agent's dedup window on disk: what makes a redelivered reboot not run again.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "fleetlink/dedup_window.hpp"

using namespace fleetlink;
namespace fs = std::filesystem;

TEST_CASE("a cmd_id recorded and saved is known after a reload (a restart)") {
  std::random_device rd;
  const fs::path dir = fs::temp_directory_path() / ("fleetlink-dedup-" + std::to_string(rd()));
  fs::create_directories(dir);
  const fs::path file = dir / "dedup-window";
  {
    auto w = DedupWindow::load(file, 100, std::chrono::hours(168), 1000);
    REQUIRE(w);
    CHECK(w->size() == 0);
    CHECK(w->insert("0192f3a4-7b1c-7def-8abc-0123456789ab", 1000));
    REQUIRE(w->save(file, 1000));
  }
  auto again = DedupWindow::load(file, 100, std::chrono::hours(168), 2000);
  REQUIRE(again);
  CHECK(again->contains("0192f3a4-7b1c-7def-8abc-0123456789ab", 2000));
  // A torn file is an error, not an empty window.
  {
    std::ofstream out(file, std::ios::trunc);
    out << "fleetlink-dedup 1\n1000 abc\n";
  }
  CHECK_FALSE(DedupWindow::load(file, 100, std::chrono::hours(168), 0));
  fs::remove_all(dir);
}
