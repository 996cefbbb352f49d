#pragma once
// --store none: a store that keeps nothing. Every command lives only in the
// broker's memory and is gone with it (a restart forgets commands, results and
// offline rigs). For benchmarks that measure the store's cost, and development.
#include "store/command_store.hpp"

namespace fleetlink::broker {

class NullStore final : public CommandStore {
 public:
  std::string_view name() const noexcept override { return "none"; }
  bool durable() const noexcept override { return false; }
  bool up() const noexcept override { return true; }
  Expected<StoreSnapshot> load() override { return StoreSnapshot{}; }
  void put_command(const CommandView&, bool) override {}
  void put_rig(const RigRecord&) override {}
  void put_job(const JobRecord&) override {}
  Expected<void> commit() override { return {}; }
  bool pending() const noexcept override { return false; }
  void find(std::string_view, CommandCallback done) override { done(std::nullopt); }
  void find_by_key(std::string_view, CommandCallback done) override { done(std::nullopt); }
  void open_commands_of(std::string_view, CommandsCallback done) override { done({}); }
  void list_commands(const CommandQuery&, CommandsCallback done) override { done({}); }
  void find_job(std::string_view, JobCallback done) override { done(std::nullopt); }
  void list_jobs(const JobQuery&, JobsCallback done) override { done({}); }
  std::uint64_t foreign_writes() override { return 0; }
  std::size_t prune(const RetentionPolicy&, std::uint64_t) override { return 0; }
};

}  // namespace fleetlink::broker
