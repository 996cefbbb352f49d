#pragma once
// On-disk homes for RESULT frames under the agent's state directory.
//
// ResultStore: the last results by cmd_id (bounded), so a command redelivered
// after a reconnect or a reboot is answered with the RESULT it already produced.
// Spool: results finished while no broker connection was open (bounded, oldest
// dropped first), sent in order after the next WELCOME.
// Both keep one msgpack RESULT frame per file, written atomically.
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "atomic_file.hpp"
#include "fleetlink/expected.hpp"
#include "fleetlink/messages.hpp"

namespace fleetlink::agent {

// cmd_ids arrive from the network: only these become file names.
bool safe_file_stem(std::string_view s) noexcept;

class ResultStore {
 public:
  ResultStore(std::filesystem::path dir, std::size_t max_results);
  // Creates the directory and reads what is there (corrupt files are removed).
  Expected<void> load();
  // dropped: the cmd_ids whose results were removed to stay within the bound.
  Expected<void> put(const msg::Result& r, std::vector<std::string>* dropped = nullptr);
  std::optional<msg::Result> get(std::string_view cmd_id) const;
  std::size_t size() const noexcept { return order_.size(); }
  // cmd_ids held, oldest first.
  std::vector<std::string> ids() const { return {order_.begin(), order_.end()}; }

 private:
  std::filesystem::path dir_;
  std::size_t max_;
  std::deque<std::string> order_;                       // oldest first
  std::map<std::string, msg::Result, std::less<>> by_id_;
};

class Spool {
 public:
  Spool(std::filesystem::path dir, std::size_t max_results);
  Expected<void> load();
  // Keeps r on disk. When over the bound the oldest entry is dropped; its cmd_id is
  // returned so the caller can log it.
  Expected<std::optional<std::string>> push(const msg::Result& r);
  // Spooled results, oldest first, with the id to pass to remove() once sent.
  std::vector<std::pair<std::uint64_t, msg::Result>> pending() const;
  void remove(std::uint64_t id);
  std::size_t size() const noexcept { return entries_.size(); }
  std::size_t max() const noexcept { return max_; }

 private:
  std::filesystem::path file_for(std::uint64_t id) const;
  std::filesystem::path dir_;
  std::size_t max_;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, msg::Result> entries_;
};

}  // namespace fleetlink::agent
