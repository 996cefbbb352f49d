#pragma once
// Records as the SQLite store writes them (columns plus encoded blobs), how two
// writes of one record combine, and the buffer of writes not yet in the file.
//
// The combining rules are the upsert's (sqlite_store.cpp), done in memory for
// what has not reached the file yet: several put_command of one cmd_id before a
// commit become the one row the upserts would have left, and a read sees the
// stored row with this broker's pending writes over it, combined the same way.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fleet/fleet.hpp"
#include "store/command_store.hpp"

namespace fleetlink::broker::store_rows {

struct CommandRow {
  std::string cmd_id;
  std::string rig_id;
  std::string job_id;
  std::string idempotency_key;
  std::int64_t state = 0;  // store_codec::state_code
  std::uint64_t enqueued_at = 0;
  std::uint32_t attempts = 0;
  std::optional<std::uint64_t> sent_at;
  std::optional<std::uint64_t> acked_at;
  std::optional<std::uint64_t> running_at;
  std::optional<std::uint64_t> finished_at;
  std::string body;         // store_codec::encode_command_body
  bool has_result = false;  // a results row (stored) or one to write (pending)...
  std::string result_body;  // ...store_codec::encode_result_body
  bool committed = false;   // read from the file (else only pending)
};

// put_command's row; `with_result` is honoured for a final state only (a result
// is written once, when the command ends).
void to_row(const CommandView& v, bool with_result, CommandRow& out);
// The record a row holds; an Error (naming the command) if a blob cannot be read.
Expected<CommandView> to_view(const CommandRow& row);

// `next` written after `base`, as the upsert does it: a later step replaces the
// row (attempts: the larger; sent_at: the later; acked_at and running_at: the
// first known; finished_at: the one given), an earlier one or any write over a
// final state changes nothing; the command's identity (rig, job, key, enqueue
// time) stays the first one's. A result is taken if the row ended in the state
// that result came with and has none yet.
void combine(CommandRow& base, const CommandRow& next);

struct RigRow {
  RigRecord rig;
  std::string body;  // store_codec::encode_rig_body
};
// The later sighting wins (last_seen_ms), first_seen_ms is the earliest known.
void combine(RigRow& base, const RigRow& next);
void combine(JobRecord& base, const JobRecord& next);  // a finished job stays as it finished

// The smallest UUIDv7 text of Unix millisecond `ms`: "0190ab12-34cd". Every id
// made at or after `ms` sorts at or after it (since= and prune's age are key
// ranges).
std::string key_of_ms(std::uint64_t ms);

// Writes not yet in the file, one entry per record: the loop's buffer, and each
// batch handed to the writer.
class PendingWrites {
 public:
  void put(const CommandView& v, bool with_result);
  void put(const RigRecord& r);
  void put(const JobRecord& j);

  bool empty() const noexcept { return commands_used_ == 0 && rigs_.empty() && jobs_.empty(); }
  std::size_t command_count() const noexcept { return commands_used_; }
  // Commands, rigs and jobs: what a backlog is counted in.
  std::size_t row_count() const noexcept { return commands_used_ + rigs_.size() + jobs_.size(); }
  const CommandRow* commands() const noexcept { return commands_.data(); }
  const std::vector<RigRow>& rigs() const noexcept { return rigs_; }
  const std::vector<JobRecord>& jobs() const noexcept { return jobs_; }

  const CommandRow* find_command(std::string_view cmd_id) const noexcept;
  const CommandRow* find_command_by_key(std::string_view key) const noexcept;
  const RigRow* find_rig(std::string_view rig_id) const noexcept;
  const JobRecord* find_job(std::string_view job_id) const noexcept;

  // Once its rows are in the file. The command rows stay allocated: the next
  // turn's writes reuse their strings' buffers.
  void clear() noexcept;

 private:
  std::size_t probe(std::string_view cmd_id) const noexcept;  // its slot, or the empty one it would take
  void grow_index();
  void reserve_slot();  // capacity for one more slots_used_ entry (before anything changes)

  // Rows [0, commands_used_) are this turn's; the ones past it are kept for
  // their buffers. A put encodes into scratch_ and swaps it in, so a turn that
  // writes no more rows than an earlier one allocates nothing for them.
  std::vector<CommandRow> commands_;
  std::size_t commands_used_ = 0;
  CommandRow scratch_;
  // Open addressing over commands_ (hashing the row's own cmd_id: no copy of
  // the key): a slot holds a row's index + 1, 0 is empty. A power of two, at
  // least twice the rows, so probes stay short; slots_used_ lets clear() undo
  // only what this turn wrote.
  std::vector<std::uint32_t> index_;
  std::vector<std::uint32_t> slots_used_;
  // Rigs and jobs are written far less often: plain maps.
  std::vector<RigRow> rigs_;
  std::unordered_map<std::string, std::size_t> rig_index_;
  std::vector<JobRecord> jobs_;
  std::unordered_map<std::string, std::size_t> job_index_;
};

// The filters of a list (GET /v1/commands, /v1/jobs), as every store applies them
// to what it read and to the writes it has not written yet. `since_key`: the
// smallest cmd_id of since_ms (key_of_ms).
bool matches(const CommandRow& row, const CommandQuery& q, const std::string& since_key);
bool matches(const JobRecord& j, const JobQuery& q);

}  // namespace fleetlink::broker::store_rows
