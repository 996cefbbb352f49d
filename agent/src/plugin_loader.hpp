#pragma once
// Loads the plugins of the plugin directory (agent flag --plugin-dir):
//  - every `*.so` is a shared-object plugin built on the SDK: dlopen'ed with
//    RTLD_NOW|RTLD_LOCAL, it must export fleetlink_plugin_abi/_create/_destroy
//    (the FLEETLINK_PLUGIN macro), and its ABI version must equal
//    kPluginAbiVersion, or it is refused with a log line and the agent goes on;
//  - every other executable regular file named `fleetlink-<kind>` is an
//    executable plugin (ExecPlugin) for command kind <kind>.
// A kind offered twice (or one of `reserved_kinds`, the agent's built-ins) is
// refused the second time. Nothing here throws.
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.hpp"
#include "exec_plugin.hpp"
#include "fleetlink/executor.hpp"

namespace fleetlink::agent {

// Where the loader's lines go instead of the agent's log (tests collect them).
using PluginLog = std::function<void(log::Level, const std::string&)>;

struct LoadedPlugin {
  std::string file;                    // path in the plugin directory
  std::string kind;
  bool shared_object = false;          // false: executable plugin
  std::shared_ptr<Executor> executor;  // keeps the .so loaded while it lives
};

struct PluginLoadReport {
  std::vector<LoadedPlugin> loaded;
  std::vector<std::string> refused;    // one line per refused file, same text as logged
};

struct PluginHostInfo {
  std::string agent_version;
  std::string rig_id;
  std::string config;                  // passed to every .so plugin as PluginHost::config
  std::uint32_t abi_version = kPluginAbiVersion;  // tests only: pretend to be another agent
};

class PluginLoader {
 public:
  // `sink` may be empty: then lines go to the agent's log (common/log.hpp).
  PluginLoader(PluginHostInfo host, PluginLog sink = {}, ExecPluginOptions exec_options = {});

  // Loads one shared object; the error text names the file (and both ABI versions).
  Expected<LoadedPlugin> load_shared_object(const std::string& path) const;

  // Loads everything in `dir` (not recursive), in name order. A missing or
  // unreadable directory is one refused line, not a crash.
  PluginLoadReport load_dir(const std::string& dir,
                            const std::set<std::string, std::less<>>& reserved_kinds = {}) const;

 private:
  void emit(log::Level level, const std::string& line) const;

  PluginHostInfo host_;
  PluginLog sink_;
  ExecPluginOptions exec_options_;
};

}  // namespace fleetlink::agent
