#include "command_ledger.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.hpp"
#include "fleetlink/codec.hpp"
#include "atomic_file.hpp"

namespace fleetlink::agent {

namespace {

// A detail is at most kMaxDetailBytes of UTF-8: cut at a character boundary.
std::string clip_utf8(std::string s, std::size_t max) {
  if (s.size() <= max) return s;
  std::size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return s;
}

}  // namespace

std::uint64_t monotonic_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

Expected<DedupWindow> load_command_record(const std::filesystem::path& path, std::size_t max_entries,
                                          std::chrono::milliseconds max_age, std::uint64_t now_ms,
                                          bool* torn_tail) {
  if (torn_tail) *torn_tail = false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return DedupWindow(max_entries, max_age);
    return make_error(Errc::io, "cannot open " + path.string() + ": " + std::strerror(errno));
  }
  // Format 3 is at most about twice the window (compaction); anything far larger
  // is not one of ours, and reading it whole would let a broken file take any memory.
  const std::size_t limit = (max_entries * 2 + CommandLedger::kCompactMinRecords + 16) * kJournalMaxLineBytes;
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string err = std::strerror(errno);
      ::close(fd);
      return make_error(Errc::io, "cannot read " + path.string() + ": " + err);
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > limit) {
      ::close(fd);
      return make_error(Errc::malformed, "corrupt dedup file " + path.string() + ": larger than " +
                                             std::to_string(limit) + " bytes");
    }
  }
  ::close(fd);
  if (!is_journal(text)) return DedupWindow::load(path, max_entries, max_age, now_ms);  // format 1 or 2
  auto read = parse_journal(text, max_entries, max_age, now_ms);
  if (!read) return make_error(Errc::malformed, "corrupt dedup file " + path.string() + ": " + read.error().detail);
  if (torn_tail) *torn_tail = read->torn_tail;
  return std::move(read->window);
}

CommandLedger::CommandLedger(DedupWindow window, std::filesystem::path file, std::string boot_id, Clock clock)
    : window_(std::move(window)), file_(std::move(file)), boot_id_(std::move(boot_id)), clock_(std::move(clock)) {}

std::int64_t CommandLedger::journal_time(std::uint64_t now) const {
  return static_cast<std::int64_t>(now) - static_cast<std::int64_t>(base_ms_);
}

bool CommandLedger::stage(std::string_view cmd_id, DedupWindow::State state) {
  const std::uint64_t now = clock_();
  if (!window_.insert(cmd_id, now, boot_id_)) return false;
  if (state == DedupWindow::State::finished) window_.mark_finished(cmd_id);
  staged_.emplace_back(cmd_id);
  if (auto e = window_.find(cmd_id, now)) {
    queued_.append(journal_entry_line(journal_time(now), *e));
    ++queued_records_;
  }
  return true;
}

Expected<void> CommandLedger::commit() {
  if (queued_.empty() && !rewrite_due_) {
    staged_.clear();
    return {};
  }
  const std::uint64_t now = clock_();
  const bool compact = rewrite_due_ || appended_ + queued_records_ > std::max(kCompactMinRecords, window_.size());
  auto done = compact ? rewrite(now) : append();
  if (!done) {
    // Not on disk, so not seen: a restart would not know them either. What the
    // file holds now is uncertain (a part of the lines?): the next commit rewrites it.
    for (const auto& id : staged_) window_.erase(id);
    rewrite_due_ = true;
  } else {
    finished_unsaved_.clear();
  }
  staged_.clear();
  queued_.clear();
  queued_records_ = 0;
  return done;
}

Expected<void> CommandLedger::record(std::string_view cmd_id, DedupWindow::State state) {
  stage(cmd_id, state);
  return commit();
}

void CommandLedger::discard_staged() {
  for (const auto& id : staged_) window_.erase(id);
  staged_.clear();
  queued_.clear();
  queued_records_ = 0;
  rewrite_due_ = true;  // finished marks queued with them are in memory only
}

Expected<void> CommandLedger::append() {
  // No O_CREAT: a file someone removed must come back whole (rewrite), not as a
  // journal of the last few lines.
  const int fd = ::open(file_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return rewrite(clock_());
    return make_error(Errc::io, "cannot open " + file_.string() + ": " + std::strerror(errno));
  }
  std::string_view data = queued_;
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string err = std::strerror(errno);
      ::close(fd);
      return make_error(Errc::io, "cannot write " + file_.string() + ": " + err);
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  // The file only grows: fdatasync carries its new size with the data.
  if (::fdatasync(fd) != 0) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    return make_error(Errc::io, "cannot fdatasync " + file_.string() + ": " + err);
  }
  if (::close(fd) != 0) return make_error(Errc::io, "cannot close " + file_.string() + ": " + std::strerror(errno));
  appended_ += queued_records_;
  return {};
}

Expected<void> CommandLedger::rewrite(std::uint64_t now) {
  const std::string text = journal_snapshot(window_, now);
  if (auto w = write_file_atomic(file_, Bytes(text.begin(), text.end())); !w) return w;
  base_ms_ = now;
  appended_ = 0;
  rewrite_due_ = false;
  ++rewrites_;
  return {};
}

