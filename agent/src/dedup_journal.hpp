#pragma once
// The agent's dedup record as an append-only journal: dedup-window format 3.
//
//   fleetlink-dedup 3
//   e <t> <state> <boot_id> <cmd_id> <check>   an entry: cmd_id accepted at t
//   f <t> <cmd_id> <check>                     cmd_id's RESULT was made at t
//
// Why a journal: recording a command before its ACK used to rewrite the whole
// window (temp file, fsync, rename, fsync of the directory: ~15 ms on a disk) per
// command. Now the commands accepted in one loop turn append one line each and
// share one fdatasync (group commit); the whole file is rewritten (atomically, as
// before) only at start, at stop, after a failed append, and once the appended
// lines outnumber the window (compaction), so the file stays within about twice
// the window.
//
// t is in ms on the writing process's monotonic clock, counted from the moment the
// file was last rewritten: entries carried over by that rewrite have t = -age, the
// ones appended since t >= 0. On reading, "now" is the newest t in the file (time
// while no process kept the record does not count, as with format 2), so an
// entry's age is (newest t) - t. state is a (accepted), f (finished) or ? (not
// known: from a format-1 file); boot_id is - when not known. check is FNV-1a 32 of
// the line before " <check>", 8 lowercase hex digits: a changed byte anywhere is
// an error, not a silently different window.
//
// A crash in the middle of an append leaves a last line without its '\n': that
// record's fdatasync had not returned, so nothing acknowledged it; it is ignored
// (torn_tail), and the next rewrite drops it. Anything else malformed is an error
// that names the line. Formats 1 and 2 (DedupWindow::load) are still read, so an
// agent upgraded in place keeps its record; it rewrites it as format 3 at start.
//
// Pure: text in, window out. The file I/O is CommandLedger's.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "fleetlink/dedup_window.hpp"
#include "fleetlink/expected.hpp"

namespace fleetlink::agent {

inline constexpr std::string_view kJournalHeader = "fleetlink-dedup 3";
// Larger than any record of a window of the biggest allowed size.
inline constexpr std::size_t kJournalMaxLineBytes = 512;

// The text starts like a format-3 file (whatever follows).
bool is_journal(std::string_view text) noexcept;

// FNV-1a 32 as the journal's 8 hex digits.
std::string journal_check(std::string_view line);
// One record, with its check and '\n'.
std::string journal_entry_line(std::int64_t t, const DedupWindow::Entry& e);
std::string journal_finished_line(std::int64_t t, std::string_view cmd_id);
// A whole file holding w as it is at now_ms: the header, then one entry line per
// entry not expired, oldest first, t = -age.
std::string journal_snapshot(const DedupWindow& w, std::uint64_t now_ms);

struct JournalRead {
  DedupWindow window;
  std::size_t records = 0;  // complete records read (after the header)
  bool torn_tail = false;   // a last record cut short by a crash, ignored
};
// The window a format-3 text describes, ages counted back from now_ms on the
// reader's clock. Errors (Errc::malformed) name the line and what is wrong.
Expected<JournalRead> parse_journal(std::string_view text, std::size_t max_entries,
                                    std::chrono::milliseconds max_age, std::uint64_t now_ms);

}  // namespace fleetlink::agent
