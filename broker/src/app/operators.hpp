#pragma once
// The operators file (--operators-file): who may use the control API, by name,
// role and the SHA-256 of their bearer token; the broker never holds a token
// itself (docs/OPERATIONS.md, "Operators and roles"). One operator per line:
//
//   # name   role      token hash
//   alice    operator  sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//   grafana  viewer    sha256:...
//
// Fields are separated by spaces or tabs; '#' starts a comment (a whole line, or
// after the fields); blank lines are skipped. A name is 1 to 64 of A-Z a-z 0-9 . _ @ -
// and unique; a role is viewer or operator; a hash is "sha256:" and 64 hex digits
// (fleetlink-broker --hash-token prints it). The file is read at start-up and at
// every reload (SIGHUP, POST /v1/admin/reload); a reload that finds an error in it
// keeps the operators in use.
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "control/access.hpp"
#include "fleetlink/expected.hpp"

namespace fleetlink::broker {

inline constexpr std::size_t kMaxOperatorName = 64;
// The operator the old single --control-token / --control-token-file stands for.
inline constexpr std::string_view kLegacyOperatorName = "token";

using TokenDigest = std::array<unsigned char, 32>;

// SHA-256 (OpenSSL EVP) of a token.
TokenDigest token_digest(std::string_view token);
// "sha256:<64 lower-case hex digits>", the operators file's third field.
std::string token_hash_text(std::string_view token);

struct OperatorEntry {
  std::string name;
  Role role = Role::viewer;
  TokenDigest digest{};
};

class OperatorTable final : public Authenticator {
 public:
  // Every entry is compared (CRYPTO_memcmp, no early exit): the time taken does
  // not depend on which operator's token it is, nor on how much of a hash matches.
  std::optional<Caller> find(std::string_view token) const override;

  const std::vector<OperatorEntry>& entries() const noexcept { return entries_; }
  bool empty() const noexcept { return entries_.empty(); }
  // False (and nothing added) when the name or the token's hash is taken.
  bool add(OperatorEntry e);
  // A reload: the other table's operators become this one's (callers hold a
  // pointer to this table, so it stays the same object).
  void replace_with(OperatorTable&& other) { entries_ = std::move(other.entries_); }

 private:
  std::vector<OperatorEntry> entries_;
};

// What a file's text holds: its table, and every problem, each "FILE:LINE: ...".
struct OperatorsParse {
  OperatorTable table;
  std::vector<std::string> errors;
};
OperatorsParse parse_operators(std::string_view text, std::string_view file);

// Reads and parses `path`; the errors (unreadable, malformed lines, no operator at all).
OperatorsParse read_operators_file(const std::string& path);

// The broker's operators: the file's (if any), and the old single token as
// operator "token" of role operator (if any). Its errors are the file's, and a
// clash of the old token's name or hash with a file's entry.
OperatorsParse broker_operators(const std::string& operators_file, const std::string& legacy_token);

// What a reload changes of the operators, for its log line: "" when nothing, else
// "3 operator(s) (was 2); added carol; removed bob; new role for dave: viewer; new token for erin".
std::string operators_change(const OperatorTable& before, const OperatorTable& after);

}  // namespace fleetlink::broker
