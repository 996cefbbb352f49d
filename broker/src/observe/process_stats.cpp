#include "observe/process_stats.hpp"

#include <dirent.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace fleetlink::broker {

std::optional<double> parse_vmrss_bytes(std::string_view text) {
  constexpr std::string_view kKey = "VmRSS:";
  std::size_t pos = text.find(kKey);
  if (pos == std::string_view::npos) return std::nullopt;
  pos += kKey.size();
  while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) ++pos;
  std::uint64_t kib = 0;
  const auto res = std::from_chars(text.data() + pos, text.data() + text.size(), kib);
  if (res.ec != std::errc{}) return std::nullopt;
  return static_cast<double>(kib) * 1024.0;
}

namespace {

std::optional<double> count_open_fds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  double n = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the descriptor opendir itself holds
}

}  // namespace

std::map<std::string, double> read_process_gauges() {
  std::map<std::string, double> gauges;
  std::ifstream status("/proc/self/status");
  if (status) {
    std::ostringstream text;
    text << status.rdbuf();
    if (auto rss = parse_vmrss_bytes(text.str())) gauges["process_resident_memory_bytes"] = *rss;
  }
  if (auto fds = count_open_fds()) gauges["process_open_fds"] = *fds;
  return gauges;
}

}  // namespace fleetlink::broker
