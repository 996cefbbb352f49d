#include "control/jobs.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <set>
#include <utility>

#include "control/control_json.hpp"
#include "control/job_json.hpp"
#include "fleet/command_defaults.hpp"

namespace fleetlink::broker {

// ---------------------------------------------------------------------------------
// shares, deadlines, names

std::size_t RigShare::of(std::size_t rigs) const noexcept {
  if (!percent) return static_cast<std::size_t>(count);
  return static_cast<std::size_t>(std::uint64_t{rigs} * basis_points / 10000);
}

std::string RigShare::text() const {
  if (!percent) return std::to_string(count);
  std::string out = std::to_string(basis_points / 100);
  if (const std::uint32_t frac = basis_points % 100; frac != 0) {
    out += '.';
    out += static_cast<char>('0' + frac / 10);
    if (frac % 10 != 0) out += static_cast<char>('0' + frac % 10);
  }
  return out + "%";
}

std::optional<RigShare> parse_rig_share(std::string_view text) {
  const bool percent = !text.empty() && text.back() == '%';
  if (percent) text.remove_suffix(1);
  std::uint64_t whole = 0;
  std::size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    whole = whole * 10 + static_cast<std::uint64_t>(text[i] - '0');
    if (whole > 1'000'000) return std::nullopt;
  }
  if (i == 0) return std::nullopt;
  RigShare share;
  if (!percent) {
    if (i != text.size()) return std::nullopt;
    share.count = whole;
    return share;
  }
  std::uint32_t frac = 0;
  if (i < text.size()) {
    if (text[i] != '.' || text.size() - i < 2 || text.size() - i > 3) return std::nullopt;
    for (std::size_t k = i + 1; k < text.size(); ++k) {
      if (text[k] < '0' || text[k] > '9') return std::nullopt;
      frac = frac * 10 + static_cast<std::uint32_t>(text[k] - '0');
    }
    if (text.size() - i == 2) frac *= 10;  // "12.5" is 12.50
  }
  if (whole > 100 || (whole == 100 && frac != 0)) return std::nullopt;
  share.percent = true;
  share.basis_points = static_cast<std::uint32_t>(whole) * 100 + frac;
  return share;
}

namespace {

// A share of the rigs in flight at once: 0 means all at once, and a percentage
// is at least one rig (a job with a concurrency of none would never run).
std::size_t resolve_concurrency(const std::optional<RigShare>& share, std::size_t rigs) {
  if (!share) return 0;
  if (!share->percent) return share->of(rigs);
  return std::max<std::size_t>(1, share->of(rigs));
}

}  // namespace

std::uint32_t default_job_deadline_s(const JobRequest& request, std::size_t rigs) {
  const CommandDeadlines d = default_deadlines(request.kind);
  const std::uint64_t one = std::uint64_t{request.deliver_within_s.value_or(d.deliver_within_s)} +
                            request.timeout_s.value_or(d.timeout_s);
  const std::size_t concurrency = resolve_concurrency(request.max_concurrency, rigs);
  const std::uint64_t waves = concurrency == 0 || concurrency >= rigs ? 1 : (rigs + concurrency - 1) / concurrency;
  const std::uint64_t total = one * waves + kJobDeadlineMarginS;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(total, kMaxJobDeadlineS));
}

namespace {

constexpr std::array<JobRigOutcome, kJobRigOutcomeCount> kOutcomes = {
    JobRigOutcome::pending, JobRigOutcome::dispatched, JobRigOutcome::ok,     JobRigOutcome::failed,
    JobRigOutcome::refused, JobRigOutcome::skipped,    JobRigOutcome::silent,
};

constexpr std::size_t index_of(JobRigOutcome o) noexcept { return static_cast<std::size_t>(o); }

}  // namespace

const char* to_string(JobRigOutcome o) noexcept {
  switch (o) {
    case JobRigOutcome::pending: return "pending";
    case JobRigOutcome::dispatched: return "dispatched";
    case JobRigOutcome::ok: return "ok";
    case JobRigOutcome::failed: return "failed";
    case JobRigOutcome::refused: return "refused";
    case JobRigOutcome::skipped: return "skipped";
    case JobRigOutcome::silent: return "silent";
  }
  return "unknown";
}

