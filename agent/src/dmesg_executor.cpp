#include "dmesg_executor.hpp"

#include <fcntl.h>
#include <sys/klog.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <vector>

namespace fleetlink::agent {

namespace {
// klogctl(2) actions (glibc has no names for them).
constexpr int kSyslogActionReadAll = 3;
constexpr int kSyslogActionSizeBuffer = 10;

std::string_view strip_priority(std::string_view line) {
  if (line.size() >= 3 && line.front() == '<') {
    const auto close = line.find('>');
    if (close != std::string_view::npos && close <= 4) {
      bool digits = close > 1;
      for (std::size_t i = 1; i < close; ++i) digits = digits && line[i] >= '0' && line[i] <= '9';
      if (digits) return line.substr(close + 1);
    }
  }
  return line;
}

// /dev/kmsg records: "pri,seq,usec,flags[,...];text\n" plus " KEY=value" lines.
Expected<std::string> read_dev_kmsg() {
  const int fd = ::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return make_error(Errc::io, std::string("/dev/kmsg: ") + std::strerror(errno));
  std::string out;
  std::vector<char> rec(16384);
  for (;;) {
    const ssize_t n = ::read(fd, rec.data(), rec.size());
    if (n < 0) {
      if (errno == EINTR || errno == EPIPE) continue;  // EPIPE: a record was overwritten
      if (errno == EAGAIN) break;                      // caught up with the ring buffer
      const int err = errno;
      ::close(fd);
      return make_error(Errc::io, std::string("/dev/kmsg: ") + std::strerror(err));
    }
    if (n == 0) break;
    std::string_view r(rec.data(), static_cast<std::size_t>(n));
    const auto semi = r.find(';');
    if (semi == std::string_view::npos) continue;
    std::string_view header = r.substr(0, semi);
    std::string_view text = r.substr(semi + 1);
    text = text.substr(0, text.find('\n'));
    // header fields: priority, sequence, microseconds since boot, flags
    std::uint64_t usec = 0;
    std::size_t field = 0;
    std::size_t start = 0;
    for (std::size_t i = 0; i <= header.size(); ++i) {
      if (i == header.size() || header[i] == ',') {
        if (field == 2) std::from_chars(header.data() + start, header.data() + i, usec);
        ++field;
        start = i + 1;
      }
    }
    char stamp[48];
    std::snprintf(stamp, sizeof stamp, "[%5llu.%06llu] ",
                  static_cast<unsigned long long>(usec / 1000000),
                  static_cast<unsigned long long>(usec % 1000000));
    out += stamp;
    out += text;
    out += '\n';
  }
  ::close(fd);
  return out;
}

}  // namespace

std::string dmesg_tail(std::string_view raw, std::size_t n) {
  std::size_t end = raw.size();
  while (end > 0 && (raw[end - 1] == '\n' || raw[end - 1] == '\0')) --end;
  if (n == 0 || end == 0) return {};
  // The n-th newline counted back from the end starts the n-th last line.
  std::size_t pos = 0;
  std::size_t newlines = 0;
  for (std::size_t i = end; i > 0; --i) {
    if (raw[i - 1] == '\n' && ++newlines == n) {
      pos = i;
      break;
    }
  }
  std::string out;
  std::string_view body = raw.substr(pos, end - pos);
  out.reserve(body.size() + 1);
  std::size_t i = 0;
  while (i < body.size()) {
    std::size_t nl = body.find('\n', i);
    if (nl == std::string_view::npos) nl = body.size();
    out += strip_priority(body.substr(i, nl - i));
    out += '\n';
    i = nl + 1;
  }
  return out;
}

std::size_t keep_tail_bytes(std::string& text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return 0;
  std::size_t cut = text.size() - max_bytes;
  // Prefer to start at a whole line inside the kept part.
  const std::size_t nl = text.find('\n', cut);
  if (nl != std::string::npos && nl + 1 < text.size()) cut = nl + 1;
  text.erase(0, cut);
  return cut;
}

Expected<std::size_t> dmesg_lines_arg(const StringMap& args, const DmesgOptions& opts) {
  auto it = args.find("lines");
  if (it == args.end() || it->second.empty()) return std::min(opts.default_lines, opts.max_lines);
  std::size_t n = 0;
  const auto& s = it->second;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc{} || p != s.data() + s.size() || n == 0)
    return make_error(Errc::invalid_argument,
                      "args.lines must be a positive whole number, got '" + s + "'");
  return std::min(n, opts.max_lines);
}

Expected<std::string> read_kernel_log() {
  const int size = ::klogctl(kSyslogActionSizeBuffer, nullptr, 0);
  if (size > 0) {
    std::string buf(static_cast<std::size_t>(size), '\0');
    const int n = ::klogctl(kSyslogActionReadAll, buf.data(), size);
    if (n >= 0) {
      buf.resize(static_cast<std::size_t>(n));
      return buf;
    }
  }
  const int klog_err = errno;
  auto kmsg = read_dev_kmsg();
  if (kmsg) return kmsg;
  std::string detail = std::string("cannot read the kernel log: klogctl(SYSLOG_ACTION_READ_ALL): ") +
                       std::strerror(klog_err) + "; " + kmsg.error().detail;
  if (klog_err == EPERM || klog_err == EACCES)
    detail += " (this rig forbids it: the agent needs CAP_SYSLOG, or kernel.dmesg_restrict=0)";
  return make_error(Errc::io, detail);
}

DmesgExecutor::DmesgExecutor(DmesgOptions opts, Reader reader)
    : opts_(opts), reader_(std::move(reader)) {}

void DmesgExecutor::start(const CommandContext& ctx, std::shared_ptr<Reporter> reporter) {
  Outcome out;
  auto lines = dmesg_lines_arg(ctx.args, opts_);
  if (!lines) {
    out.status = msg::Status::failed;
    out.exit_code = 2;
    out.detail = lines.error().detail;
    reporter->finish(std::move(out));
    return;
  }
  auto raw = reader_ ? reader_() : read_kernel_log();
  if (!raw) {
    out.status = msg::Status::failed;
    out.exit_code = 1;
    out.detail = raw.error().detail;
    reporter->finish(std::move(out));
    return;
  }
  out.output = dmesg_tail(*raw, *lines);
  // The newest lines matter most: cap from the front, not the back.
  out.dropped_bytes = keep_tail_bytes(out.output, kMaxResultOutput);
  out.truncated = out.dropped_bytes > 0;
  reporter->finish(std::move(out));
}

}  // namespace fleetlink::agent
