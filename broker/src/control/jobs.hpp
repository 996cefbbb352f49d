#pragma once
// Fan-out jobs (POST /v1/jobs, and POST /v1/commands with targets): a Job picks
// its rigs (ids, an id glob, labels), sends one command to at most
// max_concurrency of them at a time and to the next as each finishes, stops
// sending once more than max_errors failed, and ends by its deadline whatever its
// rigs do: a rig that never acknowledges or never answers is counted `silent`
// instead of holding the job `running` forever.
//
// Every job is a JobRecord in the command store (control/job_json.hpp has its
// body), written when it starts, when it ends, and at most every
// kJobSaveIntervalMs in between while it changes. Its per-rig commands carry its
// job_id in their own records, so a restarted broker re-creates an unfinished job
// from its record (resume) and reads where each rig is from its command: a saved
// job can lag behind its commands, never disagree with them for long.
//
// Several brokers sharing a registry and a store (Fleet::shares_jobs): a job is
// driven by the one broker that holds it in the registry (Fleet::hold_job),
// renewed every tick interval; a rig on another broker gets its command through
// Fleet::enqueue_routed, and the command's record is read from the store (later,
// when the store answers later). Every broker looks at the store's unfinished
// jobs every kJobAdoptIntervalMs and takes over one whose holder is gone, so a
// broker's kill -9 stops none of its jobs for longer than the hold's TTL (or at
// once, when the mesh shows that broker's channel empty).
//
// Pure logic over a Fleet and a CommandStore: whoever owns the table tells it
// when a command finished (Fleet events) and calls tick() about once a second.
// Threading: the loop thread, like Fleet: answers that come later (Redis) come
// on it too, and find the table through a token that dies with it.
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fleet/fleet.hpp"
#include "fleet/string_hash.hpp"
#include "fleetlink/expected.hpp"
#include "store/command_store.hpp"

namespace fleetlink::broker {

struct JobTargets {
  std::vector<std::string> ids;   // these rigs (listed even when never seen: refused)
  std::string glob;               // rig ids matching this fnmatch(3) pattern
  StringMap labels;               // rigs having every one of these labels
  bool empty() const { return ids.empty() && glob.empty() && labels.empty(); }
};

// A number of rigs, or a share of the job's: "max_errors": 3 or "10%".
struct RigShare {
  std::uint64_t count = 0;         // !percent
  std::uint32_t basis_points = 0;  // percent: 1250 is 12.5 %
  bool percent = false;

