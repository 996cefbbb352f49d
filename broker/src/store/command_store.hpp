#pragma once
// The command record's home (docs/OPERATIONS.md, "The command store"): every
// command with every step of its life and its result, the inventory of rigs
// ever seen, and the fan-out jobs. One interface, several backends: SQLite in
// the broker's state directory (the default, store/sqlite_store.*), none (a
// broker that keeps nothing across a restart: benchmarks, development), and
// Redis for several brokers (the next step).
//
// Writes are buffered (put_*) and handed over in batches (submit()): the
// fleet core submits once per turn of the loop that created something, and
// every store-commit-interval-ms for the steps of commands. A batch becomes
// durable later, off the loop (SQLite: a writer thread; Redis: a reply); its
// outcome comes back through take_outcomes(), and nothing is promised about a
// command (a 202, a queued line) before its batch is durable. commit() is the
// same thing waited for (shutdown, tests, tools). Reads answer through a
// callback, which SQLite calls at once and a networked store later: callers
// never assume it ran before the call returns.
//
// Called from the event loop only; a backend may use threads of its own.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fleet/fleet.hpp"
#include "fleetlink/expected.hpp"

namespace fleetlink::broker {

// A rig as the inventory knows it: what its last HELLO said, and when it was seen.
struct RigRecord {
  std::string rig_id;
  std::string boot_id;
  std::string agent_version;
  StringMap labels;
  std::vector<std::string> kinds;
  std::string broker_id;           // the broker it was last connected to
  std::uint64_t first_seen_ms = 0;
  std::uint64_t last_seen_ms = 0;  // its last HELLO, frame or pong known to the store; its disconnect
};

// A fan-out job. The store keeps its body as given (the control plane's JSON)
// and indexes the fields it is listed by. The body's first line is its head
// (what a list shows); the lines after it, the job's rigs, can be large (a
// fleet-wide job: about 80 bytes per rig).
struct JobRecord {
  std::string job_id;
  std::uint64_t created_at_ms = 0;
  bool finished = false;
  std::string body;
};

// CommandQuery (what GET /v1/commands filters by) is in fleet/fleet.hpp.

struct JobQuery {
  std::optional<bool> finished;
  std::uint64_t since_ms = 0;
  std::string before_job_id;
  std::size_t limit = 100;
  bool head_only = false;  // each body up to its first newline: a list does not read every rig of every job
};

// What the store holds at start-up that the broker needs in memory.
struct StoreSnapshot {
  std::vector<CommandView> open_commands;  // every command not in a final state, oldest first
  std::vector<RigRecord> rigs;
  std::vector<JobRecord> open_jobs;
};

// Bounds on what is kept (docs/OPERATIONS.md gives the defaults).
struct RetentionPolicy {
  std::uint64_t max_age_ms = 30ULL * 24 * 3600 * 1000;  // finished commands and jobs older than this go
  std::uint64_t max_commands = 1'000'000;               // beyond this, the oldest finished commands go
};

// What a store did, for /metrics.
struct StoreCounters {
  std::uint64_t commits = 0;          // commits that wrote something
  std::uint64_t commit_failures = 0;  // their writes stayed pending for the next one
  std::uint64_t rows_written = 0;     // command rows, after coalescing
  std::uint64_t commits_on_loop = 0;  // of `commits`: those made on the event loop (small batches, writer idle)
  // How long commits took (off the loop for a store with a writer thread): a histogram (upper bounds in seconds,
  // a count per bucket with the +Inf one last). Empty: not measured.
  std::vector<double> commit_bounds;
  std::vector<std::uint64_t> commit_buckets;
  double commit_seconds = 0;
};

// What became of one batch of writes (CommandStore::submit()).
struct BatchOutcome {
  std::uint64_t batch = 0;
  Expected<void> result;  // an Error: not durable yet (it is tried again)
};

class CommandStore {
 public:
  using CommandCallback = std::function<void(std::optional<CommandView>)>;
  using CommandsCallback = std::function<void(std::vector<CommandView>)>;
  using JobCallback = std::function<void(std::optional<JobRecord>)>;
  using JobsCallback = std::function<void(std::vector<JobRecord>)>;

  virtual ~CommandStore() = default;
  // "sqlite", "none", ...: for logs and /metrics.
  virtual std::string_view name() const noexcept = 0;
  // Whether anything is kept across a restart.
  virtual bool durable() const noexcept = 0;
  // Whether reads answer before they return (SQLite, none) or later, from the
  // loop (Redis): callers that need the answer to go on continue in the callback.
  virtual bool answers_at_once() const noexcept { return true; }
  // Usable now (for /readyz).
  virtual bool up() const noexcept = 0;
  virtual StoreCounters counters() const noexcept { return {}; }

