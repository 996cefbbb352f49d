#pragma once
// The command store on Redis, for several brokers sharing one fleet's record
// (store/command_store.hpp is the contract, store/sqlite_store.hpp the
// reference backend: the same calls give the same answers).
//
// Keys (P = RedisStoreOptions::key_prefix, default "fl:"). Every write goes
// through the one script of redis/store_scripts.hpp, which keeps the record
// and all its indexes in step atomically; cmd_ids (UUIDv7 text) sort in
// creation order, so every index of commands is a sorted set with score 0
// read in lexicographic order (ZRANGEBYLEX / ZREVRANGEBYLEX).
//   P cmd:<cmd_id>      hash, one per command:
//                         s   state code (store/record_codec.hpp)
//                         r   rig_id          j  job_id ('' for none)
//                         k   idempotency key ('' for none, or when another command holds it)
//                         e   enqueued_at ms  a  attempts
//                         st, ak, rn, f      sent, acked, running, finished ms (absent: not yet)
//                         b   store_codec::encode_command_body blob
//                         res store_codec::encode_result_body blob (absent: no result; written once)
//   P cmds              zset (lex) of every command
//   P open              zset (lex) of the commands not in a final state (load())
//   P done              zset (lex) of the finished ones (prune)
//   P state:<code>      zset (lex) of the commands in that state (list ?state=)
//   P rigcmds:<rig_id>  zset (lex) of every command of a rig (list ?rig=)
//   P rigopen:<rig_id>  zset (lex) of a rig's open commands (its HELLO)
//   P jobcmds:<job_id>  zset (lex) of a job's commands (list ?job=)
//   P idem:<key>        string: the cmd_id the idempotency key names (SET NX: the first command keeps it)
//   P rigs              hash rig_id -> "<first_seen ms>:<last_seen ms>:" + store_codec::encode_rig_body blob
//   P job:<job_id>      hash c (created_at ms), f ("0"/"1": finished), b (the body as given)
//   P jobs              zset (lex) of every job
//   P jobsopen          zset (lex) of the unfinished jobs
//   P jobsdone          zset of the finished jobs, scored by created_at ms (prune)
//   P writes            integer, INCR by every write and prune script call
// An empty index is no key (Redis deletes empty sets). Nothing expires: prune()
// is what bounds the store. The keys are made inside the script from the
// prefix (not passed as KEYS): a standalone Redis or one primary, not Cluster.
//
// Writes. put_* buffer (coalesced as the SQLite store does, store_rows.hpp);
// submit() makes the buffer the next batch and sends it, as one EVALSHA per
// rows_per_call rows, pipelined on the broker's RedisConnection. A batch is
// durable when every one of its calls answered (durable_through() is the
// highest number with every batch up to it durable); its outcome (ok, or its
// first failure) goes to take_outcomes() once, and the wakeup is called on any
// progress. A batch that fails (Redis away, an error reply) stays and is sent
// again, before any batch that was not sent yet, on the next submit(), on
// connection_up() (the application calls it from its RedisConnection's on_up)
// and after retry_min doubling to retry_max. Sending a batch twice is harmless:
// the script's upserts are idempotent (the rank guard, results and keys
// written once, rigs by last_seen, a finished job stays finished).
// "Durable" is Redis' to say: with appendonly yes / appendfsync everysec about
// the last second can be lost on a crash of Redis' host, without persistence
// everything on a restart of Redis.
//
// Reads answer later, on the loop, when Redis replied (never before the call
// returns, also when Redis is away; then empty / nullopt). Each is one script
// call; like the SQLite store's they lay the writes not yet durable (the batches
// in flight or waiting, then the buffer) over what Redis holds, so this broker
// sees its own writes at once. A list walks the narrowest index its filters
// name (rig, job or state), newest first, checking the other filters, and looks
// at no more than list_scan_budget entries per call (a list of a rare state of
// one rig in a huge history may come back short of its limit).
//
// foreign_writes() changes on every call: this broker cannot know, without a
// round trip, whether another one wrote since it last looked, so a caller
// always reads again (an open_commands_of per HELLO: one script call). The
// script's `writes` counter still tells how many foreign writes this broker's
// own replies revealed (stats().foreign_writes_seen).
//
// prune() sends the prune script (at most prune_max_per_call commands and jobs
// per call, oldest finished first) and returns what the prunes answered since
// the previous call deleted: the count of a prune comes with the next call.
//
// load() and commit() are the only blocking calls, for start-up and shutdown
// (not while the loop runs), and the destructor, which commit()s what is not
// yet durable (if anything): a second, synchronous hiredis connection
// (host/port of the options, sync_timeout), made on first use and again after
// an error. commit() writes the buffer and every batch not yet durable through
// it, in order, and fails (the batches stay) if Redis cannot be reached.
// load() refuses, like the SQLite store, a store with an open command or a rig
// it cannot decode; the reads leave such a record out (stats().unreadable_rows).
//
// Called from the loop's thread only. Nothing throws out of a method; a
// callback's own exception is caught and logged. The object may go before the
// connection: replies for it after that are dropped. Its two timers are closed
// on the loop, which must run once more to free them.
#include <uv.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redis/redis_connection.hpp"
#include "store/command_store.hpp"
#include "store/store_rows.hpp"

