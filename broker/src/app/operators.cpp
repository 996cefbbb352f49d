#include "app/operators.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <fstream>
#include <sstream>

namespace fleetlink::broker {

namespace {

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '@' || c == '-';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The fields of a line, up to a '#' that starts one.
std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i >= line.size() || line[i] == '#') break;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    out.push_back(line.substr(start, i - start));
  }
  return out;
}

// The text shown for a value in an error: printable, and not too long.
std::string shown(std::string_view v) {
  std::string out;
  for (char c : v.substr(0, 40)) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  if (v.size() > 40) out += "...";
  return "'" + out + "'";
}

}  // namespace

TokenDigest token_digest(std::string_view token) {
  TokenDigest d{};
  unsigned int n = 0;
  // EVP_Digest with SHA-256 cannot fail short of memory; a zero digest then matches no file entry's
  // (which would need a token whose hash is all zeros).
  if (EVP_Digest(token.data(), token.size(), d.data(), &n, EVP_sha256(), nullptr) != 1 || n != d.size()) d.fill(0);
  return d;
}

std::string token_hash_text(std::string_view token) {
  static constexpr char kHex[] = "0123456789abcdef";
  const TokenDigest d = token_digest(token);
  std::string out = "sha256:";
  for (unsigned char b : d) {
    out += kHex[b >> 4];
    out += kHex[b & 0xf];
  }
  return out;
}

std::optional<Caller> OperatorTable::find(std::string_view token) const {
  const TokenDigest d = token_digest(token);
  const OperatorEntry* found = nullptr;
  for (const OperatorEntry& e : entries_) {
    const bool same = CRYPTO_memcmp(e.digest.data(), d.data(), d.size()) == 0;
    if (same && found == nullptr) found = &e;
  }
  if (found == nullptr) return std::nullopt;
  return Caller{found->name, found->role, true};
}

bool OperatorTable::add(OperatorEntry e) {
  for (const OperatorEntry& o : entries_)
    if (o.name == e.name || o.digest == e.digest) return false;
  entries_.push_back(std::move(e));
  return true;
}

OperatorsParse parse_operators(std::string_view text, std::string_view file) {
  OperatorsParse out;
  const std::string where(file);
  std::size_t pos = 0;
  for (int n = 1; pos <= text.size(); ++n) {
    const std::size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    auto err = [&](const std::string& what) { out.errors.push_back(where + ":" + std::to_string(n) + ": " + what); };
    const std::vector<std::string_view> f = fields_of(line);
    if (f.empty()) continue;
    if (f.size() != 3) {
      err("expected 'NAME ROLE sha256:HEX' (3 fields), got " + std::to_string(f.size()));
      continue;
    }
    OperatorEntry e;
    bool ok = true;
    if (f[0].size() > kMaxOperatorName) {
      err("name " + shown(f[0]) + " is longer than " + std::to_string(kMaxOperatorName) + " characters");
      ok = false;
    } else {
      for (char c : f[0]) {
        if (!name_char(c)) {
          err("name " + shown(f[0]) + " may only hold A-Z a-z 0-9 . _ @ -");
          ok = false;
          break;
        }
      }
    }
    e.name = std::string(f[0]);
    if (const auto role = role_from_string(f[1])) {
      e.role = *role;
    } else {
      err("role " + shown(f[1]) + " is not viewer or operator");
      ok = false;
    }
    constexpr std::string_view kPrefix = "sha256:";
    const std::string_view hash = f[2];
    if (hash.substr(0, kPrefix.size()) != kPrefix) {
      err("the token hash must start with 'sha256:' (fleetlink-broker --hash-token prints it), got " + shown(hash));
      ok = false;
    } else if (hash.size() != kPrefix.size() + 64) {
      err("the token hash must be 64 hex digits after 'sha256:', got " + std::to_string(hash.size() - kPrefix.size()));
      ok = false;
    } else {
      for (std::size_t i = 0; i < 32 && ok; ++i) {
        const int hi = hex_value(hash[kPrefix.size() + 2 * i]);
        const int lo = hex_value(hash[kPrefix.size() + 2 * i + 1]);
        if (hi < 0 || lo < 0) {
          err("the token hash holds a character that is not a hex digit");
          ok = false;
        } else {
          e.digest[i] = static_cast<unsigned char>(hi * 16 + lo);
        }
      }
    }
    if (!ok) continue;
    for (const OperatorEntry& o : out.table.entries()) {
      if (o.name == e.name) {
        err("operator " + shown(e.name) + " is listed twice");
        ok = false;
        break;
      }
      if (o.digest == e.digest) {
        err("operator " + shown(e.name) + " has the same token as " + shown(o.name) + " (each needs its own)");
        ok = false;
        break;
      }
    }
    if (ok) out.table.add(std::move(e));
  }
  return out;
}

OperatorsParse read_operators_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    OperatorsParse out;
    out.errors.push_back("'" + path + "' cannot be read");
    return out;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  OperatorsParse out = parse_operators(ss.str(), path);
  if (out.errors.empty() && out.table.empty())
    out.errors.push_back("'" + path + "' lists no operator: the control API would take no token at all");
  return out;
}

OperatorsParse broker_operators(const std::string& operators_file, const std::string& legacy_token) {
  OperatorsParse out;
  if (!operators_file.empty()) out = read_operators_file(operators_file);
  if (!legacy_token.empty()) {
    OperatorEntry e{std::string(kLegacyOperatorName), Role::operator_, token_digest(legacy_token)};
    if (!out.table.add(std::move(e)))
      out.errors.push_back("the control token (operator 'token', role operator) clashes with an entry of '" +
                           operators_file + "': the same name 'token' or the same token");
  }
  return out;
}

std::string operators_change(const OperatorTable& before, const OperatorTable& after) {
  auto find = [](const OperatorTable& t, const std::string& name) -> const OperatorEntry* {
    for (const OperatorEntry& e : t.entries())
      if (e.name == name) return &e;
    return nullptr;
  };
  std::vector<std::string> added, removed, new_role, new_token;
  for (const OperatorEntry& e : after.entries()) {
    const OperatorEntry* old = find(before, e.name);
    if (!old) {
      added.push_back(e.name);
      continue;
    }
    if (old->role != e.role) new_role.push_back(e.name + ": " + to_string(e.role));
    if (old->digest != e.digest) new_token.push_back(e.name);
  }
  for (const OperatorEntry& e : before.entries())
    if (!find(after, e.name)) removed.push_back(e.name);
  if (added.empty() && removed.empty() && new_role.empty() && new_token.empty()) return {};
  std::string out = std::to_string(after.entries().size()) + " operator(s) (was " +
                    std::to_string(before.entries().size()) + ")";
  auto part = [&out](const char* label, const std::vector<std::string>& names) {
    if (names.empty()) return;
    out += "; ";
    out += label;
    for (std::size_t i = 0; i < names.size(); ++i) out += (i ? ", " : " ") + names[i];
  };
  part("added", added);
  part("removed", removed);
  part("new role for", new_role);
  part("new token for", new_token);
  return out;
}

}  // namespace fleetlink::broker
