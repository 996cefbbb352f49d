// The operators file (app/operators.hpp): its format, every malformed line named
// by file and line, the SHA-256 of tokens, and finding the operator of a token.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

#include "app/operators.hpp"

using namespace fleetlink::broker;

namespace {

const std::string kTestHash = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";  // "test"

std::string one_error(std::string_view text) {
  const OperatorsParse p = parse_operators(text, "ops.txt");
  REQUIRE(p.errors.size() == 1);
  return p.errors[0];
}

}  // namespace

TEST_CASE("operators: the hash of a token is its SHA-256, as the file writes it") {
  CHECK(token_hash_text("test") == kTestHash);
  CHECK(token_hash_text("") == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(token_hash_text("test ") != kTestHash);
}

TEST_CASE("operators: a file with comments, blank lines, tabs and CRLF") {
  const std::string text = "# name role hash\n"
                           "\n"
                           "   \t \n"
                           "alice operator " + kTestHash + "\r\n"
                           "grafana\tviewer\t" + token_hash_text("view") + "   # dashboards\n"
                           "ci-bot@lab.1_x  OPERATOR_NOT  " + token_hash_text("x") + "\n";
  // The last line's role is wrong: only that line is refused.
  const OperatorsParse p = parse_operators(text, "ops.txt");
  REQUIRE(p.errors.size() == 1);
  CHECK(p.errors[0] == "ops.txt:6: role 'OPERATOR_NOT' is not viewer or operator");
  REQUIRE(p.table.entries().size() == 2);
  CHECK(p.table.entries()[0].name == "alice");
  CHECK(p.table.entries()[0].role == Role::operator_);
  CHECK(p.table.entries()[1].name == "grafana");
  CHECK(p.table.entries()[1].role == Role::viewer);
  // Upper-case hex is the same hash.
  std::string upper = kTestHash;
  for (std::size_t i = 7; i < upper.size(); ++i) upper[i] = static_cast<char>(std::toupper(upper[i]));
  const OperatorsParse u = parse_operators("bob viewer " + upper + "\n", "f");
  REQUIRE(u.errors.empty());
  CHECK(u.table.find("test")->name == "bob");
  // No final newline.
  CHECK(parse_operators("bob viewer " + kTestHash, "f").errors.empty());
}

TEST_CASE("operators: each malformed line is an error naming the file and the line") {
  CHECK(one_error("alice operator\n") == "ops.txt:1: expected 'NAME ROLE sha256:HEX' (3 fields), got 2");
  CHECK(one_error("# c\nalice operator " + kTestHash + " extra\n") ==
        "ops.txt:2: expected 'NAME ROLE sha256:HEX' (3 fields), got 4");
  CHECK(one_error("alice admin " + kTestHash) == "ops.txt:1: role 'admin' is not viewer or operator");
  CHECK(one_error("al!ce viewer " + kTestHash) == "ops.txt:1: name 'al!ce' may only hold A-Z a-z 0-9 . _ @ -");
  CHECK(one_error(std::string(65, 'a') + " viewer " + kTestHash).find("is longer than 64 characters") !=
        std::string::npos);
  CHECK(parse_operators(std::string(64, 'a') + " viewer " + kTestHash, "f").errors.empty());
  CHECK(one_error("alice viewer " + kTestHash.substr(7)).find("must start with 'sha256:'") != std::string::npos);
  CHECK(one_error("alice viewer md5:0123") ==
        "ops.txt:1: the token hash must start with 'sha256:' (fleetlink-broker --hash-token prints it), got 'md5:0123'");
  CHECK(one_error("alice viewer sha256:abcd") == "ops.txt:1: the token hash must be 64 hex digits after 'sha256:', got 4");
  CHECK(one_error("alice viewer " + kTestHash + "0").find("must be 64 hex digits") != std::string::npos);
  std::string not_hex = kTestHash;
  not_hex.back() = 'g';
  CHECK(one_error("alice viewer " + not_hex) == "ops.txt:1: the token hash holds a character that is not a hex digit");
  CHECK(one_error("alice viewer " + kTestHash + "\nalice operator " + token_hash_text("y")) ==
        "ops.txt:2: operator 'alice' is listed twice");
  CHECK(one_error("alice viewer " + kTestHash + "\nbob operator " + kTestHash) ==
        "ops.txt:2: operator 'bob' has the same token as 'alice' (each needs its own)");
  // A control byte in a field is shown as '?', not written to the terminal.
  CHECK(one_error(std::string("al\x1b" "ce viewer ") + kTestHash).find("'al?ce'") != std::string::npos);
  // Several bad lines: each one reported.
  const OperatorsParse p = parse_operators("a b\nc viewer x\n\nd viewer " + kTestHash + "\ne f g h\n", "F");
  REQUIRE(p.errors.size() == 3);
  CHECK(p.errors[0].rfind("F:1: ", 0) == 0);
  CHECK(p.errors[1].rfind("F:2: ", 0) == 0);
  CHECK(p.errors[2].rfind("F:5: ", 0) == 0);
  CHECK(p.table.entries().size() == 1);
}

TEST_CASE("operators: a token finds its operator; any other finds none") {
  const OperatorsParse p =
      parse_operators("alice operator " + token_hash_text("a-token") + "\nbob viewer " + token_hash_text("b-token"), "f");
  REQUIRE(p.errors.empty());
  auto a = p.table.find("a-token");
  REQUIRE(a);
  CHECK(a->name == "alice");
  CHECK(a->role == Role::operator_);
  CHECK(a->authenticated);
  auto b = p.table.find("b-token");
  REQUIRE(b);
  CHECK(b->name == "bob");
  CHECK(b->role == Role::viewer);
  CHECK_FALSE(p.table.find("a-token "));
  CHECK_FALSE(p.table.find("A-token"));
  CHECK_FALSE(p.table.find(""));
  // The hash itself is not a token.
  CHECK_FALSE(p.table.find(token_hash_text("a-token")));
}

TEST_CASE("operators: the file on disk, and the old control token as operator 'token'") {
  char dir[] = "/tmp/fleetlink-ops-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/operators";
  std::ofstream(path) << "# nobody yet\n\n";
  OperatorsParse empty = read_operators_file(path);
  REQUIRE(empty.errors.size() == 1);
  CHECK(empty.errors[0] == "'" + path + "' lists no operator: the control API would take no token at all");
  CHECK(read_operators_file(std::string(dir) + "/missing").errors.at(0).find("cannot be read") != std::string::npos);

  std::ofstream(path) << "alice operator " << token_hash_text("a-token") << "\n";
  OperatorsParse both = broker_operators(path, "legacy");
  REQUIRE(both.errors.empty());
  REQUIRE(both.table.entries().size() == 2);
  auto t = both.table.find("legacy");
  REQUIRE(t);
  CHECK(t->name == "token");
  CHECK(t->role == Role::operator_);
  CHECK(both.table.find("a-token")->name == "alice");
  // The old token alone.
  OperatorsParse only = broker_operators("", "legacy");
  REQUIRE(only.errors.empty());
  CHECK(only.table.entries().size() == 1);
  // The same token in the file and as the old one: refused, it would be two operators.
  CHECK(broker_operators(path, "a-token").errors.size() == 1);
  std::ofstream(path) << "token viewer " << token_hash_text("other") << "\n";
  CHECK(broker_operators(path, "legacy").errors.at(0).find("clashes") != std::string::npos);
  std::remove(path.c_str());
  rmdir(dir);
}

TEST_CASE("operators: what a reload changes, in one line; nothing when the table is the same") {
  auto table = [](std::string_view text) {
    OperatorsParse p = parse_operators(text, "ops.txt");
    REQUIRE(p.errors.empty());
    return std::move(p.table);
  };
  const std::string a = token_hash_text("a"), b = token_hash_text("b"), c = token_hash_text("c"),
                    d = token_hash_text("d");
  const OperatorTable before = table("alice operator " + a + "\nbob viewer " + b + "\ncarol viewer " + c + "\n");
  CHECK(operators_change(before, table("carol viewer " + c + "\nalice operator " + a + "\nbob viewer " + b)) == "");
  CHECK(operators_change(before, table("alice viewer " + a + "\ncarol viewer " + d + "\ndave operator " + b)) ==
        "3 operator(s) (was 3); added dave; removed bob; new role for alice: viewer; new token for carol");

  // replace_with keeps the object (the control API holds a pointer to it) and takes the entries.
  OperatorTable live = table("alice operator " + a);
  const OperatorTable* where = &live;
  live.replace_with(table("bob operator " + b));
  CHECK(where == &live);
  CHECK_FALSE(live.find("a"));
  REQUIRE(live.find("b"));
  CHECK(live.find("b")->name == "bob");
}
