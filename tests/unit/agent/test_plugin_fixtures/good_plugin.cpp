// A minimal shared-object plugin (kind "unit-echo"), compiled by the unit test.
#include <fleetlink/executor.hpp>

namespace {
class UnitEcho final : public fleetlink::Executor {
 public:
  explicit UnitEcho(const fleetlink::PluginHost& host) : config_(host.config ? host.config : "") {}
  std::string_view kind() const override { return "unit-echo"; }
  void start(const fleetlink::CommandContext& ctx,
             std::shared_ptr<fleetlink::Reporter> reporter) override {
    fleetlink::Outcome o;
    o.output = "config=" + config_;
    for (const auto& [k, v] : ctx.args) o.output += " " + k + "=" + v;
    reporter->output(o.output);
    reporter->finish(std::move(o));
  }
  void cancel(std::string_view) override {}

 private:
  std::string config_;
};
}  // namespace

FLEETLINK_PLUGIN(UnitEcho)