std::optional<DedupWindow::Entry> CommandLedger::find(std::string_view cmd_id) const {
  return window_.find(cmd_id, clock_());
}

void CommandLedger::finished(std::string_view cmd_id) {
  if (!window_.mark_finished(cmd_id)) return;
  finished_unsaved_.emplace(cmd_id);
  queued_.append(journal_finished_line(journal_time(clock_()), cmd_id));
  ++queued_records_;
}

void CommandLedger::results_dropped(const std::vector<std::string>& cmd_ids) {
  const bool needed = std::any_of(cmd_ids.begin(), cmd_ids.end(),
                                  [&](const std::string& id) { return finished_unsaved_.contains(id); });
  if (!needed) return;
  if (auto ok = commit(); !ok)
    FL_WARN("dedup window %s not saved (%s): a restart may report finished commands as interrupted",
            file_.c_str(), ok.error().detail.c_str());
}

Expected<void> CommandLedger::save() {
  rewrite_due_ = true;
  return commit();
}

std::vector<DedupWindow::Entry> interrupted_entries(const std::vector<DedupWindow::Entry>& entries,
                                                    std::string_view own_boot_id,
                                                    const std::function<bool(std::string_view)>& has_result,
                                                    std::chrono::milliseconds within) {
  std::vector<DedupWindow::Entry> out;
  const auto limit = static_cast<std::uint64_t>(std::max<std::int64_t>(within.count(), 0));
  for (const auto& e : entries) {
    // A version-1 record (State::unknown) does not say which commands finished:
    // most of its entries without a stored result finished long ago and lost their
    // result to results-max, and announcing them all would report finished
    // commands as failed. The broker concludes the rest from the new boot_id.
    if (e.state != DedupWindow::State::accepted) continue;
    if (!own_boot_id.empty() && e.boot_id == own_boot_id) continue;
    if (e.age_ms > limit) continue;
    if (has_result(e.cmd_id)) continue;
    out.push_back(e);
  }
  return out;
}

msg::Result interrupted_result(const DedupWindow::Entry& e, std::string_view own_boot_id,
                               std::uint64_t now_unix_ms) {
  msg::Result r;
  r.cmd_id = e.cmd_id;
  r.status = msg::Status::failed;
  r.exit_code = 0;
  r.interrupted = true;
  r.finished_at_ms = now_unix_ms;  // when this rig concluded it; when it stopped is not known
  if (e.boot_id.empty()) {
    r.detail = "interrupted: accepted by an earlier agent process (boot_id unknown: not recorded) "
               "that ended before it finished";
  } else if (e.boot_id == own_boot_id) {
    r.detail = "interrupted: accepted by this agent process (boot_id " + e.boot_id +
               "), which neither runs it nor has its result";
  } else {
    r.detail = "interrupted: accepted by an earlier agent process (boot_id " + e.boot_id +
               ") that ended before it finished";
  }
  r.detail = clip_utf8(std::move(r.detail), kMaxDetailBytes);
  return r;
}

msg::Result forgotten_result(const DedupWindow::Entry& e) {
  msg::Result r;
  r.cmd_id = e.cmd_id;
  r.status = msg::Status::duplicate;
  r.detail = e.state == DedupWindow::State::unknown
                 ? "already accepted on this rig (recorded by an earlier agent version, which did not "
                   "record whether it finished); its result is no longer kept; not run again"
                 : "already ran on this rig; its result is no longer kept (results-max); not run again";
  return r;
}

msg::Result never_received_result(std::string_view cmd_id, std::uint64_t now_unix_ms) {
  msg::Result r;
  r.cmd_id = std::string(cmd_id);
  r.status = msg::Status::cancelled;
  r.finished_at_ms = now_unix_ms;
  r.detail = "not running on this rig: never received";
  return r;
}

msg::Nack state_unwritable_nack(std::uint64_t seq, std::string_view cmd_id, std::string_view error) {
  msg::Nack n;
  n.seq = seq;
  n.cmd_id = std::string(cmd_id);
  n.reason = msg::NackReason::busy;
  n.detail = clip_utf8("state directory not writable: " + std::string(error), kMaxDetailBytes);
  return n;
}

const char* to_string(Recall r) noexcept {
  switch (r) {
    case Recall::running: return "running";
    case Recall::stored: return "stored";
    case Recall::interrupted: return "interrupted";
    case Recall::forgotten: return "forgotten";
    case Recall::never_seen: return "never_seen";
  }
  return "unknown";
}

Recall recall(const std::optional<DedupWindow::Entry>& entry, bool has_stored_result, bool running) {
  if (running) return Recall::running;
  if (has_stored_result) return Recall::stored;
  if (!entry) return Recall::never_seen;
  if (entry->state == DedupWindow::State::accepted) return Recall::interrupted;
  return Recall::forgotten;
}

}  // namespace fleetlink::agent
