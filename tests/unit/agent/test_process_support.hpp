#pragma once
// Helpers shared by the executor/plugin unit tests: a Reporter that records
// what it is told, a scratch directory, small script files.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>

#include "fleetlink/executor.hpp"

namespace fleetlink::agent::testing {

class RecordingReporter : public Reporter {
 public:
  // Accepts streamed output until `accept_limit` bytes, then refuses.
  explicit RecordingReporter(std::size_t accept_limit = SIZE_MAX) : limit_(accept_limit) {}

  bool output(std::string_view bytes) override {
    std::lock_guard lock(mu_);
    max_chunk_ = std::max(max_chunk_, bytes.size());
    ++chunks_;
    if (accepted_ + bytes.size() > limit_) return false;
    accepted_ += bytes.size();
    if (keep_.size() < 1 << 20) keep_.append(bytes);
    return true;
  }
  void finish(Outcome outcome) override {
    std::lock_guard lock(mu_);
    ++finishes_;
    outcome_ = std::move(outcome);
    cv_.notify_all();
  }
  // Waits for finish(); nullopt on timeout.
  std::optional<Outcome> wait(std::chrono::milliseconds limit = std::chrono::seconds(20)) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, limit, [this] { return outcome_.has_value(); })) return std::nullopt;
    return outcome_;
  }
  std::string streamed() {
    std::lock_guard lock(mu_);
    return keep_;
  }
  std::size_t max_chunk() {
    std::lock_guard lock(mu_);
    return max_chunk_;
  }
  int finishes() {
    std::lock_guard lock(mu_);
    return finishes_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t limit_;
  std::size_t accepted_ = 0;
  std::size_t max_chunk_ = 0;
  std::size_t chunks_ = 0;
  int finishes_ = 0;
  std::string keep_;
  std::optional<Outcome> outcome_;
};

class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fleetlink-exec-XXXXXX").string();
    char* made = ::mkdtemp(tmpl.data());
    path_ = made ? made : "";
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::string write(const std::string& name, const std::string& text, bool executable = false) const {
    std::string p = file(name);
    std::ofstream(p, std::ios::binary) << text;
    ::chmod(p.c_str(), executable ? 0755 : 0644);
    return p;
  }

 private:
  std::string path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  return text.str();
}

// True once pid is gone or a zombie (killed; its new parent has not reaped it yet).
inline bool process_dead(long pid, std::chrono::milliseconds wait = std::chrono::seconds(3)) {
  auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    if (stat.empty()) return true;
    auto close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() &&
        (stat[close + 2] == 'Z' || stat[close + 2] == 'X')) {
      return true;
    }
    if (std::chrono::steady_clock::now() > until) return false;
    ::usleep(20000);
  }
}

// "VmHWM:  1234 kB" -> bytes; 0 if unknown.
inline std::uint64_t proc_status_kb(const std::string& key, long pid = 0) {
  std::string path = pid == 0 ? "/proc/self/status" : "/proc/" + std::to_string(pid) + "/status";
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::strtoull(line.c_str() + key.size() + 1, nullptr, 10);
  }
  return 0;
}

}  // namespace fleetlink::agent::testing
