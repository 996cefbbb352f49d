#pragma once
// The cmd_ids a rig has already run, bounded by count and age, so a command
// redelivered after a reconnect or reboot is answered and not run twice.
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>

#include "fleetlink/export.hpp"
#include "fleetlink/expected.hpp"

namespace fleetlink {

class FLEETLINK_API DedupWindow {
 public:
  DedupWindow(std::size_t max_entries, std::chrono::milliseconds max_age);

  // Record cmd_id as seen at now_ms. Returns false if it was already there.
  bool insert(std::string_view cmd_id, std::uint64_t now_ms);
  bool contains(std::string_view cmd_id, std::uint64_t now_ms) const;
  std::size_t size() const noexcept { return order_.size(); }
  // Drop entries older than max_age or beyond max_entries.
  void prune(std::uint64_t now_ms);

  // Atomic save: write a temp file, fsync it, rename over path, fsync the directory.
  Expected<void> save(const std::filesystem::path& path) const;
  // Load a file written by save(); a missing file is an empty window, a corrupt one an error.
  static Expected<DedupWindow> load(const std::filesystem::path& path, std::size_t max_entries,
                                    std::chrono::milliseconds max_age);

 private:
  struct Entry { std::string id; std::uint64_t at_ms; };
  std::size_t max_entries_;
  std::chrono::milliseconds max_age_;
  std::deque<Entry> order_;                                  // oldest first
  std::unordered_map<std::string, std::uint64_t> index_;     // id -> at_ms
};

}  // namespace fleetlink
