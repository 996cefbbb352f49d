#pragma once
// The deletes of CommandStore::prune(), on the writer thread's connection, one
// short transaction at a time so the writer can put batches in between (a
// prune of 20,000 rows is about 40 ms of deletes; batches should not wait for
// all of it).
//
// What goes, in this order, at most `max_per_call` rows in all: finished
// commands (with their results) older than max_age_ms by their UUIDv7 key;
// then the oldest finished commands beyond max_commands; then finished jobs
// older than max_age_ms. Never an open command nor an open job.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <sqlite3.h>

#include "fleetlink/expected.hpp"
#include "store/command_store.hpp"
#include "store/sqlite_db.hpp"

namespace fleetlink::broker {

class SqlitePruner {
 public:
  SqlitePruner(sqlite3* db, std::size_t chunk, std::size_t max_per_call) noexcept
      : db_(db), chunk_(chunk == 0 ? 1 : chunk), max_per_call_(max_per_call) {}

  Expected<void> prepare();
  // Begins a prune (forgetting any unfinished one).
  void start(const RetentionPolicy& policy, std::uint64_t now_ms);
  // Runs one transaction of it. True: there is more; false: it is done. An
  // Error ends it too (what was deleted before stays deleted).
  Expected<bool> step();
  // Rows deleted by this prune so far.
  std::size_t deleted() const noexcept { return total_; }

 private:
  enum class Phase { aged_commands, count, excess_commands, aged_jobs, done };
  Expected<bool> delete_chunk(sqlite::Stmt& select, sqlite::Stmt* const* deletes, std::size_t n_deletes,
                              std::size_t chunk, std::size_t& gone);
  void rollback() noexcept;

  sqlite3* db_;
  std::size_t chunk_, max_per_call_;
  sqlite::Stmt select_aged_, select_oldest_, select_jobs_, del_result_, del_command_, del_job_, count_;
  Phase phase_ = Phase::done;
  RetentionPolicy policy_;
  std::uint64_t now_ms_ = 0;
  std::string bound_;
  std::size_t want_ = 0, phase_deleted_ = 0, total_ = 0;
  std::vector<std::string> ids_;
};

}  // namespace fleetlink::broker
