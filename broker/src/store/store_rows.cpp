#include "store/store_rows.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <utility>

#include "store/record_codec.hpp"

namespace fleetlink::broker::store_rows {

using store_codec::is_final_code;

void to_row(const CommandView& v, bool with_result, CommandRow& out) {
  out.cmd_id.assign(v.cmd_id);
  out.rig_id.assign(v.rig_id);
  out.job_id.assign(v.job_id);
  out.idempotency_key.assign(v.idempotency_key);
  out.state = store_codec::state_code(v.state);
  out.enqueued_at = v.enqueued_at_ms;
  out.attempts = v.attempts;
  out.sent_at = v.sent_at_ms;
  out.acked_at = v.acked_at_ms;
  out.running_at = v.running_at_ms;
  out.finished_at = v.finished_at_ms;
  store_codec::encode_command_body(v, out.body);
  out.has_result = with_result && is_final(v.state);
  if (out.has_result) store_codec::encode_result_body(v, out.result_body);
  else out.result_body.clear();
  out.committed = false;
}

Expected<CommandView> to_view(const CommandRow& row) {
  CommandView v;
  v.cmd_id = row.cmd_id;
  const auto state = store_codec::state_from_code(row.state);
  if (!state) {
    return make_error(Errc::malformed, "command " + row.cmd_id + " has state code " + std::to_string(row.state) +
                                           ", which this broker does not know (written by a newer one?)");
  }
  v.state = *state;
  v.rig_id = row.rig_id;
  v.job_id = row.job_id;
  v.idempotency_key = row.idempotency_key;
  v.enqueued_at_ms = row.enqueued_at;
  v.attempts = row.attempts;
  v.sent_at_ms = row.sent_at;
  v.acked_at_ms = row.acked_at;
  v.running_at_ms = row.running_at;
  v.finished_at_ms = row.finished_at;
  if (auto r = store_codec::decode_command_body(row.body, v); !r)
    return make_error(r.error().code, "command " + row.cmd_id + ": " + r.error().detail);
  if (row.has_result) {
    if (auto r = store_codec::decode_result_body(row.result_body, v); !r)
      return make_error(r.error().code, "command " + row.cmd_id + ": " + r.error().detail);
  }
  v.recorded = row.committed;
  return v;
}

namespace {
std::optional<std::uint64_t> later(const std::optional<std::uint64_t>& a, const std::optional<std::uint64_t>& b) {
  if (!a) return b;
  if (!b) return a;
  return std::max(*a, *b);
}
}  // namespace

// What may throw (copying a blob) comes first: a put that runs out of memory
// leaves the row as it was.
void combine(CommandRow& base, const CommandRow& next) {
  if (!is_final_code(base.state) && next.state >= base.state) {
    base.body = next.body;
    base.state = next.state;
    base.attempts = std::max(base.attempts, next.attempts);
    base.sent_at = later(base.sent_at, next.sent_at);
    if (!base.acked_at) base.acked_at = next.acked_at;
    if (!base.running_at) base.running_at = next.running_at;
    if (next.finished_at) base.finished_at = next.finished_at;
  }
  if (next.has_result && !base.has_result && base.state == next.state) {
    base.result_body = next.result_body;
    base.has_result = true;
  }
}

void combine(RigRow& base, const RigRow& next) {
  const std::uint64_t a = base.rig.first_seen_ms, b = next.rig.first_seen_ms;
  const std::uint64_t first = a == 0 ? b : b == 0 ? a : std::min(a, b);
  if (next.rig.last_seen_ms >= base.rig.last_seen_ms) {
    RigRow copy = next;  // assigned whole, or not at all
    base = std::move(copy);
  }
  base.rig.first_seen_ms = first;
}

void combine(JobRecord& base, const JobRecord& next) {
  if (base.finished) return;
  base.body = next.body;
  base.finished = next.finished;
}

std::string key_of_ms(std::uint64_t ms) {
  ms = std::min<std::uint64_t>(ms, 0xFFFF'FFFF'FFFFULL);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%08" PRIx64 "-%04" PRIx64, ms >> 16, ms & 0xFFFF);
  return buf;
}

// ---- PendingWrites ----

std::size_t PendingWrites::probe(std::string_view cmd_id) const noexcept {
  const std::size_t mask = index_.size() - 1;
  std::size_t slot = std::hash<std::string_view>{}(cmd_id) & mask;
  while (index_[slot] != 0 && commands_[index_[slot] - 1].cmd_id != cmd_id) slot = (slot + 1) & mask;
  return slot;
}

void PendingWrites::reserve_slot() {
  // Room for one more, grown by doubling: reserve(size + 1) would allocate
  // exactly that and copy every slot on each put once a batch outgrows the
  // buffer's past size (a fleet-wide job's 20,000 rows: 800 MB of copying).
  if (slots_used_.size() < slots_used_.capacity()) return;
  slots_used_.reserve(std::max<std::size_t>(64, 2 * slots_used_.capacity()));
}

void PendingWrites::grow_index() {
  std::size_t size = index_.empty() ? 64 : index_.size() * 2;
  while (size < 2 * (commands_used_ + 1)) size *= 2;
  std::vector<std::uint32_t> bigger(size, 0);
  slots_used_.reserve(size / 2);
  index_.swap(bigger);
  slots_used_.clear();
  for (std::size_t i = 0; i < commands_used_; ++i) {
    const std::size_t slot = probe(commands_[i].cmd_id);
    index_[slot] = static_cast<std::uint32_t>(i + 1);
    slots_used_.push_back(static_cast<std::uint32_t>(slot));
  }
}

// Everything that allocates happens before the index changes: a put that runs
// out of memory leaves the buffer as it was.
void PendingWrites::put(const CommandView& v, bool with_result) {
  if (index_.size() < 2 * (commands_used_ + 1)) grow_index();
  const std::size_t slot = probe(v.cmd_id);
  if (index_[slot] != 0) {
    to_row(v, with_result, scratch_);
    combine(commands_[index_[slot] - 1], scratch_);
    return;
  }
  reserve_slot();
  if (commands_used_ == commands_.size()) commands_.emplace_back();
  CommandRow& row = commands_[commands_used_];
  std::swap(row, scratch_);  // the row's old buffers become the next put's scratch
  to_row(v, with_result, row);
  index_[slot] = static_cast<std::uint32_t>(++commands_used_);
  slots_used_.push_back(static_cast<std::uint32_t>(slot));
}

void PendingWrites::put(const RigRecord& r) {
  RigRow row{r, {}};
  store_codec::encode_rig_body(r, row.body);
  if (auto it = rig_index_.find(r.rig_id); it != rig_index_.end()) {
    combine(rigs_[it->second], row);
    return;
  }
  rigs_.push_back(std::move(row));
  try {
    rig_index_.emplace(r.rig_id, rigs_.size() - 1);
  } catch (...) {
    rigs_.pop_back();
    throw;
  }
}

void PendingWrites::put(const JobRecord& j) {
  if (auto it = job_index_.find(j.job_id); it != job_index_.end()) {
    combine(jobs_[it->second], j);
    return;
  }
  jobs_.push_back(j);
  try {
    job_index_.emplace(j.job_id, jobs_.size() - 1);
  } catch (...) {
    jobs_.pop_back();
    throw;
  }
}

const CommandRow* PendingWrites::find_command(std::string_view cmd_id) const noexcept {
  if (commands_used_ == 0) return nullptr;
  const std::uint32_t e = index_[probe(cmd_id)];
  return e ? &commands_[e - 1] : nullptr;
}

const CommandRow* PendingWrites::find_command_by_key(std::string_view key) const noexcept {
  if (key.empty()) return nullptr;
  for (std::size_t i = 0; i < commands_used_; ++i)
    if (commands_[i].idempotency_key == key) return &commands_[i];
  return nullptr;
}

const RigRow* PendingWrites::find_rig(std::string_view rig_id) const noexcept {
  auto it = rig_index_.find(std::string(rig_id));
  return it == rig_index_.end() ? nullptr : &rigs_[it->second];
}

const JobRecord* PendingWrites::find_job(std::string_view job_id) const noexcept {
  auto it = job_index_.find(std::string(job_id));
  return it == job_index_.end() ? nullptr : &jobs_[it->second];
}

void PendingWrites::clear() noexcept {
  for (std::uint32_t slot : slots_used_) index_[slot] = 0;
  slots_used_.clear();
  commands_used_ = 0;
  rigs_.clear();
  rig_index_.clear();
  jobs_.clear();
  job_index_.clear();
}

bool matches(const CommandRow& row, const CommandQuery& q, const std::string& since_key) {
  if (!q.rig_id.empty() && row.rig_id != q.rig_id) return false;
  if (q.state && row.state != store_codec::state_code(*q.state)) return false;
  if (!q.job_id.empty() && row.job_id != q.job_id) return false;
  if (q.since_ms && (row.enqueued_at < q.since_ms || row.cmd_id < since_key)) return false;
  if (!q.before_cmd_id.empty() && row.cmd_id >= q.before_cmd_id) return false;
  return true;
}

bool matches(const JobRecord& j, const JobQuery& q) {
  if (q.finished && j.finished != *q.finished) return false;
  if (q.since_ms && j.created_at_ms < q.since_ms) return false;
  if (!q.before_job_id.empty() && j.job_id >= q.before_job_id) return false;
  return true;
}

}  // namespace fleetlink::broker::store_rows
