// fleetlink-benchctl: the control-API load client of the benchmarks. It sends
// POST /v1/rigs/{rig}/commands over kept-alive HTTP/1.1 connections and measures,
// per command, the time from writing the request to learning that the rig's ACK
// has arrived back at the broker — observed by this same client:
//   --ack-via sse   one GET /v1/events stream; the "command_acked" event for the cmd_id
//   --ack-via wait  POST ...?wait=acked answered only once acked (if the broker supports it;
//                   a reply still "queued"/"sent" falls back to polling for that command)
//   --ack-via poll  GET /v1/commands/{id} on the same connection until state >= acked
// Modes: rtt (sequential, random rigs), pipeline (N in flight), fanout (one command
// to every rig, repeated). Prints one JSON object on stdout.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "http_head.hpp"
#include "stream_client.hpp"

namespace fb = fleetlink::bench;
using nlohmann::json;

namespace {

std::int64_t mono_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

enum class AckVia : std::uint8_t { sse, wait, poll };

struct Options {
  std::string control = "127.0.0.1:8080";
  std::string token;
  std::string mode = "rtt";
  std::string ack_via = "sse";
  std::string rig_prefix = "rig-";
  unsigned index_width = 5;
  unsigned start_index = 0;
  unsigned rig_count = 100;
  unsigned warmup = 200;
  unsigned count = 2000;
  unsigned inflight = 100;
  unsigned connections = 0;   // 0: as many as needed for `inflight` (sse: min(inflight, 16))
  unsigned repeat = 3;
  std::string kind = "noop";
  unsigned timeout_s = 120;
  std::uint64_t seed = 1;
};

enum class CmdState : std::uint8_t { pending, posting, posted, polling, acked, failed };

struct Cmd {
  unsigned rig = 0;
  std::int64_t t_send = 0;
  std::int64_t t_ack = 0;
  std::string cmd_id;
  CmdState state = CmdState::pending;
};

struct Conn {
  int fd = -1;
  std::string rx;
  std::string tx;
  long cmd = -1;             // the command whose request is outstanding
  bool busy = false;
};

class Client {
 public:
  explicit Client(Options o) : o_(std::move(o)) {}
  bool init();
  // Runs `rigs` as commands with at most `inflight` unacknowledged; true if all completed.
  bool run_batch(const std::vector<unsigned>& rigs, unsigned inflight, std::vector<Cmd>& out,
                 std::int64_t& wall_ns);
  // One POST /v1/commands to the target set "<rig prefix>*"; true when every rig's ACK is in.
  bool run_target_set(const std::vector<unsigned>& rigs, std::vector<Cmd>& out, std::int64_t& wall_ns);
  unsigned errors() const { return errors_; }
  std::string first_error() const { return first_error_; }
  std::uint64_t ack_fallbacks() const { return ack_fallbacks_; }

 private:
  int dial();
  bool open_sse();
  void send_post(Conn& c, long idx);
  void send_poll(Conn& c, long idx);
  void on_readable(Conn& c, bool is_sse);
  bool handle_response(Conn& c, int status, std::string_view body);
  void handle_target_set_response(int status, std::string_view body);
  std::string rig_name(unsigned rig) const;
  void mark_acked(long idx, std::int64_t t);
  void fail(long idx, const std::string& why);
  void write_out(Conn& c);
  void parse_sse();
  void pump(std::vector<epoll_event>& events);

