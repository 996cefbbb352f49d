#include "plugin_loader.hpp"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace fleetlink::agent {
namespace {

namespace fs = std::filesystem;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The dlopen handle, closed when the last executor made from it is gone.
struct LibraryHandle {
  void* handle = nullptr;
  explicit LibraryHandle(void* h) : handle(h) {}
  LibraryHandle(const LibraryHandle&) = delete;
  LibraryHandle& operator=(const LibraryHandle&) = delete;
  ~LibraryHandle() {
    if (handle != nullptr) ::dlclose(handle);
  }
};

template <typename Fn>
Fn symbol(void* handle, const char* name) {
  void* p = ::dlsym(handle, name);
  Fn fn;
  static_assert(sizeof fn == sizeof p);
  std::memcpy(&fn, &p, sizeof fn);  // object pointer -> function pointer, as POSIX allows
  return fn;
}

}  // namespace

PluginLoader::PluginLoader(PluginHostInfo host, PluginLog sink, ExecPluginOptions exec_options)
    : host_(std::move(host)), sink_(std::move(sink)), exec_options_(exec_options) {}

void PluginLoader::emit(log::Level level, const std::string& line) const {
  if (sink_) {
    sink_(level, line);
    return;
  }
  if (log::enabled(level)) log::write(level, line);
}

Expected<LoadedPlugin> PluginLoader::load_shared_object(const std::string& path) const {
  ::dlerror();
  void* raw = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (raw == nullptr) {
    const char* why = ::dlerror();
    return make_error(Errc::io, "plugin " + path + " refused: dlopen failed: " +
                                    (why ? why : "unknown error"));
  }
  auto lib = std::make_shared<LibraryHandle>(raw);
  auto abi = symbol<fleetlink_plugin_abi_fn>(raw, "fleetlink_plugin_abi");
  auto create = symbol<fleetlink_plugin_create_fn>(raw, "fleetlink_plugin_create");
  auto destroy = symbol<fleetlink_plugin_destroy_fn>(raw, "fleetlink_plugin_destroy");
  std::string missing;
  if (abi == nullptr) missing += " fleetlink_plugin_abi";
  if (create == nullptr) missing += " fleetlink_plugin_create";
  if (destroy == nullptr) missing += " fleetlink_plugin_destroy";
  if (!missing.empty()) {
    return make_error(Errc::invalid_argument,
                      "plugin " + path + " refused: missing symbol(s):" + missing +
                          " (build it with the FLEETLINK_PLUGIN macro)");
  }
  const std::uint32_t plugin_abi = abi();
  if (plugin_abi != host_.abi_version) {
    return make_error(Errc::unsupported_version,
                      "plugin " + path + " refused: plugin ABI version " +
                          std::to_string(plugin_abi) + ", agent ABI version " +
                          std::to_string(host_.abi_version) +
                          " (rebuild the plugin against this agent's SDK)");
  }
  PluginHost host{host_.abi_version, host_.agent_version.c_str(), host_.rig_id.c_str(),
                  host_.config.c_str()};
  Executor* made = create(&host);
  if (made == nullptr) {
    return make_error(Errc::invalid_argument,
                      "plugin " + path + " refused: fleetlink_plugin_create returned null");
  }
  // The executor is destroyed by the plugin's own delete, then the library closes.
  std::shared_ptr<Executor> executor(made, [destroy, lib](Executor* e) mutable {
    destroy(e);
    lib.reset();
  });
  std::string kind(executor->kind());
  if (!valid_plugin_kind(kind)) {
    return make_error(Errc::invalid_argument, "plugin " + path + " refused: invalid kind '" +
                                                  kind + "' (1-64 of a-z 0-9 _ -)");
  }
  LoadedPlugin out;
  out.file = path;
  out.kind = std::move(kind);
  out.shared_object = true;
  out.executor = std::move(executor);
  return out;
}

PluginLoadReport PluginLoader::load_dir(const std::string& dir,
                                        const std::set<std::string, std::less<>>& reserved) const {
  PluginLoadReport report;
  auto refuse = [&](const std::string& line) {
    emit(log::Level::warn, line);
    report.refused.push_back(line);
  };
  std::error_code ec;
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    files.push_back(it->path());
  }
  if (ec) {
    refuse("plugin directory " + dir + " unreadable: " + ec.message());
    return report;
  }
  std::sort(files.begin(), files.end());
  std::set<std::string, std::less<>> taken(reserved.begin(), reserved.end());

  for (const auto& p : files) {
    const std::string path = p.string();
    const std::string name = p.filename().string();
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    LoadedPlugin plugin;
    if (ends_with(name, ".so")) {
      auto loaded = load_shared_object(path);
      if (!loaded) {
        refuse(loaded.error().detail);
        continue;
      }
      plugin = std::move(*loaded);
    } else if (name.rfind(kExecPluginPrefix, 0) == 0) {
      std::string kind = name.substr(kExecPluginPrefix.size());
      if (::access(path.c_str(), X_OK) != 0) {
        refuse("plugin " + path + " refused: not executable");
        continue;
      }
      if (!valid_plugin_kind(kind)) {
        refuse("plugin " + path + " refused: invalid kind '" + kind + "' (1-64 of a-z 0-9 _ -)");
        continue;
      }
      plugin.file = path;
      plugin.kind = kind;
      plugin.executor = std::make_shared<ExecPlugin>(kind, path, exec_options_);
    } else {
      continue;  // READMEs, config files: not plugins
    }
    if (taken.count(plugin.kind) != 0) {
      refuse("plugin " + path + " refused: kind '" + plugin.kind + "' is already provided");
      continue;
    }
    taken.insert(plugin.kind);
    emit(log::Level::info, "plugin " + path + " loaded: kind=" + plugin.kind +
                                  (plugin.shared_object ? " (shared object, abi " +
                                                              std::to_string(host_.abi_version) + ")"
                                                        : " (executable)"));
    report.loaded.push_back(std::move(plugin));
  }
  return report;
}

}  // namespace fleetlink::agent
