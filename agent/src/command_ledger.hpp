#pragma once
// The rig's durable record of the commands it accepted, across agent processes:
// the dedup window under --state-dir, each entry with the boot_id of the process
// that accepted it and whether its RESULT was made, aged on the monotonic clock.
//
// Two promises rest on it:
//   - nothing runs unless its cmd_id is on disk first (record());
//   - a command an earlier process accepted and never finished is reported, not
//     forgotten and not run again (interrupted_entries, interrupted_result).
// The answers below are pure functions of the record, the result store and what
// runs now, so every rule is unit-tested without sockets.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fleetlink/dedup_window.hpp"
#include "fleetlink/expected.hpp"
#include "fleetlink/messages.hpp"

namespace fleetlink::agent {

// Milliseconds on CLOCK_MONOTONIC (std::chrono::steady_clock): what dedup ages use.
std::uint64_t monotonic_ms();

// How far back start-up looks for interrupted commands (monotonic age, i.e. time
// some agent process was running since the command was accepted). Older ones are
// still answered when redelivered or cancelled; they are only not announced.
inline constexpr std::chrono::hours kInterruptedReportWindow{24};

class CommandLedger {
 public:
  using Clock = std::function<std::uint64_t()>;

  CommandLedger(DedupWindow window, std::filesystem::path file, std::string boot_id,
                Clock clock = monotonic_ms);

  // Records cmd_id durably (the file fsync'd) before anything acknowledges or runs
  // it. On failure nothing is recorded, in memory either: the command must be
  // refused, and the same cmd_id delivered again once the directory is writable
  // runs normally.
  Expected<void> record(std::string_view cmd_id,
                        DedupWindow::State state = DedupWindow::State::accepted);
  std::optional<DedupWindow::Entry> find(std::string_view cmd_id) const;
  // Its RESULT was made (and put in the result store). On disk with the next save;
  // until then the stored result says the same.
  void finished(std::string_view cmd_id);
  // The result store dropped these to stay within its bound. One finished only in
  // memory would look interrupted after a restart: save now.
  void results_dropped(const std::vector<std::string>& cmd_ids);
  Expected<void> save();

  const DedupWindow& window() const noexcept { return window_; }
  std::uint64_t now() const { return clock_(); }
  const std::string& boot_id() const noexcept { return boot_id_; }
  const std::filesystem::path& file() const noexcept { return file_; }

 private:
  DedupWindow window_;
  std::filesystem::path file_;
  std::string boot_id_;
  Clock clock_;
  std::set<std::string, std::less<>> finished_unsaved_;
};

// Commands an earlier agent process accepted and never finished: recorded as
// accepted (an entry from a version-1 file, whose fate was not recorded, is not
// one), by another boot_id, no result stored or spooled (has_result), accepted at
// most `within` ago. Oldest first.
std::vector<DedupWindow::Entry> interrupted_entries(const std::vector<DedupWindow::Entry>& entries,
                                                    std::string_view own_boot_id,
                                                    const std::function<bool(std::string_view)>& has_result,
                                                    std::chrono::milliseconds within);

// The RESULT for such a command: failed, exit code 0, interrupted, and which
// process accepted it.
msg::Result interrupted_result(const DedupWindow::Entry& e, std::string_view own_boot_id,
                               std::uint64_t now_unix_ms);
// A cmd_id this rig accepted and finished, whose RESULT is no longer kept
// (results-max): status duplicate, so the broker is answered and nothing runs.
msg::Result forgotten_result(const DedupWindow::Entry& e);
// A CANCEL for a cmd_id this rig never received: cancelled, and it never will run.
msg::Result never_received_result(std::string_view cmd_id, std::uint64_t now_unix_ms);
// The refusal when record() failed: NACK busy (no new reason in protocol v1).
msg::Nack state_unwritable_nack(std::uint64_t seq, std::string_view cmd_id, std::string_view error);

// What the rig can say about a cmd_id it is asked about again (a redelivery, or a
// CANCEL for a command it does not run).
enum class Recall : std::uint8_t {
  running,      // in this process: its RESULT comes when it finishes
  stored,       // its RESULT is stored: send it again
  interrupted,  // accepted by a process that ended before it finished
  forgotten,    // finished (or an older agent's record), RESULT no longer kept
  never_seen,   // not in the record at all
};
const char* to_string(Recall r) noexcept;
Recall recall(const std::optional<DedupWindow::Entry>& entry, bool has_stored_result, bool running);

}  // namespace fleetlink::agent