  // ---- start-up ----
  virtual Expected<StoreSnapshot> load() = 0;

  // ---- writes, buffered until commit() ----
  // Creates the command or records a later step of it. A backend never moves a
  // command back to an earlier state, nor changes a finished one: when two
  // brokers share a store (one draining, one taking its rigs), the later step
  // wins whichever broker writes last. `with_result`: the command finished and
  // v.result / v.nack / v.streamed_output are written too (once).
  virtual void put_command(const CommandView& v, bool with_result) = 0;
  virtual void put_rig(const RigRecord& r) = 0;
  virtual void put_job(const JobRecord& j) = 0;
  // Makes every write so far durable against a crash of this process (what a
  // power cut can lose is the backend's to say), and waits for it: every batch
  // submitted before, and what was put since. True when there was nothing to
  // do, too.
  virtual Expected<void> commit() = 0;
  // Writes put and not yet submitted.
  virtual bool pending() const noexcept = 0;

  // ---- batches: writes handed over without waiting ----
  // Hands every write put since the last submit() (or commit()) to the store
  // and returns that batch's number: 1, 2, ... in order; the previous number
  // when nothing was put. A batch that fails is not lost: the store tries it
  // again, before the later ones, until it is durable.
  // The defaults commit at once, on the caller's thread (stores without a
  // thread of their own); a backend with one overrides all four.
  virtual std::uint64_t submit() {
    if (!pending()) return submitted_;
    ++submitted_;
    Expected<void> r = commit();
    if (r) durable_through_ = submitted_;
    outcomes_.push_back(BatchOutcome{submitted_, std::move(r)});
    if (wake_) wake_();
    return submitted_;
  }
  // Every batch up to this number is durable.
  virtual std::uint64_t durable_through() const noexcept { return durable_through_; }
  // What became of batches since the last call, in batch order, each batch
  // once: durable, or its first failure (it is tried again; a later success
  // shows in durable_through(), not here).
  virtual std::vector<BatchOutcome> take_outcomes() {
    std::vector<BatchOutcome> out;
    out.swap(outcomes_);
    return out;
  }
  // Called when take_outcomes() has something, on any thread (the application
  // wakes its loop with it, and calls take_outcomes() there).
  virtual void set_wakeup(std::function<void()> wake) { wake_ = std::move(wake); }
  // Rows submitted and not yet durable (a bound on it keeps a stalled disk
  // from filling memory: new commands are refused beyond it).
  virtual std::size_t backlog() const noexcept { return 0; }
  // A light interval's steps are handed over this many commands at a time,
  // one piece per turn of the loop (FleetCore::commit_if_due), with
  // submit_piece(): for a backend that commits a small batch at once, where a
  // large one holds up what comes after it. 0: all of them together.
  virtual std::size_t interval_slice_rows() const noexcept { return 0; }
  // submit() for one such piece.
  virtual std::uint64_t submit_piece() { return submit(); }

  // ---- reads ----
  virtual void find(std::string_view cmd_id, CommandCallback done) = 0;
  virtual void find_by_key(std::string_view idempotency_key, CommandCallback done) = 0;
  // The rig's commands not in a final state, oldest first.
  virtual void open_commands_of(std::string_view rig_id, CommandsCallback done) = 0;
  virtual void list_commands(const CommandQuery& q, CommandsCallback done) = 0;
  virtual void find_job(std::string_view job_id, JobCallback done) = 0;
  virtual void list_jobs(const JobQuery& q, JobsCallback done) = 0;

  // A number that changes when another process wrote to the store since this one
  // last looked (brokers sharing it): then what this broker holds in memory may
  // be stale, and it reads the store again where it matters (a rig's HELLO, a
  // RESULT for a command it does not know).
  virtual std::uint64_t foreign_writes() = 0;

  // ---- upkeep (a timer of the application) ----
  // Forgets finished commands and jobs beyond the policy; returns how many went.
  virtual std::size_t prune(const RetentionPolicy& policy, std::uint64_t now_ms) = 0;

 private:
  // The default batches' bookkeeping.
  std::uint64_t submitted_ = 0;
  std::uint64_t durable_through_ = 0;
  std::vector<BatchOutcome> outcomes_;
  std::function<void()> wake_;
};

}  // namespace fleetlink::broker
