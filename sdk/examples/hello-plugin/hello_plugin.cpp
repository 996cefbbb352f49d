// fleetlink example plugin: command kind "hello" echoes its arguments back.
//
//   fleetctl send rig-0414 hello --arg name=world
//   -> "hello from rig-0414 (plugin config: ...): name=world"
//
// The shape of every shared-object plugin: an Executor subclass constructible
// from `const fleetlink::PluginHost&`, and FLEETLINK_PLUGIN(Class) once, which
// exports the three C entry points the agent looks for (ABI version, create,
// destroy). The agent checks the ABI version before calling anything else.
//
// The agent calls start() on its own thread and expects it to return at once.
// This executor's work is tiny, so it reports and finishes inside start();
// anything slow belongs on a thread of the plugin's own (and cancel() must then
// stop it and still call finish() exactly once, with status `cancelled`).
#include <fleetlink/executor.hpp>

#include <string>

namespace {

class HelloExecutor final : public fleetlink::Executor {
 public:
  explicit HelloExecutor(const fleetlink::PluginHost& host)
      : rig_id_(host.rig_id ? host.rig_id : ""), config_(host.config ? host.config : "") {}

  std::string_view kind() const override { return "hello"; }

  void start(const fleetlink::CommandContext& ctx,
             std::shared_ptr<fleetlink::Reporter> reporter) override {
    std::string text = "hello from " + rig_id_;
    if (!config_.empty()) text += " (plugin config: " + config_ + ")";
    text += ":";
    if (ctx.args.empty()) text += " (no args)";
    for (const auto& [key, value] : ctx.args) text += " " + key + "=" + value;
    text += "\n";

    // Streamed output (may be refused when the link is congested; the final
    // result below still carries it).
    reporter->output(text);

    fleetlink::Outcome outcome;
    outcome.status = fleetlink::msg::Status::ok;
    outcome.exit_code = 0;
    outcome.output = std::move(text);
    reporter->finish(std::move(outcome));
  }

  // Nothing to stop: start() has already finished by the time a cancel arrives.
  void cancel(std::string_view /*cmd_id*/) override {}

 private:
  std::string rig_id_;
  std::string config_;
};

}  // namespace

FLEETLINK_PLUGIN(HelloExecutor)
