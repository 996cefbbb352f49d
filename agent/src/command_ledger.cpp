#include "command_ledger.hpp"

#include <algorithm>

#include "common/log.hpp"
#include "fleetlink/codec.hpp"

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

CommandLedger::CommandLedger(DedupWindow window, std::filesystem::path file, std::string boot_id, Clock clock)
    : window_(std::move(window)), file_(std::move(file)), boot_id_(std::move(boot_id)), clock_(std::move(clock)) {}

Expected<void> CommandLedger::record(std::string_view cmd_id, DedupWindow::State state) {
  const std::uint64_t now = clock_();
  const bool fresh = window_.insert(cmd_id, now, boot_id_);
  if (state == DedupWindow::State::finished) window_.mark_finished(cmd_id);
  auto saved = window_.save(file_, now);
  if (!saved) {
    // Not on disk, so not seen: a restart would not know it either.
    if (fresh) window_.erase(cmd_id);
    return saved.error();
  }
  finished_unsaved_.clear();
  return {};
}

std::optional<DedupWindow::Entry> CommandLedger::find(std::string_view cmd_id) const {
  return window_.find(cmd_id, clock_());
}

void CommandLedger::finished(std::string_view cmd_id) {
  if (window_.mark_finished(cmd_id)) finished_unsaved_.emplace(cmd_id);
}

void CommandLedger::results_dropped(const std::vector<std::string>& cmd_ids) {
  const bool needed = std::any_of(cmd_ids.begin(), cmd_ids.end(),
                                  [&](const std::string& id) { return finished_unsaved_.contains(id); });
  if (!needed) return;
  if (auto ok = save(); !ok)
    FL_WARN("dedup window %s not saved (%s): a restart may report finished commands as interrupted",
            file_.c_str(), ok.error().detail.c_str());
}

Expected<void> CommandLedger::save() {
  auto saved = window_.save(file_, clock_());
  if (saved) finished_unsaved_.clear();
  return saved;
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
