#pragma once
// Fan-out of one command to a set of rigs (POST /v1/commands): a Batch picks
// its rigs (ids, an id glob, labels), sends to at most max_concurrency of them
// at a time, sends to the next one as each command finishes, and stops
// sending once more than max_errors have failed. Pure logic over a Fleet:
// whoever owns the table tells it when a command finished (Fleet events).
//
// Threading: the loop thread, like Fleet.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fleet/command_table.hpp"
#include "fleet/fleet.hpp"

namespace fleetlink::broker {

struct BatchTargets {
  std::vector<std::string> ids;   // these rigs (listed even when not connected: refused)
  std::string glob;               // rig ids matching this fnmatch(3) pattern
  StringMap labels;               // rigs having every one of these labels
  bool empty() const { return ids.empty() && glob.empty() && labels.empty(); }
};

struct BatchRequest {
  std::string kind;
  StringMap args;
  BatchTargets targets;
  std::size_t max_concurrency = 0;           // 0: all at once
  std::optional<std::size_t> max_errors;     // unset: never stop
};

enum class BatchRigOutcome : std::uint8_t {
  pending,     // not sent yet (waiting for a concurrency slot)
  dispatched,  // enqueued; not finished
  ok,          // RESULT ok or scheduled
  failed,      // RESULT failed/timeout/cancelled/duplicate, NACK, or lost
  refused,     // the enqueue was refused (unknown rig, unsupported kind, ...)
  skipped,     // not sent: the batch stopped after too many errors
};
const char* to_string(BatchRigOutcome o) noexcept;

struct BatchRig {
  std::string rig_id;
  std::string cmd_id;            // once dispatched
  BatchRigOutcome outcome = BatchRigOutcome::pending;
  std::string error;             // refused: the enqueue error; failed: the status/nack reason
  std::string detail;
};

struct Batch {
  std::string batch_id;
  std::string kind;
  StringMap args;
  std::size_t max_concurrency = 0;
  std::optional<std::size_t> max_errors;
  std::uint64_t created_at_ms = 0;
  std::vector<BatchRig> rigs;    // sorted by rig id
  std::size_t in_flight = 0;
  std::size_t errors = 0;
  bool stopped = false;          // too many errors: nothing more is sent
  // Rigs before this index are no longer pending: dispatch only walks forward, so a
  // fleet-wide batch costs O(1) per finished command, not a scan of every rig.
  std::size_t next_pending = 0;

  bool finished() const noexcept;
};

class BatchTable {
 public:
  explicit BatchTable(std::size_t history = 1000) : history_(history) {}

  // The rigs the targets select among the fleet's live rigs (plus listed ids
  // that are not connected), sorted, without duplicates.
  static std::vector<std::string> select(const Fleet& fleet, const BatchTargets& targets);

  // Creates the batch for `rig_ids` and sends the first wave.
  const Batch& start(Fleet& fleet, BatchRequest request, std::vector<std::string> rig_ids,
                     std::string batch_id, std::uint64_t now_ms);

  // A command reached a final state (done, nacked, lost): records its outcome
  // and sends to the next rigs. False if it belongs to no batch.
  bool command_finished(Fleet& fleet, std::string_view cmd_id);

  const Batch* find(std::string_view batch_id) const;
  // Batches with commands still in flight (their owner listens to the Fleet meanwhile).
  std::size_t running() const noexcept { return running_; }

 private:
  void dispatch(Fleet& fleet, Batch& batch);
  void note_error(Batch& batch);
  void update_running(Batch& batch, bool was_running);

  std::size_t history_;
  std::map<std::string, Batch, std::less<>> batches_;
  std::deque<std::string> order_;                                   // oldest first
  // cmd_id -> (its batch, the rig's index). A batch's address is stable while it
  // is in batches_ (a node map), and its entries here go when it does.
  std::unordered_map<std::string, std::pair<Batch*, std::size_t>, TransparentStringHash, std::equal_to<>>
      in_flight_;
  std::size_t running_ = 0;
};

}  // namespace fleetlink::broker