std::optional<JobRigOutcome> job_rig_outcome_from_string(std::string_view s) noexcept {
  for (JobRigOutcome o : kOutcomes)
    if (s == to_string(o)) return o;
  return std::nullopt;
}

const std::array<JobRigOutcome, kJobRigOutcomeCount>& all_job_rig_outcomes() { return kOutcomes; }

const char* to_string(JobState s) noexcept {
  switch (s) {
    case JobState::running: return "running";
    case JobState::done: return "done";
    case JobState::stopped: return "stopped";
    case JobState::expired: return "expired";
  }
  return "unknown";
}

std::optional<JobState> job_state_from_string(std::string_view s) noexcept {
  for (JobState st : {JobState::running, JobState::done, JobState::stopped, JobState::expired})
    if (s == to_string(st)) return st;
  return std::nullopt;
}

// ---------------------------------------------------------------------------------
// a job

std::size_t Job::errors() const noexcept {
  return count(JobRigOutcome::failed) + count(JobRigOutcome::refused) + count(JobRigOutcome::silent);
}

bool Job::finished() const noexcept {
  return expired || (count(JobRigOutcome::pending) == 0 && count(JobRigOutcome::dispatched) == 0);
}

JobState Job::state() const noexcept {
  if (!finished()) return JobState::running;
  if (expired) return JobState::expired;
  return stopped ? JobState::stopped : JobState::done;
}

void Job::set_outcome(JobRig& rig, JobRigOutcome o) noexcept {
  --counts[index_of(rig.outcome)];
  ++counts[index_of(o)];
  rig.outcome = o;
}

void Job::recount() noexcept {
  counts.fill(0);
  for (const JobRig& r : rigs) ++counts[index_of(r.outcome)];
}

// ---------------------------------------------------------------------------------
// selection

namespace {

bool labels_match(const StringMap& want, const StringMap& have) {
  for (const auto& [k, v] : want) {
    const auto it = have.find(k);
    if (it == have.end() || it->second != v) return false;
  }
  return true;
}

bool labels_match(const StringMap& want, const Fleet::LabelList& have) {
  for (const auto& [k, v] : want) {
    const auto it = std::lower_bound(have.begin(), have.end(), k,
                                     [](const auto& label, const std::string& key) { return label.first < key; });
    if (it == have.end() || it->first != k || it->second != v) return false;
  }
  return true;
}

bool glob_match(const std::string& glob, const std::string& rig_id) {
  return glob.empty() || fnmatch(glob.c_str(), rig_id.c_str(), 0) == 0;
}

// What a rig's command says about it: its id, state, and why it ended so. Only
// this is kept of a command (its output may be 64 KiB, and a job has 20,000).
struct CommandSummary {
  std::string cmd_id;
  CommandState state = CommandState::queued;
  std::string detail;
};

CommandSummary summary_of(const CommandView& c) {
  CommandSummary s{c.cmd_id, c.state, c.detail};
  if (!s.detail.empty() || c.state == CommandState::succeeded) return s;
  if (c.nack) {
    s.detail = std::string(fleetlink::to_string(c.nack->reason)) + ": " + c.nack->detail;
  } else if (c.result) {
    s.detail = "exit code " + std::to_string(c.result->exit_code);
    if (c.result->signal != 0) s.detail += ", signal " + std::to_string(c.result->signal);
  }
  return s;
}

// A resumed job reads its commands' records this many at a time: each may carry
// 64 KiB of output, and a fleet-wide job has 20,000.
constexpr std::size_t kResumePage = 500;

std::optional<CommandSummary> read_summary(const Fleet& fleet, std::string_view cmd_id) {
  std::optional<CommandSummary> out;
  fleet.read_command(cmd_id, [&](const CommandView& c) { out = summary_of(c); });
  return out;
}

// A dispatched rig's outcome from its command's end (null: the command is gone).
void settle(Job& job, JobRig& rig, const CommandSummary* cmd) {
  if (cmd == nullptr) {
    job.set_outcome(rig, JobRigOutcome::failed);
    rig.state.reset();
    rig.error = "unknown";
    rig.detail = "the command is no longer in the broker's history";
    return;
  }
  rig.state = cmd->state;
  if (cmd->state == CommandState::succeeded) {
    job.set_outcome(rig, JobRigOutcome::ok);
    rig.error.clear();
    rig.detail.clear();
    return;
  }
  job.set_outcome(rig, JobRigOutcome::failed);
  rig.error = to_string(cmd->state);
  rig.detail = cmd->detail;
}

}  // namespace

