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
    case JobState::cancelled: return "cancelled";
  }
  return "unknown";
}

std::optional<JobState> job_state_from_string(std::string_view s) noexcept {
  for (JobState st : {JobState::running, JobState::done, JobState::stopped, JobState::expired, JobState::cancelled})
    if (s == to_string(st)) return st;
  return std::nullopt;
}

std::string first_line_of(std::string_view text) {
  const std::size_t end = text.find_first_of("\r\n");
  std::string line = to_utf8_lossy(text.substr(0, std::min({end, text.size(), kJobFirstLineMax * 4})));
  if (line.size() > kJobFirstLineMax) {
    std::size_t cut = kJobFirstLineMax;
    // Back to the start of a character: continuation bytes are 10xxxxxx.
    while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
    line.resize(cut);
  }
  return line;
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
  if (cancelled_at_ms) return JobState::cancelled;  // the operator's decision, whatever came after it
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

using CommandSummary = JobCommandSummary;

CommandSummary summary_of(const CommandView& c) {
  CommandSummary s{c.cmd_id, c.state, c.detail, std::nullopt, {}};
  if (c.result) {
    s.exit_code = c.result->exit_code;
    s.first_line = first_line_of(
        std::string_view(reinterpret_cast<const char*>(c.result->output.data()), c.result->output.size()));
  }
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
    rig.exit_code.reset();
    rig.first_line.clear();
    return;
  }
  rig.state = cmd->state;
  rig.exit_code = cmd->exit_code;
  rig.first_line = cmd->first_line;
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

JobPreview JobTable::preview(const Fleet& fleet, const JobRequest& request) {
  JobPreview out;
  for (std::string& id : select(fleet, request.targets)) {
    const std::optional<RigView> rig = fleet.rig(id);
    out.rigs.push_back({std::move(id), rig ? rig->state : std::string("unknown")});
  }
  const std::size_t n = out.rigs.size();
  out.max_concurrency = resolve_concurrency(request.max_concurrency, n);
  if (request.max_errors) out.max_errors = request.max_errors->of(n);
  out.deadline_s = request.deadline_s.value_or(default_job_deadline_s(request, n));
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
  job.operator_name = std::move(request.operator_name);
  job.created_at_ms = now_ms;
  job.deadline_at_ms = now_ms + std::uint64_t{job.deadline_s} * 1000;
  job.rigs.reserve(rig_ids.size());
  for (std::string& id : rig_ids) job.rigs.emplace_back().rig_id = std::move(id);
  job.counts[index_of(JobRigOutcome::pending)] = job.rigs.size();
  auto [it, inserted] = jobs_.insert_or_assign(job_id, std::move(job));
  Job& j = it->second;
  // Its hold comes first: another broker's look for unfinished jobs finds it held.
  fleet.hold_job(job_id, true, [](Fleet::JobHold) {});
  dispatch(fleet, j);
  changed(j, now_ms);
  if (!j.finished_at_ms) save(j, now_ms);  // the record comes first; a finished job was saved by changed()
  return j;
}

// A job being resumed: its commands are read, newest first, a page at a time
// (before resume_then returns, or later).
struct JobTable::ResumeState {
  std::shared_ptr<Job> job;
  CommandQuery query;
  std::unordered_map<std::string, CommandSummary, TransparentStringHash, std::equal_to<>> by_rig;
  std::uint64_t started_ms = 0;
  bool returned = false;  // resume_then has returned: the reads answered later
  Resumed done;
};

void JobTable::resume_then(Fleet& fleet, const JobRecord& record, std::uint64_t now_ms, Resumed done) {
  if (record.finished) return done(make_error(Errc::invalid_argument, "job " + record.job_id + " is finished"));
  Expected<Job> parsed = job_from_record(record, true);
  if (!parsed) return done(parsed.error());
  if (jobs_.find(record.job_id) != jobs_.end())
    return done(make_error(Errc::invalid_argument, "job " + record.job_id + " is running here already"));
  auto st = std::make_shared<ResumeState>();
  st->job = std::make_shared<Job>(std::move(*parsed));
  st->job->finished_at_ms.reset();
  st->query.job_id = st->job->job_id;
  st->query.limit = kResumePage;
  st->started_ms = now_ms;
  st->done = std::move(done);
  arriving_.insert(st->job->job_id);
  resume_page(fleet, st);
  st->returned = true;
}

void JobTable::resume_page(Fleet& fleet, const std::shared_ptr<ResumeState>& st) {
  fleet.list_commands_then(st->query, [this, alive = token(), &fleet, st](std::vector<CommandView> got) {
    if (alive.expired()) return;
    // Newest first: the first command seen for a rig is its latest.
    for (const CommandView& c : got) st->by_rig.try_emplace(c.rig_id, summary_of(c));
    if (got.size() == st->query.limit) {
      st->query.before_cmd_id = got.back().cmd_id;
      return resume_page(fleet, st);
    }
    // Rigs whose command the listing missed (dispatched, by cmd_id), read one by one.
    std::vector<std::string> missing;
    auto at = std::make_shared<std::vector<std::size_t>>();
    for (std::size_t i = 0; i < st->job->rigs.size(); ++i) {
      const JobRig& r = st->job->rigs[i];
      if (r.outcome != JobRigOutcome::pending && r.outcome != JobRigOutcome::dispatched) continue;
      if (st->by_rig.count(r.rig_id) == 0 && !r.cmd_id.empty()) {
        missing.push_back(r.cmd_id);
        at->push_back(i);
      }
    }
    read_summaries(fleet, std::move(missing), [this, alive, &fleet, st, at](Summaries found) {
      if (alive.expired()) return;
      for (std::size_t k = 0; k < at->size(); ++k)
        if (found[k]) st->by_rig.insert_or_assign(st->job->rigs[(*at)[k]].rig_id, *found[k]);
      resume_place(fleet, *st);
    });
  });
}

void JobTable::resume_place(Fleet& fleet, ResumeState& st) {
  arriving_.erase(st.job->job_id);
  if (jobs_.find(st.job->job_id) != jobs_.end())
    return st.done(make_error(Errc::invalid_argument, "job " + st.job->job_id + " is running here already"));
  Job& j = *st.job;
  for (JobRig& r : j.rigs) {
    if (r.outcome != JobRigOutcome::pending && r.outcome != JobRigOutcome::dispatched) continue;
    const auto it = st.by_rig.find(r.rig_id);
    if (it == st.by_rig.end()) {
      // Its command was recorded (the job says dispatched) and is gone since: past
      // the store's retention, or a broker without a store.
      if (r.outcome == JobRigOutcome::dispatched) settle(j, r, nullptr);
      continue;
    }
    r.cmd_id = it->second.cmd_id;
    j.set_outcome(r, JobRigOutcome::dispatched);
    if (is_final(it->second.state)) settle(j, r, &it->second);
  }
  j.recount();
  j.next_pending = 0;
  while (j.next_pending < j.rigs.size() && j.rigs[j.next_pending].outcome != JobRigOutcome::pending) ++j.next_pending;

  const bool later = st.returned;  // read from a store that answers later: sent and persisted here
  auto [slot, inserted] = jobs_.emplace(j.job_id, std::move(j));
  Job& placed = slot->second;
  for (std::size_t i = 0; i < placed.rigs.size(); ++i)
    if (placed.rigs[i].outcome == JobRigOutcome::dispatched && !placed.rigs[i].cmd_id.empty())
      in_flight_[placed.rigs[i].cmd_id] = {&placed, i};
  after_error(placed);  // the errors its commands made while it was not watched
  const std::uint64_t at_ms = later ? std::max(now(), st.started_ms) : st.started_ms;
  if (at_ms >= placed.deadline_at_ms) {
    expire(fleet, placed, at_ms);
  } else {
    dispatch(fleet, placed);
    changed(placed, at_ms);
    if (!placed.finished_at_ms) save(placed, at_ms);
  }
  if (later) (void)fleet.persist();
  st.done(&placed);
}

Expected<const Job*> JobTable::resume(Fleet& fleet, const JobRecord& record, std::uint64_t now_ms) {
  std::optional<Expected<const Job*>> out;
  resume_then(fleet, record, now_ms, [&out](Expected<const Job*> r) { out = std::move(r); });
  if (!out) return make_error(Errc::io, "job " + record.job_id + ": its commands are read later");
  return std::move(*out);
}

void JobTable::resume_all(Fleet& fleet, const std::vector<JobRecord>& records, std::uint64_t now_ms, Resumed each) {
  for (const JobRecord& record : records) {
    if (record.finished || jobs_.count(record.job_id) != 0 || arriving_.count(record.job_id) != 0) continue;
    arriving_.insert(record.job_id);
    fleet.hold_job(record.job_id, true,
                   [this, alive = token(), &fleet, record, now_ms, each](Fleet::JobHold hold) {
                     if (alive.expired()) return;
                     arriving_.erase(record.job_id);
                     if (!hold.held && !hold.error) {
                       notice("job " + record.job_id + " is driven by broker " + hold.holder + ": left to it");
                       return;
                     }
                     // The registry could not say: this broker's own record, resumed (the
                     // hold is claimed again at the next renewal).
                     resume_then(fleet, record, now_ms, each);
                   });
  }
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
  if (job.stopped || job.expired || job.expiring || job.dispatching || job.cancelled_at_ms) return;
  // A draining broker refuses every command: its pending rigs wait for the broker
  // that resumes the job, instead of counting as errors.
  if (fleet.draining()) return;
  job.dispatching = true;
  struct Done {
    Job& job;
    ~Done() { job.dispatching = false; }
  } done{job};
  // A job's commands go to their rigs only once their records are durable. A
  // large job hands them to the store in chunks as it makes them, so the first
  // rigs get theirs while the rest are still being made and recorded, instead
  // of all waiting for one large commit at the end. The job's own record goes
  // first: a command in the store names a job the store knows.
  std::size_t unpersisted = 0;
  bool job_put = false;
  auto persist_chunk = [&] {
    if (!job_put) {
      save(job, now());
      job_put = true;
    }
    (void)fleet.persist();
    unpersisted = 0;
  };
  for (; job.next_pending < job.rigs.size(); ++job.next_pending) {
    if (unpersisted >= kPersistChunk) persist_chunk();
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
    request.operator_name = job.operator_name;
    if (fleet.routes_elsewhere(r.rig_id)) {
      // Not connected here: its owner broker takes it and answers (no cmd_id until then).
      job.set_outcome(r, JobRigOutcome::dispatched);
      fleet.enqueue_routed(std::move(request), [this, alive = token(), &fleet, job_id = job.job_id,
                                                i](Fleet::RoutedOutcome out) {
        if (!alive.expired()) routed(fleet, job_id, i, std::move(out));
      });
      continue;
    }
    EnqueueOutcome outcome = fleet.enqueue(std::move(request));
    if (const auto* ok = std::get_if<EnqueueOk>(&outcome)) {
      r.cmd_id = ok->cmd_id;
      job.set_outcome(r, JobRigOutcome::dispatched);
      in_flight_[ok->cmd_id] = {&job, i};
      ++unpersisted;
    } else {
      const auto& failure = std::get<EnqueueFailure>(outcome);
      job.set_outcome(r, JobRigOutcome::refused);
      r.error = to_string(failure.error);
      r.detail = failure.detail;
      after_error(job);
    }
  }
}


JobCancel JobTable::cancel(Fleet& fleet, std::string_view job_id, std::uint64_t now_ms) {
  const auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return JobCancel::unknown;
  Job& job = it->second;
  if (job.finished_at_ms || job.expiring) return JobCancel::finished;
  if (job.cancelled_at_ms) return JobCancel::pending;  // asked again: the first cancel is on its way
  job.cancelled_at_ms = now_ms;
  const std::string why = "not sent: the job was cancelled (" + iso8601_utc_ms(now_ms) + ")";
  std::vector<std::string> to_cancel;
  for (JobRig& r : job.rigs) {
    if (r.outcome == JobRigOutcome::pending) {
      job.set_outcome(r, JobRigOutcome::skipped);
      r.detail = why;
    } else if (r.outcome == JobRigOutcome::dispatched && !r.cmd_id.empty()) {
      // (A routed one without its cmd_id yet is cancelled when its owner answers: routed().)
      to_cancel.push_back(r.cmd_id);
    }
  }
  job.next_pending = job.rigs.size();
  // The commands end with their rig's answer to CANCEL (or the fleet's cancel
  // deadline); their ends settle the rigs through command_finished().
  for (const std::string& cmd_id : to_cancel) fleet.cancel_routed(cmd_id, [](CancelOutcome) {});
  Job& still = jobs_.find(job_id)->second;  // (an answer at once touches in_flight_, never jobs_)
  changed(still, now_ms);
  if (!still.finished_at_ms) save(still, now_ms);  // the record says cancelled at once
  return JobCancel::cancelled;
}

void JobTable::routed(Fleet& fleet, const std::string& job_id, std::size_t index, Fleet::RoutedOutcome out) {
  const auto* ok = std::get_if<EnqueueOk>(&out.outcome);
  const auto* failure = std::get_if<EnqueueFailure>(&out.outcome);
  // A routed command whose owner did not answer in time may be there: followed by its cmd_id.
  std::string cmd_id;
  if (ok != nullptr) cmd_id = ok->cmd_id;
  else if (failure != nullptr && failure->error == EnqueueError::route_timeout) cmd_id = failure->cmd_id;
  const auto it = jobs_.find(job_id);
  // Gone from the table: another broker drives it now (disown), and follows the
  // command by its record; nothing to do here.
  if (it == jobs_.end()) return;
  Job* job = &it->second;
  JobRig* r = index < job->rigs.size() ? &job->rigs[index] : nullptr;
  if (r == nullptr || job->finished_at_ms || job->expiring || r->outcome != JobRigOutcome::dispatched ||
      !r->cmd_id.empty()) {
    // The job reported this rig already (its deadline came first): the command must not run after it.
    if (!cmd_id.empty()) fleet.cancel_routed(cmd_id, [](CancelOutcome) {});
    return;
  }
  const std::uint64_t now_ms = now();
  if (!cmd_id.empty()) {
    r->cmd_id = cmd_id;
    in_flight_[cmd_id] = {job, index};
    // Cancelled while its owner broker had not answered: this one is cancelled too.
    if (job->cancelled_at_ms && !(ok != nullptr && is_final(ok->state)))
      fleet.cancel_routed(cmd_id, [](CancelOutcome) {});
    if (ok != nullptr && is_final(ok->state)) {
      (void)command_finished(fleet, cmd_id, now_ms);
      return;
    }
    job->unsaved = true;
    return;
  }
  job->set_outcome(*r, JobRigOutcome::refused);
  if (failure != nullptr) {
    r->error = to_string(failure->error);
    r->detail = failure->detail;
  }
  after_error(*job);
  went_on(fleet, *job, now_ms);
}

void JobTable::went_on(Fleet& fleet, Job& job, std::uint64_t now_ms) {
  if (job.dispatching) return;  // an answer inside dispatch(): it goes on by itself
  dispatch(fleet, job);
  changed(job, now_ms);
  (void)fleet.persist();
}

void JobTable::read_summaries(const Fleet& fleet, std::vector<std::string> cmd_ids,
                              std::function<void(Summaries)> done) {
  if (!fleet.reads_later() || cmd_ids.empty()) {
    Summaries out;
    out.reserve(cmd_ids.size());
    for (const std::string& id : cmd_ids) out.push_back(read_summary(fleet, id));
    return done(std::move(out));
  }
  struct Gather {
    Summaries out;
    std::size_t left = 0;
    std::function<void(Summaries)> done;
  };
  auto g = std::make_shared<Gather>();
  g->out.resize(cmd_ids.size());
  g->left = cmd_ids.size();
  g->done = std::move(done);
  for (std::size_t i = 0; i < cmd_ids.size(); ++i) {
    fleet.command_then(cmd_ids[i], [g, i](std::optional<CommandView> v) {
      if (v) g->out[i] = summary_of(*v);
      if (--g->left == 0) g->done(std::move(g->out));
    });
  }
}

bool JobTable::command_finished(Fleet& fleet, std::string_view cmd_id, std::uint64_t now_ms) {
  if (in_flight_.find(cmd_id) == in_flight_.end()) return false;
  const bool later = fleet.reads_later();
  read_summaries(fleet, {std::string(cmd_id)},
                 [this, alive = token(), &fleet, id = std::string(cmd_id), later, now_ms](Summaries cmd) {
                   if (alive.expired()) return;
                   finish_command(fleet, id, cmd.front(), later ? now() : now_ms);
                   if (later) (void)fleet.persist();
                 });
  return true;
}

void JobTable::finish_command(Fleet& fleet, const std::string& cmd_id, const std::optional<CommandSummary>& cmd,
                              std::uint64_t now_ms) {
  const auto it = in_flight_.find(cmd_id);
  if (it == in_flight_.end()) return;
  if (cmd && !is_final(cmd->state)) return;  // not over after all: the reconcile looks again
  const auto [job_ptr, index] = it->second;
  Job& job = *job_ptr;
  if (job.expiring) return;  // its expiry reads it too
  JobRig& r = job.rigs[index];
  in_flight_.erase(it);
  settle(job, r, cmd ? &*cmd : nullptr);
  if (r.outcome != JobRigOutcome::ok) after_error(job);
  dispatch(fleet, job);
  changed(job, now_ms);
}

void JobTable::expire(Fleet& fleet, Job& job, std::uint64_t now_ms) {
  if (job.expiring || job.finished_at_ms) return;
  job.expiring = true;  // nothing more is sent, nothing settles it meanwhile
  std::vector<std::string> ids;
  for (const JobRig& r : job.rigs)
    if (r.outcome == JobRigOutcome::dispatched && !r.cmd_id.empty()) ids.push_back(r.cmd_id);
  const bool later = fleet.reads_later();
  read_summaries(fleet, std::move(ids), [this, alive = token(), &fleet, job_id = job.job_id, later,
                                         now_ms](Summaries cmds) {
    if (alive.expired()) return;
    const auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return;
    expire_with(fleet, it->second, cmds, later ? now() : now_ms);
    if (later) (void)fleet.persist();
  });
}

void JobTable::expire_with(Fleet& fleet, Job& job, const Summaries& cmds, std::uint64_t now_ms) {
  job.expiring = false;
  job.expired = true;
  const std::string at = iso8601_utc_ms(job.deadline_at_ms);
  std::size_t k = 0;  // cmds follow the dispatched rigs that had a cmd_id, in order
  for (JobRig& r : job.rigs) {
    if (r.outcome == JobRigOutcome::pending) {
      job.set_outcome(r, JobRigOutcome::skipped);
      r.detail = "not sent: the job reached its deadline (" + at + ")";
      continue;
    }
    if (r.outcome != JobRigOutcome::dispatched) continue;
    std::optional<CommandSummary> cmd;
    if (!r.cmd_id.empty()) {
      in_flight_.erase(r.cmd_id);
      cmd = k < cmds.size() ? cmds[k] : std::nullopt;
      ++k;
      if (!cmd || is_final(cmd->state)) {
        settle(job, r, cmd ? &*cmd : nullptr);  // it ended; its event had not reached the table yet
        continue;
      }
    }
    job.set_outcome(r, JobRigOutcome::silent);
    if (cmd) r.state = cmd->state;
    if (!cmd || cmd->state == CommandState::queued || cmd->state == CommandState::sent) {
      // (No cmd_id: its owner broker had not answered yet; the answer cancels it.)
      r.error = "never_acknowledged";
      r.detail = "the rig had not acknowledged it by the job's deadline (" + at +
                 "): it is cancelled, so it cannot run after the job reported it";
      if (!r.cmd_id.empty()) fleet.cancel_routed(r.cmd_id, [](CancelOutcome) {});
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
  if (job.finished_at_ms || job.expiring) return;
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
  if (reconciling_ || in_flight_.empty()) return;
  std::vector<std::string> ids;
  ids.reserve(in_flight_.size());
  for (const auto& [cmd_id, where] : in_flight_) ids.push_back(cmd_id);
  reconciling_ = true;
  const bool later = fleet.reads_later();
  auto keep = std::make_shared<std::vector<std::string>>(ids);
  read_summaries(fleet, std::move(ids), [this, alive = token(), &fleet, keep, later, now_ms](Summaries cmds) {
    if (alive.expired()) return;
    reconciling_ = false;
    const std::uint64_t at = later ? now() : now_ms;
    for (std::size_t i = 0; i < keep->size(); ++i)
      if (!cmds[i] || is_final(cmds[i]->state)) finish_command(fleet, (*keep)[i], cmds[i], at);
    if (later) (void)fleet.persist();
  });
}

void JobTable::hold_running(Fleet& fleet) {
  for (auto& [id, job] : jobs_) {
    if (job.finished_at_ms) continue;
    fleet.hold_job(id, false, [this, alive = token(), job_id = id](Fleet::JobHold hold) {
      if (alive.expired() || hold.held || hold.error) return;  // held, or the registry cannot say: go on
      disown(job_id, hold.holder);
    });
  }
}

void JobTable::disown(const std::string& job_id, const std::string& holder) {
  const auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.finished_at_ms) return;
  for (const JobRig& r : it->second.rigs)
    if (!r.cmd_id.empty()) in_flight_.erase(r.cmd_id);
  jobs_.erase(it);
  notice("job " + job_id + " is driven by broker " + (holder.empty() ? std::string("?") : holder) +
         " now: this broker stopped driving it");
}

void JobTable::adopt_orphans(Fleet& fleet) {
  if (store_ == nullptr || scanning_) return;
  JobQuery query;
  query.finished = false;
  query.limit = 100;
  query.head_only = true;
  scanning_ = true;
  store_->list_jobs(query, [this, alive = token(), &fleet](std::vector<JobRecord> open) {
    if (alive.expired()) return;
    scanning_ = false;
    for (const JobRecord& head : open) {
      if (head.finished || jobs_.count(head.job_id) != 0 || arriving_.count(head.job_id) != 0) continue;
      arriving_.insert(head.job_id);
      fleet.hold_job(head.job_id, true, [this, alive, &fleet, job_id = head.job_id](Fleet::JobHold hold) {
        if (alive.expired()) return;
        if (!hold.held || store_ == nullptr) {  // driven by a live broker (or nobody can say): left alone
          arriving_.erase(job_id);
          return;
        }
        store_->find_job(job_id, [this, alive, &fleet, job_id](std::optional<JobRecord> record) {
          if (alive.expired()) return;
          arriving_.erase(job_id);
          if (!record || record->finished) return;
          resume_then(fleet, *record, now(), [this, job_id](Expected<const Job*> job) {
            if (!job) return notice("job " + job_id + " not taken over: " + job.error().detail);
            notice("job " + job_id + " taken over: its holder is gone (" + std::to_string((*job)->rigs.size()) +
                   " rigs, " + std::to_string((*job)->count(JobRigOutcome::dispatched)) + " in flight, " +
                   std::to_string((*job)->count(JobRigOutcome::pending)) + " pending)");
          });
        });
      });
    }
  });
}

void JobTable::tick(Fleet& fleet, std::uint64_t now_ms) {
  std::vector<Job*> due;
  for (auto& [id, job] : jobs_)
    if (!job.finished_at_ms && !job.expiring && now_ms >= job.deadline_at_ms) due.push_back(&job);
  for (Job* job : due) expire(fleet, *job, now_ms);
  if (now_ms - reconciled_at_ms_ >= kJobReconcileIntervalMs) {
    reconciled_at_ms_ = now_ms;
    reconcile(fleet, now_ms);
  }
  for (auto& [id, job] : jobs_)
    if (!job.finished_at_ms && job.unsaved && now_ms - job.saved_at_ms >= kJobSaveIntervalMs) save(job, now_ms);
  if (!fleet.shares_jobs()) return;
  if (now_ms - held_at_ms_ >= fleet.job_hold_refresh_ms()) {
    held_at_ms_ = now_ms;
    hold_running(fleet);
  }
  if (now_ms - adopted_at_ms_ >= kJobAdoptIntervalMs) {
    adopted_at_ms_ = now_ms;
    adopt_orphans(fleet);
  }
}

std::uint64_t JobTable::now() const { return now_ms_ ? now_ms_() : unix_now_ms(); }

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