struct redisContext;

namespace fleetlink::broker::redis {

struct RedisStoreOptions {
  std::string key_prefix = "fl:";
  // The synchronous connection of load() and commit().
  std::string host = "127.0.0.1";
  int port = 6379;
  std::chrono::milliseconds sync_timeout{3000};
  // A failed batch is sent again after retry_min, doubling to retry_max (and
  // at once on submit() and connection_up()).
  std::chrono::milliseconds retry_min{50};
  std::chrono::milliseconds retry_max{2000};
  // Rows (commands, rigs, jobs) per script call: Redis runs one script at a
  // time, so a large batch goes in several calls.
  std::size_t rows_per_call = 500;
  // Index entries one list call looks at, at most.
  std::size_t list_scan_budget = 20'000;
  // Commands and jobs one prune call deletes, at most.
  std::size_t prune_max_per_call = 2'000;
  // Writes not yet durable whose stored records a list fetches to lay them
  // over (beyond it, they are laid over only as they are).
  std::size_t overlay_fetch_max = 1'000;
};

struct RedisStoreStats {
  std::uint64_t commits = 0;          // batches made durable
  std::uint64_t commit_failures = 0;  // attempts of a batch that failed (it was sent again)
  std::uint64_t rows_written = 0;     // command rows of the durable batches
  std::uint64_t key_conflicts = 0;    // idempotency keys another command already held
  std::uint64_t unreadable_rows = 0;  // records whose fields or blobs could not be decoded
  std::uint64_t read_failures = 0;    // reads Redis did not answer (answered empty)
  std::uint64_t prune_failures = 0;
  std::uint64_t script_loads = 0;     // SCRIPT LOAD on the async connection (first use, NOSCRIPT)
  std::uint64_t foreign_writes_seen = 0;  // other processes' writes this store's replies revealed
};

class RedisStore final : public CommandStore {
 public:
  bool answers_at_once() const noexcept override { return false; }
  // `loop` and `connection` must outlive the store. Nothing is sent before the
  // first call that needs it.
  RedisStore(uv_loop_t* loop, RedisConnection& connection, RedisStoreOptions options = {});
  ~RedisStore() override;
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  std::string_view name() const noexcept override { return "redis"; }
  bool durable() const noexcept override { return true; }
  bool up() const noexcept override { return connection_.up(); }
  StoreCounters counters() const noexcept override;
  const RedisStoreStats& stats() const noexcept { return stats_; }
  const RedisStoreOptions& options() const noexcept { return options_; }

  // The application calls it from the connection's on_up (which it owns: the
  // registry needs it too): failed batches are sent again at once.
  void connection_up();

  Expected<StoreSnapshot> load() override;

  void put_command(const CommandView& v, bool with_result) override;
  void put_rig(const RigRecord& r) override;
  void put_job(const JobRecord& j) override;
  Expected<void> commit() override;
  bool pending() const noexcept override { return !current_->empty(); }

  std::uint64_t submit() override;
  std::uint64_t durable_through() const noexcept override { return durable_through_; }
  std::vector<BatchOutcome> take_outcomes() override;
  void set_wakeup(std::function<void()> wake) override { wake_ = std::move(wake); }
  std::size_t backlog() const noexcept override { return static_cast<std::size_t>(backlog_rows_); }

  void find(std::string_view cmd_id, CommandCallback done) override;
  void find_by_key(std::string_view idempotency_key, CommandCallback done) override;
  void open_commands_of(std::string_view rig_id, CommandsCallback done) override;
  void list_commands(const CommandQuery& q, CommandsCallback done) override;
  void find_job(std::string_view job_id, JobCallback done) override;
  void list_jobs(const JobQuery& q, JobsCallback done) override;

  std::uint64_t foreign_writes() override { return ++foreign_calls_; }

  std::size_t prune(const RetentionPolicy& policy, std::uint64_t now_ms) override;
  // The same with this prune's own answer (tests, tools): how many went, or
  // why none did.
  void prune_then(const RetentionPolicy& policy, std::uint64_t now_ms,
                  std::function<void(Expected<std::size_t>)> done);