std::vector<std::string> JobTable::select(const Fleet& fleet, const JobTargets& targets) {
  if (targets.empty()) return {};
  if (!targets.ids.empty()) {
    std::set<std::string> chosen;
    for (const std::string& id : targets.ids) {
      if (!glob_match(targets.glob, id)) continue;
      const std::optional<RigView> rig = fleet.rig(id);
      // A listed rig never seen is kept: the job shows it refused (or held, with "hold").
      if (rig && !labels_match(targets.labels, rig->labels)) continue;
      chosen.insert(id);
    }
    return {chosen.begin(), chosen.end()};
  }
  std::vector<std::string> out;
  fleet.visit_rig_labels([&](std::string_view rig_id, const Fleet::LabelList& labels) {
    std::string id(rig_id);
    if (glob_match(targets.glob, id) && labels_match(targets.labels, labels)) out.push_back(std::move(id));
  });
  std::sort(out.begin(), out.end());  // rig ids are unique in the fleet
  return out;
}

// ---------------------------------------------------------------------------------
// the table

const Job& JobTable::start(Fleet& fleet, JobRequest request, std::vector<std::string> rig_ids, std::string job_id,
                           std::uint64_t now_ms) {
  Job job;
  job.deadline_s = request.deadline_s.value_or(default_job_deadline_s(request, rig_ids.size()));
  job.job_id = job_id;
  job.kind = std::move(request.kind);
  job.args = std::move(request.args);
  job.targets = std::move(request.targets);
  job.max_concurrency_given = request.max_concurrency;
  job.max_errors_given = request.max_errors;
  job.max_concurrency = resolve_concurrency(request.max_concurrency, rig_ids.size());
  if (request.max_errors) job.max_errors = request.max_errors->of(rig_ids.size());
  job.deliver_within_s = request.deliver_within_s;
  job.timeout_s = request.timeout_s;
  job.hold = request.hold;
  job.created_at_ms = now_ms;
  job.deadline_at_ms = now_ms + std::uint64_t{job.deadline_s} * 1000;
  job.rigs.reserve(rig_ids.size());
  for (std::string& id : rig_ids) job.rigs.push_back(JobRig{std::move(id), {}, JobRigOutcome::pending, {}, {}, {}});
  job.counts[index_of(JobRigOutcome::pending)] = job.rigs.size();
  auto [it, inserted] = jobs_.insert_or_assign(job_id, std::move(job));
  Job& j = it->second;
  dispatch(fleet, j);
  changed(j, now_ms);
  if (!j.finished_at_ms) save(j, now_ms);  // the record comes first; a finished job was saved by changed()
  return j;
}