  // Of a job of `rigs` rigs, rounded down.
  std::size_t of(std::size_t rigs) const noexcept;
  // As the request gave it: "3", "10%", "12.5%".
  std::string text() const;
  bool operator==(const RigShare&) const = default;
};
// "3", "10%", "12.5%" (at most two decimals, at most 100 %); nullopt otherwise.
std::optional<RigShare> parse_rig_share(std::string_view text);

struct JobRequest {
  std::string kind;
  StringMap args;
  JobTargets targets;
  std::optional<RigShare> max_concurrency;        // unset: all at once
  std::optional<RigShare> max_errors;             // unset: never stop
  std::optional<std::uint32_t> deliver_within_s;  // every rig's command; unset: the kind's default
  std::optional<std::uint32_t> timeout_s;         // likewise
  bool hold = false;                              // listed rigs never seen: hold their commands
  std::optional<std::uint32_t> deadline_s;        // unset: default_job_deadline_s()
  std::string operator_name;                      // who started it (each command records it too); empty: open API
};

inline constexpr std::uint32_t kMaxJobDeadlineS = 7 * 24 * 3600;
// Added to a default deadline: a command's own deadlines are looked at by the
// fleet's sweep, and should settle its rig before the job's deadline does.
inline constexpr std::uint32_t kJobDeadlineMarginS = 10;
// A running job's record is written at most this often while it changes.
inline constexpr std::uint64_t kJobSaveIntervalMs = 5000;
// Commands in flight are read back this often, in case one ended without an
// event reaching the table (another broker sharing the store finished it).
inline constexpr std::uint64_t kJobReconcileIntervalMs = 5000;
// Shared jobs: how often a broker looks for unfinished jobs nobody drives.
inline constexpr std::uint64_t kJobAdoptIntervalMs = 10000;

// The longest the job's commands can take: one command's deliver_within_s +
// timeout_s (the request's, or the kind's defaults) for each wave that
// max_concurrency makes of the rigs, plus kJobDeadlineMarginS; at most
// kMaxJobDeadlineS.
std::uint32_t default_job_deadline_s(const JobRequest& request, std::size_t rigs);

enum class JobRigOutcome : std::uint8_t {
  pending,     // not sent yet (waiting for a concurrency slot)
  dispatched,  // its command is on its way or running
  ok,          // its command succeeded
  failed,      // its command ended otherwise (error: the final state)
  refused,     // the enqueue was refused (unknown rig, unsupported kind, ...)
  skipped,     // never sent: the job stopped after too many errors, reached its deadline, or was cancelled
  silent,      // its command was not acknowledged, or not answered, by the job's deadline
};
inline constexpr std::size_t kJobRigOutcomeCount = 7;
const char* to_string(JobRigOutcome o) noexcept;
std::optional<JobRigOutcome> job_rig_outcome_from_string(std::string_view s) noexcept;
const std::array<JobRigOutcome, kJobRigOutcomeCount>& all_job_rig_outcomes();

enum class JobState : std::uint8_t {
  running,  // a rig is pending or its command in flight
  done,     // every rig settled
  stopped,  // more than max_errors rigs failed: the rest were skipped
  expired,  // the deadline came first
  cancelled,  // cancelled (POST /v1/jobs/{id}/cancel): nothing more was sent, its commands were cancelled
};
const char* to_string(JobState s) noexcept;
std::optional<JobState> job_state_from_string(std::string_view s) noexcept;

struct JobRig {
  std::string rig_id;
  std::string cmd_id;                 // once dispatched
  JobRigOutcome outcome = JobRigOutcome::pending;
  std::optional<CommandState> state;  // the command's, when its outcome was settled (dispatched: ask the fleet)
  std::string error;                  // failed: the final state; refused: the enqueue error; silent: never_acknowledged / never_answered
  std::string detail;
  std::optional<std::int32_t> exit_code;  // settled, with a RESULT: the rig's exit code
  std::string first_line;             // settled, with a RESULT: its output's first line (at most kJobFirstLineMax bytes)
};

// A rig's first line of output is cut to this many bytes (whole UTF-8 characters):
// a fleet-wide job keeps one per rig, in memory and in its record.
inline constexpr std::size_t kJobFirstLineMax = 160;
// The first line of `text` (without its line end), at most kJobFirstLineMax
// bytes, cut at a UTF-8 character boundary; "" if the output is empty.
std::string first_line_of(std::string_view text);

struct Job {
  std::string job_id;
  std::string kind;
  StringMap args;
  JobTargets targets;
  std::optional<RigShare> max_concurrency_given;
  std::optional<RigShare> max_errors_given;
  std::size_t max_concurrency = 0;           // resolved; 0: all at once
  std::optional<std::size_t> max_errors;     // resolved; unset: never stop
  std::optional<std::uint32_t> deliver_within_s;
  std::optional<std::uint32_t> timeout_s;
  bool hold = false;
  std::string operator_name;                 // who started it; empty: the API is open
  std::uint32_t deadline_s = 0;
  std::uint64_t created_at_ms = 0;
  std::uint64_t deadline_at_ms = 0;
  std::optional<std::uint64_t> finished_at_ms;
  std::vector<JobRig> rigs;                  // sorted by rig id
  std::array<std::size_t, kJobRigOutcomeCount> counts{};
  bool stopped = false;                      // too many errors: nothing more is sent
  bool expired = false;                      // the deadline ended it
  std::optional<std::uint64_t> cancelled_at_ms;  // cancelled: nothing more is sent, its commands are cancelled
  bool expiring = false;                     // the deadline passed; its commands' records are being read
  bool dispatching = false;                  // dispatch() is sending: an answer that comes now waits for it
  // Rigs before this index are not pending: dispatch walks forward, so a
  // fleet-wide job costs O(1) per finished command, not a scan of every rig.
  std::size_t next_pending = 0;
  // The table's bookkeeping: when the record was last written, and whether the
  // job changed since.
  std::uint64_t saved_at_ms = 0;
  bool unsaved = false;

