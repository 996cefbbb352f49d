#include "process_output.hpp"

#include <signal.h>
#include <string.h>

#include <algorithm>

namespace fleetlink::agent {

TailBuffer::TailBuffer(std::size_t capacity) : ring_(capacity) {}

void TailBuffer::append(std::string_view bytes) {
  total_ += bytes.size();
  const std::size_t cap = ring_.size();
  if (cap == 0) return;
  if (bytes.size() >= cap) {
    std::copy(bytes.end() - static_cast<std::ptrdiff_t>(cap), bytes.end(), ring_.begin());
    head_ = 0;
    return;
  }
  std::size_t first = std::min(bytes.size(), cap - head_);
  std::copy_n(bytes.data(), first, ring_.begin() + static_cast<std::ptrdiff_t>(head_));
  std::copy_n(bytes.data() + first, bytes.size() - first, ring_.begin());
  head_ = (head_ + bytes.size()) % cap;
}

std::string TailBuffer::str() const {
  const std::size_t cap = ring_.size();
  if (total_ <= cap) return std::string(ring_.data(), static_cast<std::size_t>(total_));
  std::string out;
  out.reserve(cap);
  out.append(ring_.data() + head_, cap - head_);
  out.append(ring_.data(), head_);
  return out;
}

OutputCollector::OutputCollector(std::shared_ptr<Reporter> reporter, std::size_t tail_bytes,
                                 std::size_t chunk_bytes)
    : reporter_(std::move(reporter)), tail_(tail_bytes), chunk_bytes_(std::max<std::size_t>(chunk_bytes, 1)) {}

void OutputCollector::feed(std::string_view bytes) {
  tail_.append(bytes);
  while (!bytes.empty()) {
    std::string_view piece = bytes.substr(0, chunk_bytes_);
    bytes.remove_prefix(piece.size());
    if (reporter_ && reporter_->output(piece)) {
      streamed_ += piece.size();
    } else {
      dropped_ += piece.size();
    }
  }
}

Outcome start_failure(std::string detail) {
  Outcome o;
  o.status = msg::Status::failed;
  o.exit_code = -1;
  o.detail = std::move(detail);
  return o;
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  if (abbrev != nullptr) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

Outcome outcome_from_run(const RunResult& run, const OutputCollector& output,
                         std::string_view what) {
  Outcome o;
  o.output = output.tail().str();
  o.truncated = output.tail().truncated();
  // Bytes the Reporter refused are counted by the Reporter itself (see
  // Reporter::output); counting them here too would report them twice.
  o.dropped_bytes = 0;
  o.signal = run.signal;
  o.exit_code = run.signal != 0 ? 128 + run.signal : run.exit_code;
  const std::string name(what);
  const std::string ended = run.signal != 0 ? "killed by " + signal_name(run.signal)
                                            : "exit code " + std::to_string(run.exit_code);
  if (run.cancelled && run.pid < 0) {
    o.status = msg::Status::cancelled;
    o.exit_code = -1;
    o.detail = name + " cancelled before it started";
  } else if (run.cancelled) {
    o.status = msg::Status::cancelled;
    o.detail = name + " cancelled (" + ended + (run.sigkill_sent ? ", after SIGTERM grace" : "") + ")";
  } else if (run.timed_out) {
    o.status = msg::Status::timeout;
    o.detail = name + " timed out; process group killed (" + ended +
               (run.sigkill_sent ? ", SIGKILL after SIGTERM grace" : "") + ")";
  } else if (run.signal != 0) {
    o.status = msg::Status::failed;
    o.detail = name + " " + ended;
  } else if (run.exit_code == 0) {
    o.status = msg::Status::ok;
  } else {
    o.status = msg::Status::failed;
    o.detail = name + " failed with " + ended;
  }
  return o;
}

}  // namespace fleetlink::agent