Expected<const Job*> JobTable::resume(Fleet& fleet, const JobRecord& record, std::uint64_t now_ms) {
  Expected<Job> parsed = job_from_record(record, true);
  if (!parsed) return parsed.error();
  if (jobs_.find(record.job_id) != jobs_.end())
    return make_error(Errc::invalid_argument, "job " + record.job_id + " is running here already");
  Job job = std::move(*parsed);
  job.finished_at_ms.reset();

  // Where each rig is, from the records of the job's commands: newest first, so
  // the first one seen for a rig is its latest.
  std::unordered_map<std::string, CommandSummary, TransparentStringHash, std::equal_to<>> by_rig;
  CommandQuery q;
  q.job_id = job.job_id;
  q.limit = kResumePage;
  for (;;) {
    const std::vector<CommandView> page = fleet.list_commands(q);
    for (const CommandView& c : page) by_rig.try_emplace(c.rig_id, summary_of(c));
    if (page.size() < q.limit) break;
    q.before_cmd_id = page.back().cmd_id;
  }
  for (JobRig& r : job.rigs) {
    if (r.outcome != JobRigOutcome::pending && r.outcome != JobRigOutcome::dispatched) continue;
    std::optional<CommandSummary> cmd;
    if (const auto it = by_rig.find(r.rig_id); it != by_rig.end()) cmd = it->second;
    else if (!r.cmd_id.empty()) cmd = read_summary(fleet, r.cmd_id);
    if (!cmd) {
      // Its command was recorded (the job says dispatched) and is gone since: past
      // the store's retention, or a broker without a store.
      if (r.outcome == JobRigOutcome::dispatched) settle(job, r, nullptr);
      continue;
    }
    r.cmd_id = cmd->cmd_id;
    job.set_outcome(r, JobRigOutcome::dispatched);
    if (is_final(cmd->state)) settle(job, r, &*cmd);
  }
  job.recount();
  job.next_pending = 0;
  while (job.next_pending < job.rigs.size() && job.rigs[job.next_pending].outcome != JobRigOutcome::pending)
    ++job.next_pending;

  auto [it, inserted] = jobs_.emplace(job.job_id, std::move(job));
  Job& j = it->second;
  for (std::size_t i = 0; i < j.rigs.size(); ++i)
    if (j.rigs[i].outcome == JobRigOutcome::dispatched) in_flight_[j.rigs[i].cmd_id] = {&j, i};
  after_error(j);  // the errors its commands made while it was not watched
  if (now_ms >= j.deadline_at_ms) {
    expire(fleet, j, now_ms);
  } else {
    dispatch(fleet, j);
    changed(j, now_ms);
    if (!j.finished_at_ms) save(j, now_ms);
  }
  return &j;
}

void JobTable::after_error(Job& job) {
  if (job.stopped || !job.max_errors || job.errors() <= *job.max_errors) return;
  job.stopped = true;
  const std::string why = "not sent: the job stopped after " + std::to_string(job.errors()) +
                          " errors (max_errors " + std::to_string(*job.max_errors) + ")";
  for (std::size_t i = job.next_pending; i < job.rigs.size(); ++i) {
    JobRig& r = job.rigs[i];
    if (r.outcome != JobRigOutcome::pending) continue;
    job.set_outcome(r, JobRigOutcome::skipped);
    r.detail = why;
  }
  job.next_pending = job.rigs.size();
}

void JobTable::dispatch(Fleet& fleet, Job& job) {
  if (job.stopped || job.expired) return;
  // A draining broker refuses every command: its pending rigs wait for the broker
  // that resumes the job, instead of counting as errors.
  if (fleet.draining()) return;
  for (; job.next_pending < job.rigs.size(); ++job.next_pending) {
    if (job.stopped) return;
    if (job.max_concurrency != 0 && job.count(JobRigOutcome::dispatched) >= job.max_concurrency) return;
    const std::size_t i = job.next_pending;
    JobRig& r = job.rigs[i];
    if (r.outcome != JobRigOutcome::pending) continue;
    CommandRequest request;
    request.rig_id = r.rig_id;
    request.kind = job.kind;
    request.args = job.args;
    request.deliver_within_s = job.deliver_within_s;
    request.timeout_s = job.timeout_s;
    request.hold = job.hold;
    request.job_id = job.job_id;
    EnqueueOutcome outcome = fleet.enqueue(std::move(request));
    if (const auto* ok = std::get_if<EnqueueOk>(&outcome)) {
      r.cmd_id = ok->cmd_id;
      job.set_outcome(r, JobRigOutcome::dispatched);
      in_flight_[ok->cmd_id] = {&job, i};
    } else {
      const auto& failure = std::get<EnqueueFailure>(outcome);
      job.set_outcome(r, JobRigOutcome::refused);
      r.error = to_string(failure.error);
      r.detail = failure.detail;
      after_error(job);
    }
  }
}


bool JobTable::command_finished(Fleet& fleet, std::string_view cmd_id, std::uint64_t now_ms) {
  const auto it = in_flight_.find(cmd_id);
  if (it == in_flight_.end()) return false;
  const auto [job_ptr, index] = it->second;
  Job& job = *job_ptr;
  JobRig& r = job.rigs[index];
  const std::optional<CommandSummary> cmd = read_summary(fleet, r.cmd_id);
  if (cmd && !is_final(cmd->state)) return true;  // not over after all: the reconcile looks again
  in_flight_.erase(it);
  settle(job, r, cmd ? &*cmd : nullptr);
  if (r.outcome != JobRigOutcome::ok) after_error(job);
  dispatch(fleet, job);
  changed(job, now_ms);
  return true;
}

