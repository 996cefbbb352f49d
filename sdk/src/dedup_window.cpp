// The agent's memory of accepted cmd_ids. Persisted as a small text file:
//   fleetlink-dedup 2
//   <age_ms> <state> <boot_id> <cmd_id>   (one line per entry, oldest first)
//   end <count>
// state is a (accepted), f (finished) or ? (not known); boot_id is - when not
// known. The footer makes a cut-short file detectable even though save() is atomic
// (a copy by hand, a full disk on another tool's write...).
//
// Version 1, written by agents before ages were monotonic, is still read:
//   fleetlink-dedup 1
//   <at_ms> <cmd_id>                      (wall-clock Unix ms)
//   end <count>
#include "fleetlink/dedup_window.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <iterator>

namespace fleetlink {
namespace {

constexpr std::string_view kHeaderPrefix = "fleetlink-dedup ";
constexpr std::string_view kHeaderV1 = "fleetlink-dedup 1";
constexpr std::string_view kHeaderV2 = "fleetlink-dedup 2";
constexpr std::size_t kMaxIdLength = 128;
// The longest line save() writes is about 280 bytes; anything much longer is not
// one of its lines, and reading it whole would let a broken file take any memory.
constexpr std::size_t kMaxLineBytes = 512;
// Clock values and ages are kept below 2^61 ms (73 million years), so that every
// difference of two of them fits an int64_t.
constexpr std::int64_t kClockLimit = std::int64_t{1} << 61;

std::int64_t clock_value(std::uint64_t now_ms) noexcept {
  return static_cast<std::int64_t>(std::min<std::uint64_t>(now_ms, static_cast<std::uint64_t>(kClockLimit)));
}

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

bool parse_u64(std::string_view s, std::uint64_t& out) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc{} && r.ptr == s.data() + s.size();
}

char state_char(DedupWindow::State s) {
  switch (s) {
    case DedupWindow::State::accepted: return 'a';
    case DedupWindow::State::finished: return 'f';
    case DedupWindow::State::unknown: return '?';
  }
  return '?';
}

enum class LineStatus : std::uint8_t { line, end, too_long };

// One line without its '\n' (the last one may lack it), never longer than kMaxLineBytes.
LineStatus read_line(std::streambuf& in, std::string& out) {
  out.clear();
  using traits = std::streambuf::traits_type;
  for (auto c = in.sbumpc(); !traits::eq_int_type(c, traits::eof()); c = in.sbumpc()) {
    if (traits::to_char_type(c) == '\n') return LineStatus::line;
    if (out.size() == kMaxLineBytes) return LineStatus::too_long;
    out.push_back(traits::to_char_type(c));
  }
  return out.empty() ? LineStatus::end : LineStatus::line;
}

// Exactly n fields separated by single spaces, none empty.
template <std::size_t N>
bool split_fields(std::string_view line, std::array<std::string_view, N>& out) {
  std::size_t n = 0;
  for (;;) {
    const auto sp = line.find(' ');
    const std::string_view field = line.substr(0, sp);
    if (field.empty() || n == N) return false;
    out[n++] = field;
    if (sp == std::string_view::npos) break;
    line.remove_prefix(sp + 1);
  }
  return n == N;
}

}  // namespace

DedupWindow::DedupWindow(std::size_t max_entries, std::chrono::milliseconds max_age)
    : max_entries_(max_entries),
      max_age_ms_(std::clamp<std::int64_t>(max_age.count(), 0, kClockLimit)) {}

bool DedupWindow::expired(const Record& r, std::int64_t now) const noexcept {
  return now - r.at_ms > max_age_ms_;
}

void DedupWindow::push(std::string id, Record r) {
  order_.push_back(id);
  index_.emplace(std::move(id), std::move(r));
  while (order_.size() > max_entries_) drop_oldest();
}

void DedupWindow::drop_oldest() {
  index_.erase(order_.front());
  order_.pop_front();
}

bool DedupWindow::insert(std::string_view cmd_id, std::uint64_t now_ms, std::string_view boot_id) {
  const std::int64_t now = clock_value(now_ms);
  prune(now_ms);
  if (auto it = index_.find(std::string(cmd_id)); it != index_.end()) {
    if (!expired(it->second, now)) return false;
    // Expired but not yet at the front (entries out of age order): drop the old one.
    erase(cmd_id);
  }
  if (max_entries_ == 0) return true;
  push(std::string(cmd_id), Record{now, valid_id(boot_id) ? std::string(boot_id) : std::string(),
                                   State::accepted});
  return true;
}

bool DedupWindow::contains(std::string_view cmd_id, std::uint64_t now_ms) const {
  const auto it = index_.find(std::string(cmd_id));
  return it != index_.end() && !expired(it->second, clock_value(now_ms));
}

std::optional<DedupWindow::Entry> DedupWindow::find(std::string_view cmd_id, std::uint64_t now_ms) const {
  const auto it = index_.find(std::string(cmd_id));
  const std::int64_t now = clock_value(now_ms);
  if (it == index_.end() || expired(it->second, now)) return std::nullopt;
  const auto& r = it->second;
  return Entry{it->first, static_cast<std::uint64_t>(std::max<std::int64_t>(now - r.at_ms, 0)), r.boot_id,
               r.state};
}

bool DedupWindow::erase(std::string_view cmd_id) {
  const auto it = index_.find(std::string(cmd_id));
  if (it == index_.end()) return false;
  index_.erase(it);
  // Usually the newest entry (a save that failed right after its insert).
  const auto pos = std::find(order_.rbegin(), order_.rend(), cmd_id);
  if (pos != order_.rend()) order_.erase(std::next(pos).base());
  return true;
}

