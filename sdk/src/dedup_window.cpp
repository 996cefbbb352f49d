// The agent's memory of executed cmd_ids. Persisted as a small text file:
//   fleetlink-dedup 1
//   <at_ms> <cmd_id>        (one line per entry, oldest first)
//   end <count>
// The footer makes a cut-short file detectable even though save() is atomic
// (a copy by hand, a full disk on another tool's write...).
#include "fleetlink/dedup_window.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>

namespace fleetlink {
namespace {

constexpr std::string_view kHeader = "fleetlink-dedup 1";
constexpr std::size_t kMaxIdLength = 128;

Error io_error(const std::string& what, const std::filesystem::path& p) {
  return make_error(Errc::io, what + " " + p.string() + ": " + std::strerror(errno));
}

bool valid_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxIdLength) return false;
  return std::none_of(id.begin(), id.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\0';
  });
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

DedupWindow::DedupWindow(std::size_t max_entries, std::chrono::milliseconds max_age)
    : max_entries_(max_entries), max_age_(max_age) {}

bool DedupWindow::insert(std::string_view cmd_id, std::uint64_t now_ms) {
  prune(now_ms);
  const std::string id(cmd_id);
  if (auto it = index_.find(id); it != index_.end()) {
    const auto age = static_cast<std::uint64_t>(max_age_.count());
    if (now_ms < it->second || now_ms - it->second <= age) {
      return false;
    }
    // Expired but not yet at the front (times were not monotonic): drop the old entry.
    order_.erase(std::find_if(order_.begin(), order_.end(),
                              [&](const Entry& e) { return e.id == id; }));
    index_.erase(it);
  }
  if (max_entries_ == 0) return true;
  order_.push_back(Entry{id, now_ms});
  index_.emplace(id, now_ms);
  while (order_.size() > max_entries_) {
    index_.erase(order_.front().id);
    order_.pop_front();
  }
  return true;
}

bool DedupWindow::contains(std::string_view cmd_id, std::uint64_t now_ms) const {
  const auto it = index_.find(std::string(cmd_id));
  if (it == index_.end()) return false;
  return now_ms < it->second ||
         now_ms - it->second <= static_cast<std::uint64_t>(max_age_.count());
}

void DedupWindow::prune(std::uint64_t now_ms) {
  const auto age = static_cast<std::uint64_t>(max_age_.count());
  while (!order_.empty() &&
         (order_.size() > max_entries_ ||
          (now_ms > order_.front().at_ms && now_ms - order_.front().at_ms > age))) {
    index_.erase(order_.front().id);
    order_.pop_front();
  }
}

Expected<void> DedupWindow::save(const std::filesystem::path& path) const {
  std::string text;
  text.reserve(32 + order_.size() * 56);
  text.append(kHeader).push_back('\n');
  for (const auto& e : order_) {
    text.append(std::to_string(e.at_ms)).push_back(' ');
    text.append(e.id).push_back('\n');
  }
  text.append("end ").append(std::to_string(order_.size())).push_back('\n');

  auto tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return io_error("cannot create", tmp);
  if (!write_all(fd, text) || ::fsync(fd) != 0) {
    auto err = io_error("cannot write", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return err;
  }
  if (::close(fd) != 0) {
    auto err = io_error("cannot close", tmp);
    ::unlink(tmp.c_str());
    return err;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    auto err = io_error("cannot rename onto", path);
    ::unlink(tmp.c_str());
    return err;
  }
  // The rename is durable only once the directory entry is on disk.
  auto dir = path.parent_path();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return io_error("cannot open directory", dir);
  const int rc = ::fsync(dfd);
  ::close(dfd);
  if (rc != 0) return io_error("cannot fsync directory", dir);
  return {};
}

Expected<DedupWindow> DedupWindow::load(const std::filesystem::path& path, std::size_t max_entries,
                                        std::chrono::milliseconds max_age) {
  DedupWindow w(max_entries, max_age);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT || !std::filesystem::exists(path)) return w;
    return io_error("cannot open", path);
  }
  auto corrupt = [&](const std::string& why) {
    return make_error(Errc::malformed, "corrupt dedup file " + path.string() + ": " + why);
  };
  std::string line;
  if (!std::getline(in, line) || line != kHeader) return corrupt("bad header");
  std::size_t count = 0;
  bool ended = false;
  while (std::getline(in, line)) {
    if (ended) return corrupt("data after footer");
    if (line.rfind("end ", 0) == 0) {
      std::size_t declared = 0;
      const auto* b = line.data() + 4;
      const auto* e = line.data() + line.size();
      const auto r = std::from_chars(b, e, declared);
      if (r.ec != std::errc{} || r.ptr != e || declared != count) return corrupt("bad footer");
      ended = true;
      continue;
    }
    const auto space = line.find(' ');
    if (space == std::string::npos) return corrupt("bad line " + std::to_string(count + 2));
    std::uint64_t at = 0;
    const auto r = std::from_chars(line.data(), line.data() + space, at);
    const std::string_view id(line.data() + space + 1, line.size() - space - 1);
    if (r.ec != std::errc{} || r.ptr != line.data() + space || !valid_id(id)) {
      return corrupt("bad line " + std::to_string(count + 2));
    }
    ++count;
    if (w.index_.count(std::string(id)) != 0) return corrupt("duplicate id");
    w.order_.push_back(Entry{std::string(id), at});
    w.index_.emplace(std::string(id), at);
  }
  if (!ended) return corrupt("missing footer (file cut short?)");
  while (w.order_.size() > w.max_entries_) {  // a smaller bound than when it was saved
    w.index_.erase(w.order_.front().id);
    w.order_.pop_front();
  }
  return w;
}

}  // namespace fleetlink