void JobTable::expire(Fleet& fleet, Job& job, std::uint64_t now_ms) {
  job.expired = true;
  const std::string at = iso8601_utc_ms(job.deadline_at_ms);
  for (JobRig& r : job.rigs) {
    if (r.outcome == JobRigOutcome::pending) {
      job.set_outcome(r, JobRigOutcome::skipped);
      r.detail = "not sent: the job reached its deadline (" + at + ")";
      continue;
    }
    if (r.outcome != JobRigOutcome::dispatched) continue;
    in_flight_.erase(r.cmd_id);
    const std::optional<CommandSummary> cmd = read_summary(fleet, r.cmd_id);
    if (!cmd || is_final(cmd->state)) {
      settle(job, r, cmd ? &*cmd : nullptr);  // it ended; its event had not reached the table yet
      continue;
    }
    job.set_outcome(r, JobRigOutcome::silent);
    r.state = cmd->state;
    if (cmd->state == CommandState::queued || cmd->state == CommandState::sent) {
      r.error = "never_acknowledged";
      r.detail = "the rig had not acknowledged it by the job's deadline (" + at +
                 "): it is cancelled, so it cannot run after the job reported it";
      (void)fleet.cancel(r.cmd_id);
    } else {
      r.error = "never_answered";
      r.detail = "acknowledged, but no result by the job's deadline (" + at +
                 "); the command goes on under its own timeout_s";
    }
  }
  job.next_pending = job.rigs.size();
  changed(job, now_ms);
}

void JobTable::changed(Job& job, std::uint64_t now_ms) {
  if (job.finished_at_ms) return;
  if (!job.finished()) {
    job.unsaved = true;
    return;
  }
  job.finished_at_ms = now_ms;
  save(job, now_ms);
  finished_.push_back(job.job_id);
  forget_finished();
}

void JobTable::forget_finished() {
  // The newest finished job always stays: start() and resume() hand it out.
  while (finished_.size() > std::max<std::size_t>(history_, 1)) {
    jobs_.erase(finished_.front());
    finished_.pop_front();
  }
}

void JobTable::save(Job& job, std::uint64_t now_ms) {
  job.saved_at_ms = now_ms;
  job.unsaved = false;
  if (store_ != nullptr) store_->put_job(job_record(job));
}

void JobTable::reconcile(Fleet& fleet, std::uint64_t now_ms) {
  std::vector<std::string> ended;
  for (const auto& [cmd_id, where] : in_flight_) {
    bool over = false;
    const bool known = fleet.read_command(cmd_id, [&](const CommandView& c) { over = is_final(c.state); });
    if (!known || over) ended.push_back(cmd_id);
  }
  for (const std::string& cmd_id : ended) command_finished(fleet, cmd_id, now_ms);
}

void JobTable::tick(Fleet& fleet, std::uint64_t now_ms) {
  std::vector<Job*> due;
  for (auto& [id, job] : jobs_)
    if (!job.finished_at_ms && now_ms >= job.deadline_at_ms) due.push_back(&job);
  for (Job* job : due) expire(fleet, *job, now_ms);
  if (now_ms - reconciled_at_ms_ >= kJobReconcileIntervalMs) {
    reconciled_at_ms_ = now_ms;
    reconcile(fleet, now_ms);
  }
  for (auto& [id, job] : jobs_)
    if (!job.finished_at_ms && job.unsaved && now_ms - job.saved_at_ms >= kJobSaveIntervalMs) save(job, now_ms);
}

void JobTable::save_running(std::uint64_t now_ms) {
  for (auto& [id, job] : jobs_)
    if (!job.finished_at_ms && job.unsaved) save(job, now_ms);
}

const Job* JobTable::find(std::string_view job_id) const {
  const auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

void JobTable::for_each_newest_first(const std::function<void(const Job&)>& visit) const {
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) visit(it->second);
}

}  // namespace fleetlink::broker