bool DedupWindow::mark_finished(std::string_view cmd_id) {
  const auto it = index_.find(std::string(cmd_id));
  if (it == index_.end()) return false;
  it->second.state = State::finished;
  return true;
}

void DedupWindow::restore(const Entry& e, std::uint64_t now_ms) {
  erase(e.cmd_id);
  if (e.age_ms > static_cast<std::uint64_t>(max_age_ms_) || max_entries_ == 0) return;
  const std::int64_t now = clock_value(now_ms);
  push(e.cmd_id, Record{now - static_cast<std::int64_t>(e.age_ms), valid_id(e.boot_id) ? e.boot_id : std::string(),
                        e.state});
}

std::vector<DedupWindow::Entry> DedupWindow::entries(std::uint64_t now_ms) const {
  std::vector<Entry> out;
  out.reserve(order_.size());
  for (const auto& id : order_) {
    if (auto e = find(id, now_ms)) out.push_back(std::move(*e));
  }
  return out;
}

void DedupWindow::prune(std::uint64_t now_ms) {
  const std::int64_t now = clock_value(now_ms);
  while (!order_.empty() &&
         (order_.size() > max_entries_ || expired(index_.at(order_.front()), now))) {
    drop_oldest();
  }
}

Expected<void> DedupWindow::save(const std::filesystem::path& path, std::uint64_t now_ms) const {
  const std::int64_t now = clock_value(now_ms);
  std::string text;
  text.reserve(32 + order_.size() * 96);
  text.append(kHeaderV2).push_back('\n');
  std::size_t count = 0;
  for (const auto& id : order_) {
    const Record& r = index_.at(id);
    if (expired(r, now)) continue;
    text.append(std::to_string(std::max<std::int64_t>(now - r.at_ms, 0))).push_back(' ');
    text.push_back(state_char(r.state));
    text.push_back(' ');
    text.append(r.boot_id.empty() ? std::string_view("-") : std::string_view(r.boot_id)).push_back(' ');
    text.append(id).push_back('\n');
    ++count;
  }
  text.append("end ").append(std::to_string(count)).push_back('\n');

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
                                        std::chrono::milliseconds max_age, std::uint64_t now_ms) {
  DedupWindow w(max_entries, max_age);
  const std::int64_t now = clock_value(now_ms);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT || !std::filesystem::exists(path)) return w;
    return io_error("cannot open", path);
  }
  auto corrupt = [&](const std::string& why) {
    return make_error(Errc::malformed, "corrupt dedup file " + path.string() + ": " + why);
  };
  std::streambuf& buf = *in.rdbuf();
  std::string line;
  if (read_line(buf, line) != LineStatus::line) return corrupt("bad header");
  int version = 0;
  if (line == kHeaderV1) {
    version = 1;
  } else if (line == kHeaderV2) {
    version = 2;
  } else if (line.rfind(kHeaderPrefix, 0) == 0) {
    return corrupt("unsupported version '" + line.substr(kHeaderPrefix.size(), 16) +
                   "' (written by a newer agent?)");
  } else {
    return corrupt("bad header");
  }

  std::size_t count = 0;
  std::size_t line_no = 1;
  bool ended = false;
  for (LineStatus st = read_line(buf, line); st != LineStatus::end; st = read_line(buf, line)) {
    ++line_no;
    if (st == LineStatus::too_long)
      return corrupt("line " + std::to_string(line_no) + " longer than " + std::to_string(kMaxLineBytes) +
                     " bytes");
    if (ended) return corrupt("data after footer");
    const auto bad_line = [&] { return corrupt("bad line " + std::to_string(line_no)); };
    if (line.rfind("end ", 0) == 0) {
      std::uint64_t declared = 0;
      if (!parse_u64(std::string_view(line).substr(4), declared) || declared != count)
        return corrupt("bad footer");
      ended = true;
      continue;
    }
    ++count;
    std::string_view id;
    std::uint64_t age = 0;
    Record rec{now, {}, State::unknown};
    if (version == 1) {
      // A version-1 line holds a wall-clock time, which cannot be made an age
      // safely: the clock may have been stepped since it was written (the very
      // fault version 2 removes). Its entries count as accepted just now (age 0),
      // so they are kept a whole max_age from the upgrade: longer than needed,
      // never shorter. Whether they finished was not recorded either.
      std::array<std::string_view, 2> f;
      std::uint64_t at = 0;
      if (!split_fields(line, f) || !parse_u64(f[0], at) || !valid_id(f[1])) return bad_line();
      id = f[1];
    } else {
      std::array<std::string_view, 4> f;
      if (!split_fields(line, f) || !parse_u64(f[0], age) || f[1].size() != 1 ||
          (f[2] != "-" && !valid_id(f[2])) || !valid_id(f[3]))
        return bad_line();
      switch (f[1][0]) {
        case 'a': rec.state = State::accepted; break;
        case 'f': rec.state = State::finished; break;
        case '?': rec.state = State::unknown; break;
        default: return bad_line();
      }
      if (f[2] != "-") rec.boot_id = std::string(f[2]);
      id = f[3];
    }
    if (age > static_cast<std::uint64_t>(w.max_age_ms_)) continue;  // a smaller max_age than when saved
    rec.at_ms = now - static_cast<std::int64_t>(age);
    if (w.index_.count(std::string(id)) != 0) return corrupt("duplicate id");
    w.push(std::string(id), std::move(rec));  // a smaller max_entries than when saved: the newest stay
  }
  if (!ended) return corrupt("missing footer (file cut short?)");
  return w;
}

}  // namespace fleetlink
