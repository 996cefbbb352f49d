#pragma once
// The plugin API: an Executor runs one kind of command on a rig.
//
// The agent calls start() on its own thread and returns to its event loop at
// once; the executor does its work wherever it likes (a thread, a child process)
// and reports through the Reporter, which is thread-safe. finish() must be called
// exactly once per start(), also after cancel().
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "fleetlink/export.hpp"
#include "fleetlink/messages.hpp"

namespace fleetlink {

struct CommandContext {
  std::string cmd_id;
  std::string kind;
  StringMap args;
};

struct Outcome {
  msg::Status status = msg::Status::ok;
  std::int32_t exit_code = 0;
  std::int32_t signal = 0;
  std::string output;            // the agent caps it at kMaxResultOutput and sets truncated
  bool truncated = false;
  std::uint64_t dropped_bytes = 0;
  std::string detail;
};

class FLEETLINK_API Reporter {
 public:
  virtual ~Reporter() = default;
  // A piece of streamed output. Returns false when the stream is over its bound and
  // the bytes were dropped (they are counted in the result's dropped_bytes).
  virtual bool output(std::string_view bytes) = 0;
  virtual void finish(Outcome outcome) = 0;
  // Attaches a file to this command's result as an artifact (docs/PROTOCOL.md
  // section 10): after finish(), the agent uploads it to the broker beside the
  // command channel, then sends the RESULT, which names it (name, size, sha256).
  // `name` is what operators see: [A-Za-z0-9._-], 1..128 bytes, not starting
  // with '.'. Call it before finish(); the file must stay until the upload is
  // done. False: refused (a bad or repeated name, too many, already finished,
  // or an agent that uploads no artifacts). Declared last and not pure, so
  // plugins built before it keep working.
  virtual bool attach(std::string_view name, std::string_view path) {
    (void)name;
    (void)path;
    return false;
  }
};

class FLEETLINK_API Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string_view kind() const = 0;
  virtual void start(const CommandContext& ctx, std::shared_ptr<Reporter> reporter) = 0;
  // Stop the run of cmd_id if it is still going; its finish() reports `cancelled`.
  virtual void cancel(std::string_view cmd_id) = 0;
};

// ---- Shared-object plugins -------------------------------------------------
// A plugin .so exports two C symbols. The agent checks the ABI version before it
// calls anything else, and refuses the plugin cleanly if it differs.
inline constexpr std::uint32_t kPluginAbiVersion = 1;

struct PluginHost {
  std::uint32_t abi_version;     // the agent's kPluginAbiVersion
  const char* agent_version;
  const char* rig_id;
  const char* config;            // the plugin's own config string (may be empty)
};

}  // namespace fleetlink

extern "C" {
using fleetlink_plugin_abi_fn = std::uint32_t (*)();
using fleetlink_plugin_create_fn = fleetlink::Executor* (*)(const fleetlink::PluginHost*);
using fleetlink_plugin_destroy_fn = void (*)(fleetlink::Executor*);
}

// Put this once in a plugin's source: FLEETLINK_PLUGIN(MyExecutor)
// MyExecutor must be constructible from `const fleetlink::PluginHost&`. The entry
// points are exported even when the plugin is built with -fvisibility=hidden.
#define FLEETLINK_PLUGIN(ExecutorType)                                      \
  extern "C" FLEETLINK_EXPORT_SYMBOL std::uint32_t fleetlink_plugin_abi() { \
    return ::fleetlink::kPluginAbiVersion;                                  \
  }                                                                         \
  extern "C" FLEETLINK_EXPORT_SYMBOL ::fleetlink::Executor*                 \
  fleetlink_plugin_create(const ::fleetlink::PluginHost* host) {            \
    try {                                                                   \
      return new ExecutorType(*host);                                       \
    } catch (...) {                                                         \
      return nullptr;                                                       \
    }                                                                       \
  }                                                                         \
  extern "C" FLEETLINK_EXPORT_SYMBOL void fleetlink_plugin_destroy(         \
      ::fleetlink::Executor* e) {                                           \
    delete e;                                                               \
  }
