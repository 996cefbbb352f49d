#pragma once
// Command kind "dmesg": the last N lines of the kernel ring buffer (args
// {"lines": "N"}, default --dmesg-default-lines, capped at --dmesg-max-lines),
// read with klogctl(SYSLOG_ACTION_READ_ALL), or /dev/kmsg if that is refused.
// Never by running dmesg(1). A rig that forbids reading the log gets a failed
// result that says so, with the errno text.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "fleetlink/executor.hpp"
#include "fleetlink/expected.hpp"

namespace fleetlink::agent {

struct DmesgOptions {
  std::size_t default_lines = 500;
  std::size_t max_lines = 5000;
};

// The last n lines of a raw kernel log (klogctl format: "<6>[    1.0] text"), with
// the "<N>" priority prefixes removed, each line ending in '\n'.
std::string dmesg_tail(std::string_view raw, std::size_t n);
// Keeps at most max_bytes of text from the end, cut at a line start when possible.
// Returns the number of bytes dropped from the front.
std::size_t keep_tail_bytes(std::string& text, std::size_t max_bytes);
// How many lines a command asks for: (value, error text if the arg is bad).
Expected<std::size_t> dmesg_lines_arg(const StringMap& args, const DmesgOptions& opts);

// The whole kernel ring buffer; an Error (Errc::io) that explains a refusal.
Expected<std::string> read_kernel_log();

class DmesgExecutor final : public Executor {
 public:
  using Reader = std::function<Expected<std::string>()>;
  explicit DmesgExecutor(DmesgOptions opts, Reader reader = read_kernel_log);
  std::string_view kind() const override { return "dmesg"; }
  void start(const CommandContext& ctx, std::shared_ptr<Reporter> reporter) override;
  void cancel(std::string_view) override {}  // a read takes milliseconds

 private:
  DmesgOptions opts_;
  Reader reader_;
};

}  // namespace fleetlink::agent
