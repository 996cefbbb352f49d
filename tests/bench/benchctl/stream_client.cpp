#include "stream_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <span>
#include <string_view>

#include "ws_frame.hpp"

namespace fleetlink::bench {

namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The value of "key":"…" in a line the broker wrote (no escapes in the fields read here).
std::string_view string_field(std::string_view line, std::string_view key) {
  std::string pattern = "\"";
  pattern += key;
  pattern += "\":\"";
  const std::size_t at = line.find(pattern);
  if (at == std::string_view::npos) return {};
  const std::size_t begin = at + pattern.size();
  const std::size_t end = line.find('"', begin);
  return end == std::string_view::npos ? std::string_view() : line.substr(begin, end - begin);
}

}  // namespace

StreamClient::~StreamClient() {
  if (fd_ >= 0) close(fd_);
}

bool StreamClient::send_all(const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

bool StreamClient::read_some(int timeout_ms, std::string& error) {
  pollfd p{fd_, POLLIN, 0};
  const int r = poll(&p, 1, timeout_ms);
  if (r < 0 && errno != EINTR) {
    error = std::string("poll: ") + std::strerror(errno);
    return false;
  }
  if (r <= 0) return true;  // nothing yet
  char buf[65536];
  const ssize_t n = recv(fd_, buf, sizeof buf, 0);
  if (n == 0) {
    error = "the broker closed the stream";
    return false;
  }
  if (n < 0) {
    if (errno == EINTR || errno == EAGAIN) return true;
    error = std::string("recv: ") + std::strerror(errno);
    return false;
  }
  rx_.append(buf, static_cast<std::size_t>(n));
  return true;
}

bool StreamClient::connect(std::string& error) {
  const auto colon = control_.rfind(':');
  if (colon == std::string::npos) {
    error = "--control must be HOST:PORT";
    return false;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::atoi(control_.c_str() + colon + 1)));
  if (inet_pton(AF_INET, control_.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    error = "bad control address " + control_;
    return false;
  }
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0 || ::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    error = "cannot connect to " + control_;
    return false;
  }
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::string req = "GET /v1/stream HTTP/1.1\r\nHost: " + control_ +
                    "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                    "Sec-WebSocket-Protocol: fleetlink-stream\r\nSec-WebSocket-Key: " +
                    websocket_key_base64(0x0123456789abcdefULL, static_cast<std::uint64_t>(now_ns())) + "\r\n";
  if (!token_.empty()) req += "Authorization: Bearer " + token_ + "\r\n";
  req += "\r\n";
  if (!send_all(req)) {
    error = "cannot send the upgrade request";
    return false;
  }
  const std::int64_t deadline = now_ns() + 10'000'000'000LL;
  std::size_t end = std::string::npos;
  while ((end = rx_.find("\r\n\r\n")) == std::string::npos) {
    if (now_ns() > deadline) {
      error = "no answer to the upgrade request";
      return false;
    }
    if (!read_some(100, error)) return false;
  }
  if (rx_.compare(0, 12, "HTTP/1.1 101") != 0) {
    error = "upgrade refused: " + rx_.substr(0, rx_.find("\r\n"));
    return false;
  }
  rx_.erase(0, end + 4);
  return true;
}

bool StreamClient::parse_frames(std::vector<StreamCommand>& cmds, unsigned& in_flight, std::size_t& acked,
                                std::string& error) {
  for (;;) {
    const std::optional<WsFrameHeader> h = parse_frame_header(rx_);
    if (!h || rx_.size() < h->header_bytes + h->payload_bytes) return true;
    std::string payload = rx_.substr(h->header_bytes, static_cast<std::size_t>(h->payload_bytes));
    rx_.erase(0, h->header_bytes + static_cast<std::size_t>(h->payload_bytes));
    unmask(std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(payload.data()), payload.size()), h->mask);
    if (h->opcode == WsOpcode::ping) {
      std::string pong;
      append_client_frame(pong, WsOpcode::pong,
                          std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(payload.data()),
                                                        payload.size()),
                          static_cast<std::uint32_t>(mask_state_ >> 32));
      if (!send_all(pong)) {
        error = "cannot answer a ping";
        return false;
      }
      continue;
    }
    if (h->opcode == WsOpcode::close) {
      error = "the broker closed the stream";
      return false;
    }
    if (h->opcode != WsOpcode::text) continue;
    std::string_view rest(payload);
    while (!rest.empty()) {
      const std::size_t nl = rest.find('\n');
      const std::string_view line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      if (line.empty()) continue;
      const std::string_view op = string_field(line, "op");
      if (op == "queued") continue;
      const std::string_view ref = string_field(line, "ref");
      std::size_t idx = 0;
      const auto res = std::from_chars(ref.data(), ref.data() + ref.size(), idx);
      if (res.ec != std::errc{} || idx >= cmds.size()) {
        error = "unexpected answer: " + std::string(line.substr(0, 200));
        return false;
      }
      if (op == "acked") {
        if (!cmds[idx].acked) {
          cmds[idx].acked = true;
          cmds[idx].t_ack = now_ns();
          --in_flight;
          ++acked;
        }
        continue;
      }
      error = "command " + std::to_string(idx) + " to " + cmds[idx].rig_id + ": " + std::string(line.substr(0, 300));
      return false;
    }
  }
}

bool StreamClient::run(std::vector<StreamCommand>& cmds, unsigned inflight, const std::string& kind, int timeout_s,
                       std::string& error) {
  const std::int64_t deadline = now_ns() + static_cast<std::int64_t>(timeout_s) * 1'000'000'000LL;
  std::size_t next = 0;
  std::size_t acked = 0;
  unsigned in_flight = 0;
  std::string lines;
  std::string frame;
  while (acked < cmds.size()) {
    // Everything the window allows, in one frame.
    lines.clear();
    const std::size_t first = next;
    while (next < cmds.size() && in_flight < inflight) {
      lines += "{\"op\":\"send\",\"ref\":\"" + std::to_string(next) + "\",\"rig_id\":\"" + cmds[next].rig_id +
               "\",\"kind\":\"" + kind + "\",\"notify\":\"acked\"}\n";
      ++next;
      ++in_flight;
    }
    if (!lines.empty()) {
      frame.clear();
      mask_state_ ^= mask_state_ << 13;
      mask_state_ ^= mask_state_ >> 7;
      mask_state_ ^= mask_state_ << 17;
      append_client_frame(frame, WsOpcode::text,
                          std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(lines.data()),
                                                        lines.size()),
                          static_cast<std::uint32_t>(mask_state_));
      const std::int64_t t = now_ns();
      for (std::size_t k = first; k < next; ++k) cmds[k].t_send = t;
      if (!send_all(frame)) {
        error = "cannot write to the stream";
        return false;
      }
    }
    if (now_ns() > deadline) {
      error = "timed out with " + std::to_string(cmds.size() - acked) + " commands not acknowledged";
      return false;
    }
    if (!read_some(100, error)) return false;
    if (!parse_frames(cmds, in_flight, acked, error)) return false;
  }
  return true;
}

}  // namespace fleetlink::bench
