#include "process_groups.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/log.hpp"
#include "path_trust.hpp"

namespace fleetlink::agent {

namespace fs = std::filesystem;

namespace {

template <typename Int>
bool parse_int(std::string_view s, Int& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string read_small_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  char buf[1024];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > 65536) break;
  }
  ::close(fd);
  return out;
}

std::string one_line(std::string_view v) {
  std::string out(v);
  for (char& c : out)
    if (c == '\n' || c == '\r' || c == '\0') c = ' ';
  return out;
}

Expected<void> fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return make_error(Errc::io, "open " + dir.string() + ": " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return make_error(Errc::io, "fsync " + dir.string() + ": " + std::strerror(err));
  return {};
}

}  // namespace

std::optional<ProcessIdentity> parse_proc_stat(std::string_view text) {
  // "pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
  //  cmajflt utime stime cutime cstime priority nice num_threads itrealvalue starttime ..."
  const auto open = text.find(" (");
  const auto close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) return std::nullopt;
  ProcessIdentity id;
  if (!parse_int(text.substr(0, open), id.pid)) return std::nullopt;
  std::vector<std::string_view> fields;  // from field 3 (state) on
  std::string_view rest = text.substr(close + 1);
  while (!rest.empty() && fields.size() < 20) {
    const auto b = rest.find_first_not_of(" \n");
    if (b == std::string_view::npos) break;
    rest.remove_prefix(b);
    const auto e = rest.find_first_of(" \n");
    fields.push_back(rest.substr(0, e));
    rest.remove_prefix(e == std::string_view::npos ? rest.size() : e);
  }
  // fields[0] is field 3 (state); field N is fields[N - 3].
  if (fields.size() < 20 || fields[0].size() != 1) return std::nullopt;
  id.state = fields[0][0];
  if (!parse_int(fields[5 - 3], id.pgrp) || !parse_int(fields[6 - 3], id.session) ||
      !parse_int(fields[22 - 3], id.start_ticks))
    return std::nullopt;
  return id;
}

std::optional<ProcessIdentity> read_process_identity(pid_t pid) {
  const std::string text = read_small_file("/proc/" + std::to_string(pid) + "/stat");
  if (text.empty()) return std::nullopt;
  return parse_proc_stat(text);
}

std::vector<ProcessIdentity> process_snapshot() {
  std::vector<ProcessIdentity> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    pid_t pid = 0;
    if (!parse_int(std::string_view(e->d_name), pid) || pid <= 0) continue;
    if (auto id = read_process_identity(pid)) out.push_back(*id);
  }
  ::closedir(d);
  return out;
}

std::string kernel_boot_id() {
  std::string id = read_small_file("/proc/sys/kernel/random/boot_id");
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

std::string encode_group_record(const GroupRecord& r) {
  std::ostringstream o;
  o << "pgid=" << r.pgid << "\n"
    << "start_ticks=" << r.start_ticks << "\n"
    << "session=" << r.session << "\n"
    << "kernel_boot=" << one_line(r.kernel_boot) << "\n"
    << "agent_boot_id=" << one_line(r.agent_boot_id) << "\n"
    << "cmd_id=" << one_line(r.cmd_id) << "\n"
    << "kill_grace_ms=" << r.kill_grace_ms << "\n"
    << "program=" << one_line(r.program) << "\n";
  return o.str();
}

std::optional<GroupRecord> decode_group_record(std::string_view text) {
  GroupRecord r;
  bool pgid = false, start = false, session = false;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view k = line.substr(0, eq);
    const std::string_view v = line.substr(eq + 1);
    if (k == "pgid") pgid = parse_int(v, r.pgid) && r.pgid > 1;
    else if (k == "start_ticks") start = parse_int(v, r.start_ticks);
    else if (k == "session") session = parse_int(v, r.session);
    else if (k == "kernel_boot") r.kernel_boot = v;
    else if (k == "agent_boot_id") r.agent_boot_id = v;
    else if (k == "cmd_id") r.cmd_id = v;
    else if (k == "kill_grace_ms") parse_int(v, r.kill_grace_ms);
    else if (k == "program") r.program = v;
  }
  if (!pgid || !start || !session || r.kernel_boot.empty()) return std::nullopt;
  return r;
}

