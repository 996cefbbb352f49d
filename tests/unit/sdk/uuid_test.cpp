// UUIDv7: layout bits, text form, timestamp and ordering.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fleetlink/uuid.hpp"

using namespace fleetlink;

namespace {
std::uint64_t now_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}
}  // namespace

TEST_CASE("version and variant bits") {
  for (int i = 0; i < 1000; ++i) {
    const Uuid u = uuid_v7();
    CHECK(u.version() == 7);
    CHECK((u.bytes[6] >> 4) == 7);
    CHECK((u.bytes[8] & 0xC0) == 0x80);
  }
}

TEST_CASE("canonical 36-character lowercase text") {
  const std::string s = uuid_v7().to_string();
  REQUIRE(s.size() == 36);
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      CHECK(s[i] == '-');
    } else {
      const bool hex = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f');
      CHECK(hex);
    }
  }
  CHECK(s[14] == '7');
  CHECK(is_uuid_v7(s));
}

TEST_CASE("timestamp is the clock's millisecond") {
  const Uuid fixed = uuid_v7_at(1764448306123ULL);
  CHECK(fixed.unix_ms() == 1764448306123ULL);
  CHECK(fixed.to_string().substr(0, 13) == "019ad150-83cb");  // 0x019ad15083cb
  // A burst of more than ~2048 ids in one millisecond (another test) makes the generator
  // borrow the next milliseconds; give the clock time to catch up first.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::uint64_t before = now_ms();
  const Uuid u = uuid_v7();
  const std::uint64_t after = now_ms();
  CHECK(u.unix_ms() >= before);
  CHECK(u.unix_ms() <= after + 1);  // +1: the counter may borrow the next millisecond
}

TEST_CASE("text order equals creation order for 100k ids") {
  std::string prev = uuid_v7().to_string();
  std::set<std::string> seen;
  bool ordered = true;
  for (int i = 0; i < 100000; ++i) {
    std::string s = uuid_v7().to_string();
    if (!(prev < s)) ordered = false;
    seen.insert(s);
    prev = std::move(s);
  }
  CHECK(ordered);
  CHECK(seen.size() == 100000);
}

TEST_CASE("ids made in the same explicit millisecond still sort") {
  Uuid prev = uuid_v7_at(5000);
  for (int i = 0; i < 10000; ++i) {  // more than the 12-bit counter holds
    const Uuid u = uuid_v7_at(5000);
    CHECK(prev < u);
    CHECK(prev.to_string() < u.to_string());
    prev = u;
  }
}

TEST_CASE("monotonic across threads") {
  std::vector<std::vector<Uuid>> per_thread(4);
  std::vector<std::thread> threads;
  for (auto& out : per_thread) {
    threads.emplace_back([&out] {
      for (int i = 0; i < 5000; ++i) out.push_back(uuid_v7());
    });
  }
  for (auto& t : threads) t.join();
  std::set<Uuid> all;
  for (const auto& ids : per_thread) {
    for (std::size_t i = 1; i < ids.size(); ++i) CHECK(ids[i - 1] < ids[i]);
    all.insert(ids.begin(), ids.end());
  }
  CHECK(all.size() == 20000);
}

TEST_CASE("parse round trip and refusals") {
  const Uuid u = uuid_v7();
  const auto back = parse_uuid(u.to_string());
  REQUIRE(back);
  CHECK(*back == u);
  CHECK(parse_uuid("01936D3C-5E2A-7B3C-8D4E-1F2A3B4C5D6E"));  // upper case accepted
  CHECK_FALSE(parse_uuid(""));
  CHECK_FALSE(parse_uuid("01936d3c5e2a7b3c8d4e1f2a3b4c5d6e"));       // no dashes
  CHECK_FALSE(parse_uuid("01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6"));    // short
  CHECK_FALSE(parse_uuid("01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6e0"));  // long
  CHECK_FALSE(parse_uuid("01936d3g-5e2a-7b3c-8d4e-1f2a3b4c5d6e"));   // not hex
  CHECK_FALSE(parse_uuid("01936d3c-5e2a-7b3c-8d4e+1f2a3b4c5d6e"));   // wrong separator
  CHECK_FALSE(is_uuid_v7("01936d3c-5e2a-4b3c-8d4e-1f2a3b4c5d6e"));   // version 4
  CHECK_FALSE(is_uuid_v7("01936d3c-5e2a-7b3c-cd4e-1f2a3b4c5d6e"));   // variant 110
}

TEST_CASE("uuid_v7: a forked child does not repeat its parent's random bits") {
  // The generator keeps a pool of random bytes; a child must refill it.
  (void)uuid_v7();  // the parent's pool is now filled
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const Uuid child = uuid_v7();
    const ssize_t w = ::write(fds[1], child.bytes.data(), child.bytes.size());
    ::_exit(w == static_cast<ssize_t>(child.bytes.size()) ? 0 : 1);
  }
  const Uuid parent = uuid_v7();
  Uuid child{};
  REQUIRE(::read(fds[0], child.bytes.data(), child.bytes.size()) == static_cast<ssize_t>(child.bytes.size()));
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(fds[0]);
  ::close(fds[1]);
  // rand_b: bytes 9..15 (byte 8 holds the variant and 6 random bits).
  CHECK(std::memcmp(parent.bytes.data() + 9, child.bytes.data() + 9, 7) != 0);
}
