#pragma once
// The cmd_ids a rig has accepted, bounded by count and age, so a command
// redelivered after a reconnect or reboot is answered and not run twice.
//
// Ages are measured on the clock the caller passes as now_ms, which should be
// monotonic (the agent passes CLOCK_MONOTONIC): a wall clock stepped by days
// would expire every entry at once, or keep them all for days too long. The file
// holds each entry's age at save() time, not a time of day, so the clock's origin
// may differ between save() and load() (a reboot restarts CLOCK_MONOTONIC): time
// while no process holds the window does not count towards an entry's age.
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fleetlink/export.hpp"
#include "fleetlink/expected.hpp"

namespace fleetlink {

class FLEETLINK_API DedupWindow {
 public:
  enum class State : std::uint8_t {
    accepted,  // recorded before it ran; its final word is not recorded yet
    finished,  // its RESULT was made
    unknown,   // loaded from a version-1 file, which did not say
  };
  struct Entry {
    std::string cmd_id;
    std::uint64_t age_ms = 0;
    std::string boot_id;  // of the process that accepted it; empty: not recorded
    State state = State::accepted;
    bool operator==(const Entry&) const = default;
  };

  DedupWindow(std::size_t max_entries, std::chrono::milliseconds max_age);

  // Record cmd_id as accepted at now_ms by the process boot_id (a token without
  // blanks, at most 128 bytes; anything else is recorded as not known). Returns
  // false if it was already there (and leaves that entry as it was).
  // cmd_id must be 1-128 bytes without blanks or NUL, or save() writes a file
  // load() refuses.
  bool insert(std::string_view cmd_id, std::uint64_t now_ms, std::string_view boot_id = {});
  bool contains(std::string_view cmd_id, std::uint64_t now_ms) const;
  std::optional<Entry> find(std::string_view cmd_id, std::uint64_t now_ms) const;
  // Forget cmd_id (an insert whose save failed: it must not count as seen).
  bool erase(std::string_view cmd_id);
  // The command's RESULT was made. False if cmd_id is not in the window.
  bool mark_finished(std::string_view cmd_id);
  // Put back an entry read from a record kept elsewhere (the agent's journal):
  // its age counted back from now_ms, its state and boot_id as given, as the
  // newest entry (one already there under the same cmd_id is replaced). An entry
  // older than max_age is not kept; beyond max_entries the oldest go.
  void restore(const Entry& e, std::uint64_t now_ms);
  // The entries not yet expired at now_ms, oldest first.
  std::vector<Entry> entries(std::uint64_t now_ms) const;
  std::size_t size() const noexcept { return order_.size(); }
  // Drop entries older than max_age or beyond max_entries.
  void prune(std::uint64_t now_ms);

  // Atomic save: write a temp file, fsync it, rename over path, fsync the directory.
  // Each entry is written with its age at now_ms.
  Expected<void> save(const std::filesystem::path& path, std::uint64_t now_ms) const;
  // Load a file written by save() (or by a version-1 window); entries get the age
  // they had when saved, counted from now_ms. A missing file is an empty window, a
  // corrupt one an error.
  static Expected<DedupWindow> load(const std::filesystem::path& path, std::size_t max_entries,
                                    std::chrono::milliseconds max_age, std::uint64_t now_ms);

 private:
  struct Record {
    std::int64_t at_ms;  // on the caller's clock; below 0 after a load with a small now_ms
    std::string boot_id;
    State state;
  };
  bool expired(const Record& r, std::int64_t now) const noexcept;
  void push(std::string id, Record r);
  void drop_oldest();

  std::size_t max_entries_;
  std::int64_t max_age_ms_;
  std::deque<std::string> order_;                     // oldest first
  std::unordered_map<std::string, Record> index_;
};

}  // namespace fleetlink
