// UUIDv7 (RFC 9562 section 5.7) with the "fixed-length dedicated counter" method
// (section 6.2, method 1): rand_a (12 bits) is a counter inside one millisecond,
// seeded with a random value in its lower half so a burst of ids cannot overflow it
// soon; if it still overflows, the timestamp is advanced by one ms. The rest (rand_b,
// 62 bits) comes from the kernel CSPRNG. A mutex makes the generator thread-safe and
// keeps ids made in one process strictly increasing, even if the wall clock steps back.
#include "fleetlink/uuid.hpp"

#include <pthread.h>
#include <sys/random.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <stdexcept>

namespace fleetlink {
namespace {

void fill_random(std::uint8_t* out, std::size_t n) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = ::getrandom(out + done, n - done, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      // getrandom cannot fail on Linux >= 3.17 once the pool is initialised; if it
      // ever does, a predictable id would be a silent bug, so refuse loudly.
      throw std::runtime_error(std::string("getrandom failed: ") + std::strerror(errno));
    }
    done += static_cast<std::size_t>(got);
  }
}

// Bumped in every child process right after fork(): a pool filled before the
// fork is never used after it.
std::atomic<std::uint64_t>& fork_generation() {
  static std::atomic<std::uint64_t> generation{0};
  static const bool registered = [] {
    ::pthread_atfork(nullptr, nullptr, [] { fork_generation().fetch_add(1, std::memory_order_relaxed); });
    return true;
  }();
  (void)registered;
  return generation;
}

class Generator {
 public:
  // follow_clock_back: false for the real clock (stay monotonic if it steps back),
  // true for uuid_v7_at (tests want the timestamp they pass, unless the same
  // millisecond is asked for more than 4096 times).
  Uuid next(std::uint64_t now_ms, bool follow_clock_back) {
    std::lock_guard lock(mu_);
    std::uint8_t rnd[10];
    take_random(rnd, sizeof rnd);
    const bool stepped_back = follow_clock_back && now_ms < last_request_ms_;
    last_request_ms_ = now_ms;
    if (now_ms > last_ms_ || stepped_back || !started_) {
      last_ms_ = now_ms;
      // Random start in [0, 2048): leaves at least 2048 ids in this millisecond.
      counter_ = static_cast<std::uint16_t>(((rnd[0] << 8) | rnd[1]) & 0x07FF);
      started_ = true;
    } else if (++counter_ > 0x0FFF) {
      ++last_ms_;  // counter exhausted: borrow the next millisecond
      counter_ = static_cast<std::uint16_t>(((rnd[0] << 8) | rnd[1]) & 0x07FF);
    }
    Uuid u;
    const std::uint64_t ms = last_ms_ & 0xFFFF'FFFF'FFFFULL;
    for (int i = 0; i < 6; ++i) {
      u.bytes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(ms >> (8 * (5 - i)));
    }
    u.bytes[6] = static_cast<std::uint8_t>(0x70 | ((counter_ >> 8) & 0x0F));  // version 7
    u.bytes[7] = static_cast<std::uint8_t>(counter_ & 0xFF);
    u.bytes[8] = static_cast<std::uint8_t>(0x80 | (rnd[2] & 0x3F));          // variant 10
    for (std::size_t i = 9; i < 16; ++i) u.bytes[i] = rnd[i - 6];
    return u;
  }

 private:
  // The kernel's random bytes, fetched a pool at a time: a broker fanning a
  // command out to 20,000 rigs makes 20,000 ids in a row, and one getrandom()
  // per id was a syscall per command. Refilled after fork() so a child never
  // repeats its parent's bytes.
  void take_random(std::uint8_t* out, std::size_t n) {
    // (getpid() is a system call too: the fork check is a counter that a
    // pthread_atfork child handler bumps.)
    const std::uint64_t generation = fork_generation().load(std::memory_order_relaxed);
    if (pool_pos_ + n > sizeof pool_ || pool_generation_ != generation) {
      fill_random(pool_, sizeof pool_);
      pool_pos_ = 0;
      pool_generation_ = generation;
    }
    std::memcpy(out, pool_ + pool_pos_, n);
    std::memset(pool_ + pool_pos_, 0, n);  // used bytes do not linger in memory
    pool_pos_ += n;
  }

  std::mutex mu_;
  std::uint8_t pool_[1024] = {};
  std::size_t pool_pos_ = sizeof pool_;
  std::uint64_t pool_generation_ = 0;
  std::uint64_t last_ms_ = 0;          // timestamp of the last id (may run ahead of the clock)
  std::uint64_t last_request_ms_ = 0;  // clock reading given for the last id
  std::uint16_t counter_ = 0;
  bool started_ = false;
};

Generator& clock_generator() {
  static Generator g;
  return g;
}

Generator& explicit_generator() {
  static Generator g;
  return g;
}

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string Uuid::to_string() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(36);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s.push_back('-');
    s.push_back(kHex[bytes[i] >> 4]);
    s.push_back(kHex[bytes[i] & 0x0F]);
  }
  return s;
}

std::uint64_t Uuid::unix_ms() const noexcept {
  std::uint64_t ms = 0;
  for (std::size_t i = 0; i < 6; ++i) ms = (ms << 8) | bytes[i];
  return ms;
}

unsigned Uuid::version() const noexcept { return bytes[6] >> 4; }

Uuid uuid_v7() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now).count();
  return clock_generator().next(static_cast<std::uint64_t>(ms), false);
}

Uuid uuid_v7_at(std::uint64_t unix_ms) { return explicit_generator().next(unix_ms, true); }

std::optional<Uuid> parse_uuid(std::string_view text) noexcept {
  if (text.size() != 36) return std::nullopt;
  Uuid u;
  std::size_t byte = 0;
  for (std::size_t i = 0; i < 36;) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (text[i] != '-') return std::nullopt;
      ++i;
      continue;
    }
    const int hi = hex_value(text[i]);
    const int lo = hex_value(text[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    u.bytes[byte++] = static_cast<std::uint8_t>((hi << 4) | lo);
    i += 2;
  }
  return u;
}

bool is_uuid_v7(std::string_view text) noexcept {
  const auto u = parse_uuid(text);
  return u && u->version() == 7 && (u->bytes[8] & 0xC0) == 0x80;
}

}  // namespace fleetlink
