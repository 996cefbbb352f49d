// TLS session-ticket key file handling and ticket validity (tls_tuning.hpp).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "net/tls_tickets.hpp"

using fleetlink::broker::kTicketKeyBytes;
using fleetlink::broker::load_or_create_ticket_key;
using fleetlink::broker::parse_ticket_key;
using fleetlink::broker::ticket_needs_renewal;
using fleetlink::broker::ticket_usable;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/fleetlink-ticket-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ignored;  // best effort: a leftover temp dir fails no test
    std::filesystem::remove_all(path, ignored);
  }
};

unsigned mode_of(const std::string& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 0777U;
}

}  // namespace

TEST_CASE("ticket key: exactly 80 bytes") {
  CHECK(parse_ticket_key(std::string(kTicketKeyBytes, 'k'), "f"));
  auto short_key = parse_ticket_key(std::string(79, 'k'), "f");
  REQUIRE_FALSE(short_key);
  CHECK(short_key.error().detail.find("expected exactly 80") != std::string::npos);
  CHECK_FALSE(parse_ticket_key(std::string(81, 'k'), "f"));
  CHECK_FALSE(parse_ticket_key("", "f"));
}

TEST_CASE("ticket key file: made 0600 with random bytes when missing, then read back unchanged") {
  TempDir dir;
  const std::string file = dir.path + "/ticket.key";
  auto made = load_or_create_ticket_key(file);
  REQUIRE(made);
  CHECK(mode_of(file) == 0600U);
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK(static_cast<std::size_t>(st.st_size) == kTicketKeyBytes);
  auto again = load_or_create_ticket_key(file);
  REQUIRE(again);
  CHECK(*again == *made);   // the same key after a restart: tickets stay valid

  TempDir other;
  auto different = load_or_create_ticket_key(other.path + "/ticket.key");
  REQUIRE(different);
  CHECK(*different != *made);   // random, not a fixed default
}

TEST_CASE("ticket key file: refused when others may read it, or of the wrong size") {
  TempDir dir;
  const std::string file = dir.path + "/ticket.key";
  REQUIRE(load_or_create_ticket_key(file));
  REQUIRE(::chmod(file.c_str(), 0644) == 0);
  auto open_to_all = load_or_create_ticket_key(file);
  REQUIRE_FALSE(open_to_all);
  CHECK(open_to_all.error().detail.find("chmod 600") != std::string::npos);

  const std::string bad = dir.path + "/bad.key";
  {
    std::ofstream out(bad, std::ios::binary);
    out << "too short";
  }
  REQUIRE(::chmod(bad.c_str(), 0600) == 0);
  CHECK_FALSE(load_or_create_ticket_key(bad));
  CHECK_FALSE(load_or_create_ticket_key(dir.path + "/no/such/dir/ticket.key"));
}

TEST_CASE("ticket validity: lifetime, certificate expiry, clock steps") {
  const std::time_t now = 1'800'000'000;
  const std::time_t cert_ok = now + 86400 * 100;
  CHECK(ticket_usable(now - 10, now, 86400, cert_ok));
  CHECK(ticket_usable(now - 86400, now, 86400, cert_ok));
  CHECK_FALSE(ticket_usable(now - 86401, now, 86400, cert_ok));   // older than the lifetime
  CHECK_FALSE(ticket_usable(now - 10, now, 86400, now - 1));      // its certificate expired since
  CHECK_FALSE(ticket_usable(now - 10, now, 86400, 0));            // no certificate in the ticket
  CHECK(ticket_usable(now + 30, now, 86400, cert_ok));            // small clock difference
  CHECK_FALSE(ticket_usable(now + 3600, now, 86400, cert_ok));    // issued "in the future"
}

TEST_CASE("ticket renewal: a resumed session keeps a young ticket, renews one past half its lifetime") {
  const std::time_t now = 1'800'000'000;
  CHECK_FALSE(ticket_needs_renewal(now, now, 86400));
  CHECK_FALSE(ticket_needs_renewal(now - 43199, now, 86400));
  CHECK(ticket_needs_renewal(now - 43200, now, 86400));
  CHECK(ticket_needs_renewal(now - 86400, now, 86400));
}
