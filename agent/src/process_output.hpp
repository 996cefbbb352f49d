#pragma once
// Where a child's output goes: streamed to the Reporter in bounded chunks, and
// the last kMaxResultOutput bytes kept for the result. Memory is fixed whatever
// the child writes; bytes the Reporter refuses are counted, not queued.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fleetlink/executor.hpp"
#include "process_runner.hpp"

namespace fleetlink::agent {

// The last `capacity` bytes of a stream, in a ring of fixed size.
class TailBuffer {
 public:
  explicit TailBuffer(std::size_t capacity);
  void append(std::string_view bytes);
  std::string str() const;                           // oldest to newest
  std::uint64_t total() const noexcept { return total_; }
  bool truncated() const noexcept { return total_ > ring_.size(); }
  std::size_t capacity() const noexcept { return ring_.size(); }

 private:
  std::vector<char> ring_;
  std::size_t head_ = 0;   // next write position
  std::uint64_t total_ = 0;
};

class OutputCollector {
 public:
  OutputCollector(std::shared_ptr<Reporter> reporter, std::size_t tail_bytes = kMaxResultOutput,
                  std::size_t chunk_bytes = kMaxChunkBytes);
  void feed(std::string_view bytes);

  const TailBuffer& tail() const noexcept { return tail_; }
  std::uint64_t streamed_bytes() const noexcept { return streamed_; }
  std::uint64_t dropped_bytes() const noexcept { return dropped_; }

 private:
  std::shared_ptr<Reporter> reporter_;
  TailBuffer tail_;
  std::size_t chunk_bytes_;
  std::uint64_t streamed_ = 0;
  std::uint64_t dropped_ = 0;
};

// The Outcome of a finished run: status from how it ended, output from the tail.
//  exit 0 -> ok; exit N -> failed; signal S -> failed with signal=S and exit_code=128+S;
//  timeout -> timeout; cancel -> cancelled. dropped_bytes stays 0: bytes the
//  Reporter refused are its own count (Reporter::output's contract).
Outcome outcome_from_run(const RunResult& run, const OutputCollector& output,
                         std::string_view what);

// A run that could not even start (bad arguments, exec failure): failed, exit -1.
Outcome start_failure(std::string detail);

// "SIGSEGV" for 11, "signal 99" for unknown numbers.
std::string signal_name(int sig);

}  // namespace fleetlink::agent