  Options o_;
  AckVia via_ = AckVia::sse;
  sockaddr_in addr_{};
  int ep_ = -1;
  std::vector<Conn> conns_;
  Conn sse_;
  std::string sse_body_;       // de-chunked event stream text
  bool sse_chunked_ = false;
  bool sse_head_done_ = false;
  std::vector<Cmd>* cmds_ = nullptr;
  std::unordered_map<std::string, long> by_id_;
  std::unordered_map<std::string, std::int64_t> early_acks_;
  std::unordered_map<std::string, long> by_rig_;   // target-set mode: rig id -> command
  bool match_by_rig_ = false;  // target-set mode: ACK events matched by rig, not cmd_id
  unsigned in_flight_ = 0;
  unsigned done_ = 0;
  unsigned errors_ = 0;
  std::uint64_t ack_fallbacks_ = 0;
  std::string first_error_;
};

int Client::dial() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr_), sizeof addr_) != 0) {
    close(fd);
    return -1;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

bool Client::init() {
  if (o_.ack_via == "sse") via_ = AckVia::sse;
  else if (o_.ack_via == "wait") via_ = AckVia::wait;
  else if (o_.ack_via == "poll") via_ = AckVia::poll;
  else return false;
  const auto colon = o_.control.rfind(':');
  if (colon == std::string::npos) return false;
  addr_.sin_family = AF_INET;
  addr_.sin_port = htons(static_cast<std::uint16_t>(std::atoi(o_.control.c_str() + colon + 1)));
  if (inet_pton(AF_INET, o_.control.substr(0, colon).c_str(), &addr_.sin_addr) != 1) return false;
  ep_ = epoll_create1(EPOLL_CLOEXEC);
  unsigned n = o_.connections;
  if (n == 0) n = via_ == AckVia::sse ? std::min(o_.inflight, 16U) : o_.inflight;
  n = std::max(n, 1U);
  conns_.resize(n);
  for (unsigned k = 0; k < n; ++k) {
    conns_[k].fd = dial();
    if (conns_[k].fd < 0) {
      std::fprintf(stderr, "benchctl: cannot connect to %s\n", o_.control.c_str());
      return false;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = k;
    epoll_ctl(ep_, EPOLL_CTL_ADD, conns_[k].fd, &ev);
  }
  if (via_ == AckVia::sse) return open_sse();
  return true;
}

bool Client::open_sse() {
  sse_.fd = dial();
  if (sse_.fd < 0) return false;
  // Only the ACKs are read: the broker need not format the other events for us.
  std::string req = "GET /v1/events?types=command_acked HTTP/1.1\r\nHost: " + o_.control +
                    "\r\nAccept: text/event-stream\r\n";
  if (!o_.token.empty()) req += "Authorization: Bearer " + o_.token + "\r\n";
  req += "\r\n";
  if (send(sse_.fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<long>(req.size())) return false;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = 0xFFFFFFFFU;
  epoll_ctl(ep_, EPOLL_CTL_ADD, sse_.fd, &ev);
  // Wait for the response head so no event of the first command is missed.
  const std::int64_t deadline = mono_ns() + 5'000'000'000LL;
  while (!sse_head_done_ && mono_ns() < deadline) {
    char buf[4096];
    const long n = recv(sse_.fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    sse_.rx.append(buf, static_cast<std::size_t>(n));
    auto head = fb::parse_http_head(sse_.rx);
    if (!head) continue;
    if (head->status != 200) {
      std::fprintf(stderr, "benchctl: GET /v1/events answered %d\n", head->status);
      return false;
    }
    auto te = head->header("Transfer-Encoding");
    sse_chunked_ = te && te->find("chunked") != std::string_view::npos;
    sse_.rx.erase(0, head->head_bytes);
    sse_head_done_ = true;
  }
  const int fl = 1;
  (void)fl;
  return sse_head_done_;
}

void Client::write_out(Conn& c) {
  while (!c.tx.empty()) {
    const long n = send(c.fd, c.tx.data(), c.tx.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      fail(c.cmd, "send failed");
      return;
    }
    c.tx.erase(0, static_cast<std::size_t>(n));
  }
}

void Client::send_post(Conn& c, long idx) {
  Cmd& cmd = (*cmds_)[static_cast<std::size_t>(idx)];
  char rig[96];
  std::snprintf(rig, sizeof rig, "%s%0*u", o_.rig_prefix.c_str(), static_cast<int>(o_.index_width),
                o_.start_index + cmd.rig);
  const std::string body = "{\"kind\":\"" + o_.kind + "\",\"args\":{}}";
  c.tx = "POST /v1/rigs/" + std::string(rig) + "/commands" + (via_ == AckVia::wait ? "?wait=acked" : "") +
         " HTTP/1.1\r\nHost: " + o_.control + "\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n";
  if (!o_.token.empty()) c.tx += "Authorization: Bearer " + o_.token + "\r\n";
  c.tx += "\r\n" + body;
  c.cmd = idx;
  c.busy = true;
  cmd.state = CmdState::posting;
  cmd.t_send = mono_ns();
  ++in_flight_;
  write_out(c);
}

void Client::send_poll(Conn& c, long idx) {
  Cmd& cmd = (*cmds_)[static_cast<std::size_t>(idx)];
  c.tx = "GET /v1/commands/" + cmd.cmd_id + " HTTP/1.1\r\nHost: " + o_.control + "\r\n";
  if (!o_.token.empty()) c.tx += "Authorization: Bearer " + o_.token + "\r\n";
  c.tx += "\r\n";
  c.cmd = idx;
  c.busy = true;
  cmd.state = CmdState::polling;
  write_out(c);
}

void Client::mark_acked(long idx, std::int64_t t) {
  Cmd& cmd = (*cmds_)[static_cast<std::size_t>(idx)];
  if (cmd.state == CmdState::acked || cmd.state == CmdState::failed) return;
  cmd.state = CmdState::acked;
  cmd.t_ack = t;
  --in_flight_;
  ++done_;
}

void Client::fail(long idx, const std::string& why) {
  ++errors_;
  if (first_error_.empty()) first_error_ = why;
  if (idx < 0) return;
  Cmd& cmd = (*cmds_)[static_cast<std::size_t>(idx)];
  if (cmd.state == CmdState::acked || cmd.state == CmdState::failed) return;
  cmd.state = CmdState::failed;
  --in_flight_;
  ++done_;
}

constexpr long kTargetSetPost = -2;  // Conn::cmd of the one target-set request

bool acked_state(const std::string& s) { return s == "acked" || s == "running" || s == "done"; }

// True when the connection is free again.
bool Client::handle_response(Conn& c, int status, std::string_view body) {
  const std::int64_t t = mono_ns();
  const long idx = c.cmd;
  if (idx == kTargetSetPost) {
    handle_target_set_response(status, body);
    return true;
  }
  Cmd& cmd = (*cmds_)[static_cast<std::size_t>(idx)];
  json j = json::parse(body, nullptr, false);
  if (status < 200 || status >= 300 || j.is_discarded() || !j.is_object()) {
    fail(idx, "HTTP " + std::to_string(status) + " " + std::string(body.substr(0, 200)));
    return true;
  }
  const std::string state = j.value("state", "");
  if (cmd.state == CmdState::posting) {
    cmd.cmd_id = j.value("cmd_id", "");
    cmd.state = CmdState::posted;
    if (via_ == AckVia::sse) {
      by_id_[cmd.cmd_id] = idx;
      if (auto it = early_acks_.find(cmd.cmd_id); it != early_acks_.end()) {
        mark_acked(idx, it->second);
        early_acks_.erase(it);
      }
      return true;
    }
    if (acked_state(state)) {
      mark_acked(idx, t);
      return true;
    }
    if (via_ == AckVia::wait) ++ack_fallbacks_;
    send_poll(c, idx);
    return false;
  }
  // a poll answer
  if (acked_state(state)) {
    mark_acked(idx, t);
    return true;
  }
  if (state == "nacked" || state == "lost") {
    fail(idx, "command " + cmd.cmd_id + " " + state);
    return true;
  }
  send_poll(c, idx);
  return false;
}

void Client::on_readable(Conn& c, bool is_sse) {
  char buf[65536];
  const long n = recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    if (is_sse) {
      fail(-1, "event stream closed by the broker");
      close(c.fd);
      c.fd = -1;
      return;
    }
    fail(c.cmd, "control connection closed");
    epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
    close(c.fd);
    c.fd = dial();
    c.busy = false;
    c.rx.clear();
    if (c.fd >= 0) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u32 = static_cast<std::uint32_t>(&c - conns_.data());
      epoll_ctl(ep_, EPOLL_CTL_ADD, c.fd, &ev);
    }
    return;
  }
  if (n < 0) return;
  c.rx.append(buf, static_cast<std::size_t>(n));
  if (is_sse) {
    parse_sse();
    return;
  }
  for (;;) {
    auto head = fb::parse_http_head(c.rx);
    if (!head) return;
    std::string body;
    std::size_t used = 0;
    if (auto cl = head->header("Content-Length")) {
      const auto len = static_cast<std::size_t>(std::atoll(std::string(*cl).c_str()));
      if (c.rx.size() < head->head_bytes + len) return;
      body = c.rx.substr(head->head_bytes, len);
      used = head->head_bytes + len;
    } else if (auto te = head->header("Transfer-Encoding"); te && te->find("chunked") != std::string_view::npos) {
      std::size_t pos = head->head_bytes;
      bool complete = false;
      for (;;) {
        const std::size_t eol = c.rx.find("\r\n", pos);
        if (eol == std::string::npos) break;
        const std::size_t size = std::strtoul(c.rx.c_str() + pos, nullptr, 16);
        if (c.rx.size() < eol + 2 + size + 2) break;
        if (size == 0) {
          used = eol + 4;
          complete = true;
          break;
        }
        body.append(c.rx, eol + 2, size);
        pos = eol + 2 + size + 2;
      }
      if (!complete) return;
    } else {
      return;  // a body delimited by close: not used by the control API
    }
    c.rx.erase(0, used);
    if (c.busy && handle_response(c, head->status, body)) {
      c.busy = false;
      c.cmd = -1;
    }
    if (c.rx.empty()) return;
  }
}

void Client::parse_sse() {
  std::string& in = sse_.rx;
  if (sse_chunked_) {
    std::size_t pos = 0;
    for (;;) {
      const std::size_t eol = in.find("\r\n", pos);
      if (eol == std::string::npos) break;
      const std::size_t size = std::strtoul(in.c_str() + pos, nullptr, 16);
      if (in.size() < eol + 2 + size + 2) break;
      sse_body_.append(in, eol + 2, size);
      pos = eol + 2 + size + 2;
    }
    in.erase(0, pos);
  } else {
    sse_body_ += in;
    in.clear();
  }
  const std::int64_t t = mono_ns();
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = sse_body_.find("\n\n", start);
    if (end == std::string::npos) break;
    const std::string_view block(sse_body_.data() + start, end - start);
    start = end + 2;
    if (block.find("command_acked") == std::string_view::npos) continue;
    // The broker writes these fields plainly (ids need no escapes): found by
    // search rather than a JSON parse per event, so this client stays cheap.
    auto field = [&block](std::string_view key) -> std::string_view {
      const std::string pattern = "\"" + std::string(key) + "\":\"";
      const std::size_t at = block.find(pattern);
      if (at == std::string_view::npos) return {};
      const std::size_t begin = at + pattern.size();
      const std::size_t stop = block.find('"', begin);
      return stop == std::string_view::npos ? std::string_view() : block.substr(begin, stop - begin);
    };
    if (match_by_rig_) {
      // One command per rig in a round: the rig names it.
      if (auto it = by_rig_.find(std::string(field("rig_id"))); it != by_rig_.end()) mark_acked(it->second, t);
      continue;
    }
    const std::string id(field("cmd_id"));
    if (id.empty()) continue;
    if (auto it = by_id_.find(id); it != by_id_.end()) {
      mark_acked(it->second, t);
      by_id_.erase(it);
    } else {
      early_acks_.emplace(id, t);
    }
  }
  sse_body_.erase(0, start);
}

// One epoll wait (at most 100 ms) and the reads it reports.
void Client::pump(std::vector<epoll_event>& events) {
  const int n = epoll_wait(ep_, events.data(), static_cast<int>(events.size()), 100);
  for (int k = 0; k < n; ++k) {
    const std::uint32_t tag = events[static_cast<std::size_t>(k)].data.u32;
    if (tag == 0xFFFFFFFFU) {
      if (sse_.fd >= 0) on_readable(sse_, true);
    } else {
      on_readable(conns_[tag], false);
    }
  }
}

bool Client::run_batch(const std::vector<unsigned>& rigs, unsigned inflight, std::vector<Cmd>& out,
                       std::int64_t& wall_ns) {
  out.assign(rigs.size(), Cmd{});
  for (std::size_t k = 0; k < rigs.size(); ++k) out[k].rig = rigs[k];
  cmds_ = &out;
  by_id_.clear();
  early_acks_.clear();
  in_flight_ = 0;
  done_ = 0;
  std::size_t next = 0;
  const std::int64_t t0 = mono_ns();
  const std::int64_t deadline = t0 + static_cast<std::int64_t>(o_.timeout_s) * 1'000'000'000LL;
  std::vector<epoll_event> events(256);
  while (done_ < out.size()) {
    for (Conn& c : conns_) {
      if (next >= out.size() || in_flight_ >= inflight) break;
      if (c.busy || c.fd < 0) continue;
      send_post(c, static_cast<long>(next++));
    }
    if (mono_ns() > deadline) break;
    pump(events);
    if (via_ == AckVia::sse && sse_.fd < 0 && in_flight_ > 0) break;
  }
  wall_ns = mono_ns() - t0;
  return done_ == out.size();
}

std::string Client::rig_name(unsigned rig) const {
  char name[96];
  std::snprintf(name, sizeof name, "%s%0*u", o_.rig_prefix.c_str(), static_cast<int>(o_.index_width),
                o_.start_index + rig);
  return name;
}

// The batch answer (asked without its 20,000-entry rig list: ?rigs=false) says
// how many commands were dispatched; their ACKs are matched by rig (parse_sse).
void Client::handle_target_set_response(int status, std::string_view body) {
  json j = json::parse(body, nullptr, false);
  if (status != 202 || j.is_discarded() || !j.contains("counts")) {
    fail(-1, "target-set POST: HTTP " + std::to_string(status) + " " + std::string(body.substr(0, 200)));
    for (const auto& [rig, idx] : by_rig_) fail(idx, "target-set POST refused");  // ends the round
    return;
  }
  const std::size_t dispatched = j["counts"].value("dispatched", std::size_t{0});
  if (dispatched != by_rig_.size()) {
    fail(-1, "target-set POST: " + std::to_string(dispatched) + " of " + std::to_string(by_rig_.size()) +
                 " rigs dispatched: " + std::string(body.substr(0, 300)));
  }
}

bool Client::run_target_set(const std::vector<unsigned>& rigs, std::vector<Cmd>& out, std::int64_t& wall_ns) {
  out.assign(rigs.size(), Cmd{});
  cmds_ = &out;
  by_id_.clear();
  early_acks_.clear();
  by_rig_.clear();
  match_by_rig_ = true;
  for (std::size_t k = 0; k < rigs.size(); ++k) {
    out[k].rig = rigs[k];
    out[k].state = CmdState::posted;
    by_rig_[rig_name(rigs[k])] = static_cast<long>(k);
  }
  in_flight_ = static_cast<unsigned>(rigs.size());
  done_ = 0;
  Conn& c = conns_.front();
  const std::string body = "{\"kind\":\"" + o_.kind + "\",\"args\":{},\"targets\":{\"glob\":\"" +
                           o_.rig_prefix + "*\"}}";
  c.tx = "POST /v1/commands?rigs=false HTTP/1.1\r\nHost: " + o_.control +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  if (!o_.token.empty()) c.tx += "Authorization: Bearer " + o_.token + "\r\n";
  c.tx += "\r\n" + body;
  c.cmd = kTargetSetPost;
  c.busy = true;
  const std::int64_t t0 = mono_ns();
  for (Cmd& cmd : out) cmd.t_send = t0;
  write_out(c);
  const std::int64_t deadline = t0 + static_cast<std::int64_t>(o_.timeout_s) * 1'000'000'000LL;
  std::vector<epoll_event> events(256);
  while (done_ < out.size() && mono_ns() <= deadline) {
    pump(events);
    if (sse_.fd < 0) break;
  }
  wall_ns = mono_ns() - t0;
  return done_ == out.size();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto k = static_cast<std::size_t>(std::min<double>(static_cast<double>(v.size() - 1),
                                                           p / 100.0 * static_cast<double>(v.size() - 1) + 0.5));
  return v[k];
}

json latency_summary(const std::vector<Cmd>& cmds, std::size_t skip) {
  std::vector<double> ms;
  for (std::size_t k = skip; k < cmds.size(); ++k) {
    if (cmds[k].state == CmdState::acked) ms.push_back(static_cast<double>(cmds[k].t_ack - cmds[k].t_send) / 1e6);
  }
  json j;
  j["counted"] = ms.size();
  j["p50_ms"] = percentile(ms, 50);
  j["p99_ms"] = percentile(ms, 99);
  j["max_ms"] = ms.empty() ? 0.0 : *std::max_element(ms.begin(), ms.end());
  double sum = 0;
  for (double x : ms) sum += x;
  j["mean_ms"] = ms.empty() ? 0.0 : sum / static_cast<double>(ms.size());
  return j;
}

// Commands per second over the counted part: from the first counted send to the last ACK.
double throughput(const std::vector<Cmd>& cmds, std::size_t skip, std::size_t counted) {
  std::int64_t first = INT64_MAX, last = 0;
  for (std::size_t k = skip; k < cmds.size(); ++k) {
    first = std::min(first, cmds[k].t_send);
    last = std::max(last, cmds[k].t_ack);
  }
  const double secs = last > first ? static_cast<double>(last - first) / 1e9 : 0;
  return secs > 0 ? static_cast<double>(counted) / secs : 0.0;
}

// --ack-via stream: the rtt and pipeline modes over the control stream
// (GET /v1/stream): each command a JSON line, its ACK an "acked" line on the same
// socket; commands ready together leave in one frame.
int run_stream_mode(const Options& o) {
  if (o.mode != "rtt" && o.mode != "pipeline") {
    std::fprintf(stderr, "benchctl: --ack-via stream supports --mode rtt and pipeline\n");
    return 2;
  }
  fleetlink::bench::StreamClient stream(o.control, o.token);
  std::string error;
  if (!stream.connect(error)) {
    std::printf("{\"error\":\"%s\"}\n", error.c_str());
    return 2;
  }
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<unsigned> pick(0, o.rig_count - 1);
  const bool rtt = o.mode == "rtt";
  const std::size_t total = rtt ? o.warmup + o.count : o.count;
  char name[96];
  std::vector<fleetlink::bench::StreamCommand> sc(total);
  std::vector<Cmd> cmds(total);
  for (std::size_t k = 0; k < total; ++k) {
    cmds[k].rig = pick(rng);
    std::snprintf(name, sizeof name, "%s%0*u", o.rig_prefix.c_str(), static_cast<int>(o.index_width),
                  o.start_index + cmds[k].rig);
    sc[k].rig_id = name;
  }
  const double cpu0 = cpu_seconds();
  const bool ok = stream.run(sc, rtt ? 1U : o.inflight, o.kind, o.timeout_s, error);
  for (std::size_t k = 0; k < total; ++k) {
    cmds[k].t_send = sc[k].t_send;
    cmds[k].t_ack = sc[k].t_ack;
    cmds[k].state = sc[k].acked ? CmdState::acked : CmdState::failed;
  }
  json result;
  result["mode"] = o.mode;
  result["ack_via"] = o.ack_via;
  result["rig_count"] = o.rig_count;
  result.update(latency_summary(cmds, o.warmup));
  result["sent"] = total;
  if (!rtt) {
    result["cmds_per_s"] = throughput(cmds, o.warmup, result["counted"].get<std::size_t>());
    result["inflight"] = o.inflight;
  }
  result["complete"] = ok;
  result["errors"] = ok ? 0 : 1;
  result["first_error"] = error;
  result["ack_fallbacks"] = 0;
  result["cpu_s"] = cpu_seconds() - cpu0;
  std::printf("%s\n", result.dump().c_str());
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"fleetlink-benchctl: control-API load client for the benchmarks"};
  app.add_option("--control", o.control, "HOST:PORT of the broker's control API");
  app.add_option("--token", o.token, "bearer token");
  app.add_option("--mode", o.mode, "rtt | pipeline | fanout (a POST per rig) | fanout-set (one target-set POST)");
  app.add_option("--ack-via", o.ack_via, "sse | wait | poll | stream (GET /v1/stream; rtt and pipeline)");
  app.add_option("--rig-prefix", o.rig_prefix);
  app.add_option("--index-width", o.index_width);
  app.add_option("--start-index", o.start_index);
  app.add_option("--rig-count", o.rig_count, "rigs connected: ids prefix + start..start+count-1");
  app.add_option("--warmup", o.warmup, "rtt: commands not counted first; pipeline: first N not counted");
  app.add_option("--count", o.count, "rtt: counted commands; pipeline: total sent");
  app.add_option("--inflight", o.inflight, "pipeline/fanout: commands in flight");
  app.add_option("--connections", o.connections, "HTTP connections (0 = automatic)");
  app.add_option("--repeat", o.repeat, "fanout: rounds (the median is reported)");
  app.add_option("--kind", o.kind, "command kind");
  app.add_option("--timeout-s", o.timeout_s, "give up a batch after this long");
  app.add_option("--seed", o.seed);
  CLI11_PARSE(app, argc, argv);

  if (o.ack_via == "stream") return run_stream_mode(o);
  Client client(o);
  if (!client.init()) {
    std::printf("{\"error\":\"init failed\"}\n");
    return 2;
  }
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<unsigned> pick(0, o.rig_count - 1);
  json result;
  result["mode"] = o.mode;
  result["ack_via"] = o.ack_via;
  result["rig_count"] = o.rig_count;
  const double cpu0 = cpu_seconds();
  bool ok = true;
  std::vector<Cmd> cmds;
  std::int64_t wall = 0;
  if (o.mode == "rtt") {
    std::vector<unsigned> rigs(o.warmup + o.count);
    for (auto& r : rigs) r = pick(rng);
    ok = client.run_batch(rigs, 1, cmds, wall);
    result.update(latency_summary(cmds, o.warmup));
    result["sent"] = rigs.size();
  } else if (o.mode == "pipeline") {
    std::vector<unsigned> rigs(o.count);
    for (auto& r : rigs) r = pick(rng);
    ok = client.run_batch(rigs, o.inflight, cmds, wall);
    result.update(latency_summary(cmds, o.warmup));
    // Throughput over the counted part: from the first counted send to the last ack.
    result["cmds_per_s"] = throughput(cmds, o.warmup, result["counted"].get<std::size_t>());
    result["sent"] = rigs.size();
    result["inflight"] = o.inflight;
  } else if (o.mode == "fanout-set") {
    if (o.ack_via != "sse") {
      std::fprintf(stderr, "benchctl: --mode fanout-set needs --ack-via sse\n");
      return 2;
    }
    std::vector<unsigned> rigs(o.rig_count);
    for (unsigned k = 0; k < o.rig_count; ++k) rigs[k] = k;
    std::vector<double> rounds;
    for (unsigned r = 0; r < o.repeat && ok; ++r) {
      ok = client.run_target_set(rigs, cmds, wall);
      rounds.push_back(static_cast<double>(wall) / 1e9);
    }
    result["rounds_s"] = rounds;
    std::vector<double> sorted = rounds;
    std::sort(sorted.begin(), sorted.end());
    result["median_s"] = sorted.empty() ? 0.0 : sorted[sorted.size() / 2];
  } else if (o.mode == "fanout") {
    std::vector<unsigned> rigs(o.rig_count);
    for (unsigned k = 0; k < o.rig_count; ++k) rigs[k] = k;
    std::vector<double> rounds;
    for (unsigned r = 0; r < o.repeat && ok; ++r) {
      ok = client.run_batch(rigs, o.inflight, cmds, wall);
      rounds.push_back(static_cast<double>(wall) / 1e9);
    }
    result["rounds_s"] = rounds;
    std::vector<double> sorted = rounds;
    std::sort(sorted.begin(), sorted.end());
    result["median_s"] = sorted.empty() ? 0.0 : sorted[sorted.size() / 2];
    result["inflight"] = o.inflight;
  } else {
    std::fprintf(stderr, "benchctl: unknown --mode %s\n", o.mode.c_str());
    return 2;
  }
  result["complete"] = ok;
  result["errors"] = client.errors();
  result["first_error"] = client.first_error();
  result["ack_fallbacks"] = client.ack_fallbacks();
  result["cpu_s"] = cpu_seconds() - cpu0;
  std::printf("%s\n", result.dump().c_str());
  return ok ? 0 : 1;
}