  std::size_t count(JobRigOutcome o) const noexcept { return counts[static_cast<std::size_t>(o)]; }
  // failed + refused + silent: what max_errors is compared with.
  std::size_t errors() const noexcept;
  bool finished() const noexcept;
  JobState state() const noexcept;
  // Moves a rig to `o`, keeping the counts.
  void set_outcome(JobRig& rig, JobRigOutcome o) noexcept;
  // Counts from the rigs' outcomes (a job read from its record).
  void recount() noexcept;
};

// What a rig's command says about it: its id, state, and why it ended so. Only
// this is kept of a command (its output may be 64 KiB, and a job has 20,000).
struct JobCommandSummary {
  std::string cmd_id;
  CommandState state = CommandState::queued;
  std::string detail;
  std::optional<std::int32_t> exit_code;  // it has a RESULT
  std::string first_line;                 // first_line_of(its output)
};

// What a job would select, without creating it (POST /v1/jobs?dry_run=true).
struct JobPreview {
  struct Rig {
    std::string rig_id;
    std::string state;  // RigView::state ("connected", "offline", ...), or "unknown": never seen
  };
  std::vector<Rig> rigs;                 // sorted by rig id, as select() gives them
  std::size_t max_concurrency = 0;       // resolved as start() would; 0: all at once
  std::optional<std::size_t> max_errors; // resolved; unset: never stop
  std::uint32_t deadline_s = 0;          // the request's, or default_job_deadline_s()
};

// What cancel() did.
enum class JobCancel : std::uint8_t {
  cancelled,  // the job is cancelled (it may still wait for its commands' ends)
  unknown,    // not in this table (the store may have it: finished, or driven elsewhere)
  finished,   // it had already finished (or its deadline is ending it now)
  pending,    // cancelled before, its commands are still ending: nothing is done again
};

class JobTable {
 public:
  // `store`: where jobs are recorded (null: nowhere). `history`: finished jobs
  // kept in memory (the store has the others).
  explicit JobTable(CommandStore* store = nullptr, std::size_t history = 1000) : store_(store), history_(history) {}
  ~JobTable() { alive_.reset(); }
  JobTable(const JobTable&) = delete;
  JobTable& operator=(const JobTable&) = delete;
  // What the table says about jobs that change hands (taken over, lost to
  // another broker); unset: nothing.
  void set_notices(std::function<void(const std::string&)> notice) { notice_ = std::move(notice); }
  // The time for answers that come later (default: the wall clock).
  void set_clock(std::function<std::uint64_t()> now_ms) { now_ms_ = std::move(now_ms); }
  void set_store(CommandStore* store, std::size_t history) {
    store_ = store;
    history_ = history;
  }
  CommandStore* store() const noexcept { return store_; }

  // The rigs the targets select among the fleet's known rigs, connected or not
  // (plus listed ids never seen), sorted, without duplicates.
  static std::vector<std::string> select(const Fleet& fleet, const JobTargets& targets);

  // The rigs the targets select, with their state, and the limits a job of
  // them would have: what a dry run shows. Nothing is sent or recorded.
  static JobPreview preview(const Fleet& fleet, const JobRequest& request);

  // Creates the job for `rig_ids`, sends the first wave and writes its record
  // (the caller's Fleet::persist() makes both durable).
  const Job& start(Fleet& fleet, JobRequest request, std::vector<std::string> rig_ids, std::string job_id,
                   std::uint64_t now_ms);

  // Re-creates an unfinished job from its record (a broker's start-up): each
  // rig's state from its command's record, then it goes on (the rigs still
  // pending are sent to; one whose deadline passed ends now). The caller persists.
  // The same with its answer later, when the store answers later (Redis).
  using Resumed = std::function<void(Expected<const Job*>)>;
  void resume_then(Fleet& fleet, const JobRecord& record, std::uint64_t now_ms, Resumed done);
  // resume_then(), answered before it returns (an error if the store answers later).
  Expected<const Job*> resume(Fleet& fleet, const JobRecord& record, std::uint64_t now_ms);
  // At start-up: claims each unfinished job of the store (Fleet::hold_job) and
  // resumes those it holds; a job another live broker drives is left to it.
  void resume_all(Fleet& fleet, const std::vector<JobRecord>& records, std::uint64_t now_ms, Resumed each);

  // A command reached a final state: records its rig's outcome and sends to the
  // next rigs. False if it belongs to no job here.
  bool command_finished(Fleet& fleet, std::string_view cmd_id, std::uint64_t now_ms);

