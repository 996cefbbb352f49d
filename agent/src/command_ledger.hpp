#pragma once
// The rig's durable record of the commands it accepted, across agent processes:
// the dedup window under --state-dir, each entry with the boot_id of the process
// that accepted it and whether its RESULT was made, aged on the monotonic clock.
//
// Two promises rest on it:
//   - nothing runs unless its cmd_id is on disk first (record(), or stage() and
//     the turn's commit());
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

#include "dedup_journal.hpp"
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

// Reads the record at path: format 3 (dedup_journal.hpp) or, from an agent before
// it, format 1 or 2 (DedupWindow::load). A missing file is an empty window; a
// corrupt one an error naming the file and the line. *torn_tail (if given) says a
// format-3 file's last record was cut short by a crash and ignored.
Expected<DedupWindow> load_command_record(const std::filesystem::path& path, std::size_t max_entries,
                                          std::chrono::milliseconds max_age, std::uint64_t now_ms,
                                          bool* torn_tail = nullptr);

class CommandLedger {
 public:
  using Clock = std::function<std::uint64_t()>;

  // window: as read from file (load_command_record). The file is rewritten as
  // format 3 at the first commit() or save().
  CommandLedger(DedupWindow window, std::filesystem::path file, std::string boot_id,
                Clock clock = monotonic_ms);

  // Group commit, for the commands accepted in one loop turn: stage() each (in
  // memory, and its journal line queued), then one commit() makes them all durable
  // (one write and one fdatasync), and only then may they be acknowledged or run.
  // stage() returns false if cmd_id was already in the window (nothing changes).
  bool stage(std::string_view cmd_id, DedupWindow::State state = DedupWindow::State::accepted);
  // Everything staged or queued since the last commit is on disk when this
  // returns. On failure nothing staged since is recorded, in memory either: those
  // commands must be refused, and the same cmd_id delivered again once the
  // directory is writable runs normally (the next commit rewrites the whole file).
  Expected<void> commit();
  // A single command: stage() and commit().
  Expected<void> record(std::string_view cmd_id,
                        DedupWindow::State state = DedupWindow::State::accepted);
  // Staged and never to be committed (the agent stops before the turn's commit):
  // forgotten in memory; the next save() writes the file without them.
  void discard_staged();
  std::size_t staged() const noexcept { return staged_.size(); }

  std::optional<DedupWindow::Entry> find(std::string_view cmd_id) const;
  // Its RESULT was made (and put in the result store). Its journal line goes to
  // disk with the next commit; until then the stored result says the same.
  void finished(std::string_view cmd_id);
  // The result store dropped these to stay within its bound. One finished only in
  // memory would look interrupted after a restart: commit now.
  void results_dropped(const std::vector<std::string>& cmd_ids);
  // Rewrites the whole file from memory (temp file, fsync, rename, fsync of the
  // directory), committing whatever is staged.
  Expected<void> save();

  const DedupWindow& window() const noexcept { return window_; }
  std::uint64_t now() const { return clock_(); }
  const std::string& boot_id() const noexcept { return boot_id_; }
  const std::filesystem::path& file() const noexcept { return file_; }
  // Rewrites so far (start, stop, compactions, recoveries): for tests.
  std::size_t rewrites() const noexcept { return rewrites_; }
  // Appended records after which commit() rewrites the file instead (compaction):
  // the window's size, at least kCompactMinRecords.
  static constexpr std::size_t kCompactMinRecords = 1024;

 private:
  Expected<void> rewrite(std::uint64_t now);
  Expected<void> append();
  std::int64_t journal_time(std::uint64_t now) const;

  DedupWindow window_;
  std::filesystem::path file_;
  std::string boot_id_;
  Clock clock_;
  std::set<std::string, std::less<>> finished_unsaved_;
  std::vector<std::string> staged_;  // fresh cmd_ids since the last commit
  std::string queued_;               // their journal lines (and finished marks)
  std::size_t queued_records_ = 0;
  std::size_t appended_ = 0;         // records appended since the last rewrite
  std::uint64_t base_ms_ = 0;        // clock at the last rewrite: journal times count from it
  bool rewrite_due_ = true;          // the file is not (known to be) what memory says
  std::size_t rewrites_ = 0;
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
