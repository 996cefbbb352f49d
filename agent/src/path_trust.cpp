#include "path_trust.hpp"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "process_spawn.hpp"
#include "suite_config.hpp"

namespace fleetlink::agent {

namespace fs = std::filesystem;

namespace {

std::string mode_text(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

std::string user_text(uid_t uid) {
  std::string out = "uid " + std::to_string(uid);
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr && found->pw_name)
    out += " (" + std::string(found->pw_name) + ")";
  return out;
}

// Why one resolved path (the object itself, or a directory above it) is not to be trusted.
std::string judge(const std::string& path, const struct stat& st, bool above, uid_t agent_uid) {
  if (st.st_uid != 0 && st.st_uid != agent_uid)
    return "'" + path + "' is owned by " + user_text(st.st_uid) + ", not by root or the agent's user (" +
           user_text(agent_uid) + ")";
  const bool group = (st.st_mode & S_IWGRP) != 0;
  const bool others = (st.st_mode & S_IWOTH) != 0;
  if (!group && !others) return {};
  // /tmp and its like: nobody but an entry's owner may rename or remove it.
  if (above && S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) != 0 && st.st_uid == 0) return {};
  const char* who = group && others ? "its group and others" : group ? "its group" : "others";
  return "'" + path + "' is writable by " + who + " (mode " + mode_text(st.st_mode) + ")";
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

std::string untrusted_path_reason(const std::string& path, uid_t agent_uid, bool only_above) {
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) return {};
  fs::path p(resolved);
  bool first = true;
  for (;;) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0)
      return "cannot check '" + p.string() + "': " + std::strerror(errno);
    std::string why = judge(p.string(), st, only_above || !first, agent_uid);
    if (!why.empty()) {
      if (!first) why += ", a directory above '" + path + "'";
      else if (p.string() != path) why += ", which '" + path + "' resolves to";
      return why;
    }
    if (p == p.root_path() || !p.has_parent_path() || p.parent_path() == p) break;
    p = p.parent_path();
    first = false;
  }
  return {};
}

std::vector<std::string> plugin_candidates(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!ends_with(name, ".so") && name.rfind("fleetlink-", 0) != 0) continue;
    struct stat st {};
    if (::stat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> untrusted_paths(const AgentConfig& cfg, uid_t agent_uid) {
  std::vector<std::string> errors;
  auto check = [&](const std::string& key, const std::string& what, const std::string& path) {
    const std::string why = untrusted_path_reason(path, agent_uid);
    if (!why.empty()) errors.push_back(config_origin(cfg, key) + ": " + what + " refused: " + why);
  };
  if (!cfg.state_dir.empty()) {
    // Before it exists, the directory the agent will make it in.
    std::error_code ec;
    fs::path dir = fs::absolute(cfg.state_dir, ec);
    bool made_later = false;
    while (!dir.empty() && !fs::exists(dir, ec) && dir != dir.root_path()) {
      dir = dir.parent_path();
      made_later = true;
    }
    const std::string why = untrusted_path_reason(dir.string(), agent_uid, made_later);
    if (!why.empty())
      errors.push_back(config_origin(cfg, "state-dir") + ": state directory refused: " + why +
                       (made_later ? " (where '" + cfg.state_dir + "' would be made)" : ""));
  }
  if (!cfg.plugin_dir.empty()) {
    const std::size_t before = errors.size();
    check("plugin-dir", "plugin directory", cfg.plugin_dir);
    if (errors.size() == before)  // the plugins of an untrusted directory are not worth a line each
      for (const auto& file : plugin_candidates(cfg.plugin_dir)) check("plugin-dir", "plugin", file);
  }
  if (!cfg.suites.empty()) {
    const std::size_t before = errors.size();
    check("suites", "suites file", cfg.suites);
    SuiteLoadOptions so;
    so.check_users = false;
    auto table = errors.size() == before ? load_suites_file(cfg.suites, so) : Expected<SuiteTable>(SuiteTable{});
    if (table) {
      for (const auto& [id, spec] : *table) {
        if (spec.argv.empty()) continue;
        auto program = resolve_program(spec.argv.front());
        if (!program) continue;  // not runnable at all: the run says so
        check("suites", "suite '" + id + "' program", *program);
      }
    }
  }
  return errors;
}

}  // namespace fleetlink::agent