  // Cancels a running job: nothing more is sent (its pending rigs are skipped),
  // and every command of it not final is cancelled (Fleet::cancel_routed); the
  // job ends `cancelled` once those have ended (at once if none is in flight).
  // Its record is written now. The caller persists.
  JobCancel cancel(Fleet& fleet, std::string_view job_id, std::uint64_t now_ms);

  // Ends the jobs whose deadline passed, reads back commands in flight (every
  // kJobReconcileIntervalMs) and writes the records due (kJobSaveIntervalMs).
  void tick(Fleet& fleet, std::uint64_t now_ms);

  // Writes every running job as it is now (the broker is going away).
  void save_running(std::uint64_t now_ms);

  const Job* find(std::string_view job_id) const;
  // Jobs not finished (their owner listens to the Fleet and ticks meanwhile).
  std::size_t running() const noexcept { return jobs_.size() - finished_.size(); }
  // Jobs being taken over, or resumed from their record, right now.
  std::size_t arriving() const noexcept { return arriving_.size(); }
  // Every job in memory, newest first.
  void for_each_newest_first(const std::function<void(const Job&)>& visit) const;

 private:
  // dispatch() hands a large job's commands to the store this many at a time.
  static constexpr std::size_t kPersistChunk = 1024;
  using CommandSummary = JobCommandSummary;
  using Summaries = std::vector<std::optional<CommandSummary>>;
  // The summaries of `cmd_ids`, in their order: before it returns from a store
  // that answers at once, later from one that does not.
  void read_summaries(const Fleet& fleet, std::vector<std::string> cmd_ids, std::function<void(Summaries)> done);
  std::uint64_t now() const;
  // A callback's guard: false once the table is gone.
  std::weak_ptr<int> token() const { return alive_; }

  struct ResumeState;
  void resume_page(Fleet& fleet, const std::shared_ptr<ResumeState>& st);
  void resume_place(Fleet& fleet, ResumeState& st);
  void dispatch(Fleet& fleet, Job& job);
  // The owner broker's answer for a rig's routed command.
  void routed(Fleet& fleet, const std::string& job_id, std::size_t index, Fleet::RoutedOutcome out);
  // The command's record read: settles its rig if it is over.
  void finish_command(Fleet& fleet, const std::string& cmd_id, const std::optional<CommandSummary>& cmd,
                      std::uint64_t now_ms);
  // After a change that came later (an answer, a read): the next rigs, the record.
  void went_on(Fleet& fleet, Job& job, std::uint64_t now_ms);
  void expire_with(Fleet& fleet, Job& job, const Summaries& cmds, std::uint64_t now_ms);
  void hold_running(Fleet& fleet);
  void adopt_orphans(Fleet& fleet);
  // Stops driving a job another broker holds now (its record is that broker's).
  void disown(const std::string& job_id, const std::string& holder);
  void notice(const std::string& text) const {
    if (notice_) notice_(text);
  }
  // Over max_errors: stops the job, its pending rigs skipped.
  static void after_error(Job& job);
  // The job's change is done: finishes it if nothing is left, or marks it to be saved.
  void changed(Job& job, std::uint64_t now_ms);
  void expire(Fleet& fleet, Job& job, std::uint64_t now_ms);
  void reconcile(Fleet& fleet, std::uint64_t now_ms);
  void save(Job& job, std::uint64_t now_ms);
  void forget_finished();

  CommandStore* store_;
  std::size_t history_;
  // By job id: UUIDv7, so oldest first. A job's address is stable in a node map,
  // and the in-flight entries pointing at it go before it does.
  std::map<std::string, Job, std::less<>> jobs_;
  std::deque<std::string> finished_;  // in the order they finished
  // cmd_id -> (its job, the rig's index)
  std::unordered_map<std::string, std::pair<Job*, std::size_t>, TransparentStringHash, std::equal_to<>> in_flight_;
  std::uint64_t reconciled_at_ms_ = 0;
  std::uint64_t held_at_ms_ = 0;
  std::uint64_t adopted_at_ms_ = 0;
  bool reconciling_ = false;
  bool scanning_ = false;
  std::set<std::string, std::less<>> arriving_;  // job ids being claimed or read for a resume
  std::function<void(const std::string&)> notice_;
  std::function<std::uint64_t()> now_ms_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace fleetlink::broker
