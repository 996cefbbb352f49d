#include "result_store.hpp"

#include <algorithm>
#include <system_error>

#include "fleetlink/codec.hpp"

namespace fleetlink::agent {

namespace fs = std::filesystem;

namespace {

std::optional<msg::Result> decode_result(const Bytes& b) {
  auto m = decode(b, DecodeOptions{b.size() + 1});
  if (!m) return std::nullopt;
  if (auto* r = std::get_if<msg::Result>(&*m)) return *r;
  return std::nullopt;
}

}  // namespace

bool safe_file_stem(std::string_view s) noexcept {
  if (s.empty() || s.size() > 128 || s.front() == '.') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_' || c == '.';
  });
}

// ---------------------------------------------------------------- ResultStore

ResultStore::ResultStore(fs::path dir, std::size_t max_results)
    : dir_(std::move(dir)), max_(std::max<std::size_t>(max_results, 1)) {}

Expected<void> ResultStore::load() {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return make_error(Errc::io, "cannot create " + dir_.string() + ": " + ec.message());
  std::vector<msg::Result> found;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (e.path().extension() != ".result") {
      if (e.path().extension() == ".tmp") fs::remove(e.path(), ec);
      continue;
    }
    auto bytes = read_file_bytes(e.path());
    auto r = bytes ? decode_result(*bytes) : std::nullopt;
    if (!r || r->cmd_id != e.path().stem().string()) {
      fs::remove(e.path(), ec);  // torn or foreign: it cannot answer anything
      continue;
    }
    found.push_back(std::move(*r));
  }
  std::sort(found.begin(), found.end(), [](const msg::Result& a, const msg::Result& b) {
    return a.finished_at_ms < b.finished_at_ms;
  });
  order_.clear();
  by_id_.clear();
  for (auto& r : found) {
    order_.push_back(r.cmd_id);
    by_id_.emplace(r.cmd_id, std::move(r));
  }
  while (order_.size() > max_) {
    fs::remove(dir_ / (order_.front() + ".result"), ec);
    by_id_.erase(order_.front());
    order_.pop_front();
  }
  return {};
}

Expected<void> ResultStore::put(const msg::Result& r, std::vector<std::string>* dropped) {
  if (by_id_.find(r.cmd_id) == by_id_.end()) order_.push_back(r.cmd_id);
  by_id_[r.cmd_id] = r;
  std::error_code ec;
  while (order_.size() > max_) {
    if (dropped) dropped->push_back(order_.front());
    if (safe_file_stem(order_.front())) fs::remove(dir_ / (order_.front() + ".result"), ec);
    by_id_.erase(order_.front());
    order_.pop_front();
  }
  if (!safe_file_stem(r.cmd_id))
    return make_error(Errc::invalid_argument, "cmd_id not usable as a file name; kept in memory");
  return write_file_atomic(dir_ / (r.cmd_id + ".result"), encode(Message{r}));
}

std::optional<msg::Result> ResultStore::get(std::string_view cmd_id) const {
  auto it = by_id_.find(cmd_id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second;
}

// ---------------------------------------------------------------- Spool

Spool::Spool(fs::path dir, std::size_t max_results)
    : dir_(std::move(dir)), max_(std::max<std::size_t>(max_results, 1)) {}

fs::path Spool::file_for(std::uint64_t id) const {
  char name[32];
  std::snprintf(name, sizeof name, "%020llu.result", static_cast<unsigned long long>(id));
  return dir_ / name;
}

Expected<void> Spool::load() {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return make_error(Errc::io, "cannot create " + dir_.string() + ": " + ec.message());
  entries_.clear();
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (e.path().extension() != ".result") {
      if (e.path().extension() == ".tmp") fs::remove(e.path(), ec);
      continue;
    }
    const std::string stem = e.path().stem().string();
    std::uint64_t id = 0;
    try {
      id = std::stoull(stem);
    } catch (...) {
      fs::remove(e.path(), ec);
      continue;
    }
    auto bytes = read_file_bytes(e.path());
    auto r = bytes ? decode_result(*bytes) : std::nullopt;
    if (!r) {
      fs::remove(e.path(), ec);
      continue;
    }
    entries_.emplace(id, std::move(*r));
    next_id_ = std::max(next_id_, id + 1);
  }
  while (entries_.size() > max_) {
    fs::remove(file_for(entries_.begin()->first), ec);
    entries_.erase(entries_.begin());
  }
  return {};
}

Expected<std::optional<std::string>> Spool::push(const msg::Result& r) {
  const std::uint64_t id = next_id_++;
  std::optional<std::string> dropped;
  std::error_code ec;
  if (entries_.size() >= max_) {
    dropped = entries_.begin()->second.cmd_id;
    fs::remove(file_for(entries_.begin()->first), ec);
    entries_.erase(entries_.begin());
  }
  entries_.emplace(id, r);
  if (auto ok = write_file_atomic(file_for(id), encode(Message{r})); !ok) return ok.error();
  return dropped;
}

std::vector<std::pair<std::uint64_t, msg::Result>> Spool::pending() const {
  return {entries_.begin(), entries_.end()};
}

void Spool::remove(std::uint64_t id) {
  std::error_code ec;
  fs::remove(file_for(id), ec);
  entries_.erase(id);
}

}  // namespace fleetlink::agent
