#include "suite_config.hpp"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace fleetlink::agent {
namespace {

using nlohmann::json;

// Limits that keep one bad file from making a huge table.
constexpr std::size_t kMaxSuites = 10000;
constexpr std::int64_t kMaxTimeoutS = 7 * 24 * 3600;

bool user_exists(const std::string& name) {
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  int rc;
  while ((rc = ::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found)) == ERANGE &&
         buf.size() < (1u << 20)) {
    buf.resize(buf.size() * 2);
  }
  return rc == 0 && found != nullptr;
}

bool valid_suite_id(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

class Parser {
 public:
  Parser(std::string_view origin, const SuiteLoadOptions& options)
      : origin_(origin), options_(options) {}

  void error(const std::string& key, const std::string& what) {
    errors_.push_back(origin_ + ": " + key + ": " + what);
  }

  SuiteTable parse(const json& root) {
    SuiteTable table;
    if (!root.is_object()) {
      errors_.push_back(origin_ + ": must be a JSON object with a \"suites\" object");
      return table;
    }
    for (const auto& [key, value] : root.items()) {
      if (key != "suites") error(key, "unknown key (expected only \"suites\")");
    }
    auto it = root.find("suites");
    if (it == root.end()) {
      error("suites", "missing (an object of suite id -> suite)");
      return table;
    }
    if (!it->is_object()) {
      error("suites", "must be an object of suite id -> suite");
      return table;
    }
    if (it->size() > kMaxSuites) {
      error("suites", "more than " + std::to_string(kMaxSuites) + " suites");
      return table;
    }
    for (const auto& [id, body] : it->items()) {
      const std::string base = "suites." + id;
      if (!valid_suite_id(id)) {
        error(base, "suite id must be 1-128 characters of A-Z a-z 0-9 . _ -");
        continue;
      }
      auto spec = parse_suite(base, id, body);
      table.emplace(id, std::move(spec));
    }
    return table;
  }

  const std::vector<std::string>& errors() const { return errors_; }

 private:
  SuiteSpec parse_suite(const std::string& base, const std::string& id, const json& body) {
    SuiteSpec spec;
    spec.id = id;
    if (!body.is_object()) {
      error(base, "must be an object with at least \"argv\"");
      return spec;
    }
    for (const auto& [key, value] : body.items()) {
      const std::string k = base + "." + key;
      if (key == "argv") {
        bool ok = value.is_array() && !value.empty();
        for (const auto& a : value) ok = ok && a.is_string();
        if (ok && value.front().get<std::string>().empty()) ok = false;
        if (!ok) {
          error(k, "must be a non-empty array of strings");
          continue;
        }
        for (const auto& a : value) {
          auto s = a.get<std::string>();
          if (s.find('\0') != std::string::npos) {
            error(k, "strings must not contain NUL");
            ok = false;
            break;
          }
          spec.argv.push_back(std::move(s));
        }
      } else if (key == "cwd") {
        if (!value.is_string() || value.get<std::string>().empty() ||
            value.get<std::string>().front() != '/') {
          error(k, "must be an absolute path");
          continue;
        }
        spec.cwd = value.get<std::string>();
      } else if (key == "env") {
        if (!value.is_object()) {
          error(k, "must be an object of string values");
          continue;
        }
        for (const auto& [name, v] : value.items()) {
          if (name.empty() || name.find('=') != std::string::npos ||
              name.find('\0') != std::string::npos) {
            error(k + "." + name, "not a valid environment variable name");
          } else if (!v.is_string()) {
            error(k + "." + name, "must be a string");
          } else {
            spec.env[name] = v.get<std::string>();
          }
        }
      } else if (key == "timeout_s" || key == "kill_grace_s") {
        if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
            value.get<std::int64_t>() > kMaxTimeoutS) {
          error(k, "must be an integer number of seconds between 0 and " +
                       std::to_string(kMaxTimeoutS));
          continue;
        }
        auto secs = std::chrono::seconds(value.get<std::int64_t>());
        if (key == "timeout_s") spec.timeout = secs;
        else spec.kill_grace = secs;
      } else if (key == "user") {
        if (!value.is_string() || value.get<std::string>().empty()) {
          error(k, "must be a non-empty user name");
          continue;
        }
        spec.user = value.get<std::string>();
        if (options_.check_users && !user_exists(spec.user)) {
          error(k, "unknown user '" + spec.user + "'");
        }
      } else if (key == "artifacts") {
        // Globs (relative to cwd) of files to upload with the result: a junit XML, a core dump.
        if (!value.is_array()) {
          error(k, "must be an array of glob patterns");
          continue;
        }
        for (const auto& g : value) {
          if (!g.is_string() || g.get<std::string>().empty()) {
            error(k, "must be an array of non-empty glob patterns");
            break;
          }
          spec.artifacts.push_back(g.get<std::string>());
        }
      } else if (key == "output_artifact") {
        if (!value.is_boolean()) {
          error(k, "must be true or false");
          continue;
        }
        spec.output_artifact = value.get<bool>();
      } else {
        error(k, "unknown key (known: argv, cwd, env, timeout_s, kill_grace_s, user, artifacts, output_artifact)");
      }
    }
    if (!body.contains("argv")) error(base + ".argv", "missing (a non-empty array of strings)");
    return spec;
  }

  std::string origin_;
  SuiteLoadOptions options_;
  std::vector<std::string> errors_;
};

}  // namespace

Expected<SuiteTable> parse_suites(std::string_view json_text, std::string_view origin,
                                  const SuiteLoadOptions& options) {
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {  // caught here: errors leave this file as values
    return make_error(Errc::malformed, std::string(origin) + ": invalid JSON: " + e.what());
  }
  Parser parser(origin, options);
  SuiteTable table = parser.parse(root);
  if (!parser.errors().empty()) {
    std::string detail;
    for (const auto& e : parser.errors()) {
      if (!detail.empty()) detail += '\n';
      detail += e;
    }
    return make_error(Errc::bad_field, detail);
  }
  return table;
}

Expected<SuiteTable> load_suites_file(const std::string& path, const SuiteLoadOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return make_error(Errc::io, path + ": cannot open: " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return make_error(Errc::io, path + ": read error");
  return parse_suites(text.str(), path, options);
}

}  // namespace fleetlink::agent