  // list_commands / list_jobs answer at most this many, whatever the limit.
  static constexpr std::size_t kMaxListLimit = 10'000;

 private:
  struct Batch {
    std::uint64_t number = 0;
    store_rows::PendingWrites writes;
    std::size_t rows = 0;
    bool done = false;       // durable
    bool reported = false;   // its outcome went to take_outcomes()
    bool in_flight = false;  // an attempt is waiting for its replies
    std::uint64_t attempt = 0;
    std::size_t calls_left = 0;
    std::optional<Error> attempt_error;
  };
  using ReplyCallback = std::function<void(Expected<Reply>)>;

  // The async connection, answering never before the call returns.
  void request(const std::vector<std::string>& argv, ReplyCallback done);
  // EVALSHA of the store script with these arguments (op, prefix, ...).
  void eval(std::shared_ptr<std::vector<std::string>> args, bool may_reload, ReplyCallback done);
  void load_script_then(std::shared_ptr<std::vector<std::string>> args, ReplyCallback done);
  void defer(std::function<void()> f);
  void run_deferred();

  std::vector<std::vector<std::string>> write_calls(const store_rows::PendingWrites& w) const;
  void send_ready();
  void send(Batch& b);
  void on_write_reply(std::uint64_t number, std::uint64_t attempt, Expected<Reply> r);
  void attempt_failed(Batch& b);
  void batch_done(Batch& b);
  void advance();
  void schedule_retry();
  void note_writes(long long counter);
  void wake();
  std::unique_ptr<Batch> take_current();

  template <class F>
  void each_unwritten(F&& f) const {
    for (const auto& b : batches_)
      if (!b->done) f(b->writes);
    f(*current_);
  }
  std::size_t unwritten_commands() const noexcept;
  std::vector<std::string> unwritten_ids(bool open_only, std::string_view rig_id) const;
  std::vector<std::string> unwritten_job_ids() const;
  void overlay_one(std::optional<store_rows::CommandRow>& row, std::string_view cmd_id) const;
  void overlay(std::vector<store_rows::CommandRow>& rows, const std::vector<store_rows::CommandRow>& stored_extras,
               const CommandQuery* filter, bool open_only, std::string_view rig_id) const;
  void overlay_jobs(std::vector<JobRecord>& jobs, const std::vector<JobRecord>& stored_extras) const;
  std::vector<CommandView> to_views(const std::vector<store_rows::CommandRow>& rows);
  std::optional<CommandView> to_view(const std::optional<store_rows::CommandRow>& row);
  // Rows of a reply (nil entries and undecodable rows left out, the latter counted).
  std::vector<store_rows::CommandRow> rows_of(const Reply& r);
  std::vector<JobRecord> jobs_of(const Reply& r);

  // The synchronous connection.
  Expected<Reply> sync_call(const std::vector<std::string>& argv);
  Expected<Reply> sync_eval(const std::vector<std::string>& args);
  Expected<void> sync_write(const store_rows::PendingWrites& w);
  void sync_close() noexcept;

  uv_loop_t* loop_;
  RedisConnection& connection_;
  RedisStoreOptions options_;
  std::shared_ptr<int> alive_;  // the callbacks hold a weak_ptr: a reply after the store is gone is dropped
  std::string sha_;
  redisContext* sync_ = nullptr;
  uv_timer_t* retry_timer_ = nullptr;  // heap: closed on the loop after this object is gone
  uv_timer_t* defer_timer_ = nullptr;
  std::vector<std::function<void()>> deferred_;
  std::chrono::milliseconds backoff_{0};

  std::unique_ptr<store_rows::PendingWrites> current_;
  std::deque<std::unique_ptr<Batch>> batches_;  // submitted, not yet all durable, oldest first
  std::uint64_t last_batch_ = 0;
  std::uint64_t durable_through_ = 0;
  std::uint64_t backlog_rows_ = 0;
  std::uint64_t attempts_ = 0;
  std::vector<BatchOutcome> outcomes_;
  std::function<void()> wake_;

  std::uint64_t foreign_calls_ = 0;
  long long last_writes_ = -1;  // the `writes` counter in this store's last reply (-1: none yet)
  std::size_t pruned_ = 0;      // deleted by the prunes answered since the last prune()
  std::size_t prunes_in_flight_ = 0;
  bool failing_ = false;  // the last batch attempt failed (one log line per streak)
  RedisStoreStats stats_;
};

}  // namespace fleetlink::broker::redis
