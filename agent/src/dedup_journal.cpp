#include "dedup_journal.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <vector>

namespace fleetlink::agent {
namespace {

constexpr std::size_t kMaxIdBytes = 128;
// Times and ages stay below 2^61 ms, as in DedupWindow: differences fit an int64_t.
constexpr std::int64_t kTimeLimit = std::int64_t{1} << 61;

bool valid_token(std::string_view s) {
  if (s.empty() || s.size() > kMaxIdBytes) return false;
  return std::none_of(s.begin(), s.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\0';
  });
}

char state_char(DedupWindow::State s) {
  switch (s) {
    case DedupWindow::State::accepted: return 'a';
    case DedupWindow::State::finished: return 'f';
    case DedupWindow::State::unknown: return '?';
  }
  return '?';
}

bool parse_time(std::string_view s, std::int64_t& out) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc{} && r.ptr == s.data() + s.size() && out > -kTimeLimit && out < kTimeLimit;
}

// Up to N fields separated by single spaces, none empty; returns how many, or 0
// when the line is not of that shape (more than N fields, an empty one).
template <std::size_t N>
std::size_t split_fields(std::string_view line, std::array<std::string_view, N>& out) {
  std::size_t n = 0;
  for (;;) {
    const auto sp = line.find(' ');
    const std::string_view field = line.substr(0, sp);
    if (field.empty() || n == N) return 0;
    out[n++] = field;
    if (sp == std::string_view::npos) return n;
    line.remove_prefix(sp + 1);
  }
}

std::string with_check(std::string body) {
  const std::string check = journal_check(body);
  body.push_back(' ');
  body.append(check);
  body.push_back('\n');
  return body;
}

struct Record {
  bool finished_mark;  // an f line; otherwise an e line
  std::int64_t t;
  DedupWindow::Entry entry;
};

}  // namespace

bool is_journal(std::string_view text) noexcept {
  return text.substr(0, kJournalHeader.size()) == kJournalHeader &&
         (text.size() == kJournalHeader.size() || text[kJournalHeader.size()] == '\n');
}

std::string journal_check(std::string_view line) {
  std::uint32_t h = 2166136261u;
  for (const char c : line) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(8, '0');
  for (int i = 7; i >= 0; --i) {
    out[static_cast<std::size_t>(i)] = kHex[h & 0xF];
    h >>= 4;
  }
  return out;
}

std::string journal_entry_line(std::int64_t t, const DedupWindow::Entry& e) {
  std::string body = "e ";
  body.append(std::to_string(t)).push_back(' ');
  body.push_back(state_char(e.state));
  body.push_back(' ');
  body.append(valid_token(e.boot_id) ? e.boot_id : std::string("-")).push_back(' ');
  body.append(e.cmd_id);
  return with_check(std::move(body));
}

std::string journal_finished_line(std::int64_t t, std::string_view cmd_id) {
  std::string body = "f ";
  body.append(std::to_string(t)).push_back(' ');
  body.append(cmd_id);
  return with_check(std::move(body));
}

std::string journal_snapshot(const DedupWindow& w, std::uint64_t now_ms) {
  std::string text(kJournalHeader);
  text.push_back('\n');
  const auto entries = w.entries(now_ms);
  text.reserve(text.size() + entries.size() * 120);
  for (const auto& e : entries) {
    const auto age = static_cast<std::int64_t>(std::min<std::uint64_t>(e.age_ms, kTimeLimit - 1));
    text.append(journal_entry_line(-age, e));
  }
  return text;
}

Expected<JournalRead> parse_journal(std::string_view text, std::size_t max_entries,
                                    std::chrono::milliseconds max_age, std::uint64_t now_ms) {
  auto bad = [](std::size_t line_no, const std::string& why) {
    return make_error(Errc::malformed, "line " + std::to_string(line_no) + ": " + why);
  };
  const auto header_end = text.find('\n');
  if (header_end == std::string_view::npos || text.substr(0, header_end) != kJournalHeader)
    return bad(1, "not a format-3 header (expected '" + std::string(kJournalHeader) + "')");
  std::string_view rest = text.substr(header_end + 1);

  JournalRead out{DedupWindow(max_entries, max_age), 0, false};
  std::vector<Record> records;
  std::int64_t newest = 0;
  std::size_t line_no = 1;
  while (!rest.empty()) {
    const auto nl = rest.find('\n');
    if (nl == std::string_view::npos) {
      // The last record, cut short by a crash before its fdatasync returned.
      out.torn_tail = true;
      break;
    }
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl + 1);
    ++line_no;
    if (line.size() > kJournalMaxLineBytes)
      return bad(line_no, "longer than " + std::to_string(kJournalMaxLineBytes) + " bytes");
    const auto last_sp = line.rfind(' ');
    if (last_sp == std::string_view::npos) return bad(line_no, "not a record");
    const std::string_view body = line.substr(0, last_sp);
    if (line.substr(last_sp + 1) != journal_check(body)) return bad(line_no, "check digits do not match");

    std::array<std::string_view, 5> f;
    const std::size_t n = split_fields(body, f);
    Record r{false, 0, {}};
    if (n == 5 && f[0] == "e") {
      if (!parse_time(f[1], r.t)) return bad(line_no, "bad time");
      if (f[2].size() != 1) return bad(line_no, "bad state");
      switch (f[2][0]) {
        case 'a': r.entry.state = DedupWindow::State::accepted; break;
        case 'f': r.entry.state = DedupWindow::State::finished; break;
        case '?': r.entry.state = DedupWindow::State::unknown; break;
        default: return bad(line_no, "bad state");
      }
      if (f[3] != "-" && !valid_token(f[3])) return bad(line_no, "bad boot_id");
      if (!valid_token(f[4])) return bad(line_no, "bad cmd_id");
      if (f[3] != "-") r.entry.boot_id = std::string(f[3]);
      r.entry.cmd_id = std::string(f[4]);
    } else if (n == 3 && f[0] == "f") {
      r.finished_mark = true;
      if (!parse_time(f[1], r.t)) return bad(line_no, "bad time");
      if (!valid_token(f[2])) return bad(line_no, "bad cmd_id");
      r.entry.cmd_id = std::string(f[2]);
    } else {
      return bad(line_no, "not a record");
    }
    newest = std::max(newest, r.t);
    records.push_back(std::move(r));
  }

  for (auto& r : records) {
    if (r.finished_mark) {
      // Of an entry a later rewrite would have dropped (expired, beyond the bound): nothing to mark.
      out.window.mark_finished(r.entry.cmd_id);
      continue;
    }
    r.entry.age_ms = static_cast<std::uint64_t>(std::max<std::int64_t>(newest - r.t, 0));
    out.window.restore(r.entry, now_ms);
  }
  out.records = records.size();
  return out;
}

}  // namespace fleetlink::agent