std::vector<pid_t> recorded_group_members(const GroupRecord& r, const std::vector<ProcessIdentity>& snapshot,
                                          std::string_view kernel_boot) {
  std::vector<pid_t> out;
  if (kernel_boot.empty() || r.kernel_boot != kernel_boot) return out;  // the machine rebooted since
  for (const auto& p : snapshot) {
    // The leader's number with another start time: reused, so the group is gone.
    if (p.pid == r.pgid && p.start_ticks != r.start_ticks) return {};
  }
  for (const auto& p : snapshot) {
    if (p.pgrp != r.pgid || p.session != r.session || p.start_ticks < r.start_ticks) continue;
    if (p.state == 'Z' || p.state == 'X') continue;
    out.push_back(p.pid);
  }
  return out;
}

ProcessGroupRecord::ProcessGroupRecord(fs::path dir, std::string agent_boot_id)
    : dir_(std::move(dir)), agent_boot_id_(std::move(agent_boot_id)), kernel_boot_(kernel_boot_id()) {}

Expected<void> ProcessGroupRecord::open() {
  // The agent's alone, whatever the umask: what is recorded here gets signalled.
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST)
    return make_error(Errc::io, "cannot create " + dir_.string() + ": " + std::strerror(errno));
  // What is recorded here gets killed at the next start: nobody else may write it.
  if (auto why = untrusted_path_reason(dir_.string(), ::geteuid()); !why.empty())
    return make_error(Errc::invalid_argument, "process group records refused: " + why);
  if (kernel_boot_.empty())
    return make_error(Errc::io, "cannot read /proc/sys/kernel/random/boot_id: children could not be recognised");
  return {};
}

Expected<void> ProcessGroupRecord::add(pid_t pgid, std::string_view cmd_id, std::string_view program,
                                       std::chrono::milliseconds kill_grace) {
  const auto leader = read_process_identity(pgid);
  if (!leader) return make_error(Errc::io, "cannot read /proc/" + std::to_string(pgid) + "/stat");
  GroupRecord r;
  r.pgid = pgid;
  r.start_ticks = leader->start_ticks;
  r.session = leader->session;
  r.kernel_boot = kernel_boot_;
  r.agent_boot_id = agent_boot_id_;
  r.cmd_id = std::string(cmd_id);
  r.kill_grace_ms = static_cast<std::uint32_t>(std::min<std::int64_t>(kill_grace.count(), UINT32_MAX));
  r.program = std::string(program);
  const std::string text = encode_group_record(r);
  const fs::path file = dir_ / std::to_string(pgid);
  const fs::path tmp = dir_ / (std::to_string(pgid) + ".tmp");
  std::lock_guard lock(mu_);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return make_error(Errc::io, "cannot record the child's process group in " + tmp.string() + ": " +
                                              std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  const int err = errno;
  const bool ok = done == text.size() && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), file.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return make_error(Errc::io, "cannot record the child's process group in " + file.string() + ": " +
                                    std::strerror(ok ? errno : err));
  }
  return fsync_dir(dir_);
}

void ProcessGroupRecord::remove(pid_t pgid) { remove_file(dir_ / std::to_string(pgid)); }

void ProcessGroupRecord::remove_file(const fs::path& file) {
  // Not fsync'd: a record that comes back after a crash finds its group gone.
  if (::unlink(file.c_str()) != 0 && errno != ENOENT)
    FL_WARN("cannot remove %s: %s", file.c_str(), std::strerror(errno));
}

std::vector<ProcessGroupRecord::Entry> ProcessGroupRecord::load() const {
  std::vector<Entry> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    Entry e;
    e.file = it->path();
    struct stat st {};
    if (::lstat(e.file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      e.problem = "not a regular file";
    } else if ((st.st_uid != 0 && st.st_uid != ::geteuid()) || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      e.problem = "owned by uid " + std::to_string(st.st_uid) + " with mode " + mode + ": not the agent's own";
    } else {
      e.record = decode_group_record(read_small_file(e.file.string()));
      if (!e.record) e.problem = "unreadable";
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace fleetlink::agent
