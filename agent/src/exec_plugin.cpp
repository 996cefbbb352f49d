#include "exec_plugin.hpp"

#include <nlohmann/json.hpp>

#include "process_output.hpp"

namespace fleetlink::agent {
namespace {

using nlohmann::json;

bool could_be_result_line(std::string_view held) {
  if (held.size() < kResultLineMarker.size()) return kResultLineMarker.substr(0, held.size()) == held;
  return held.substr(0, kResultLineMarker.size()) == kResultLineMarker;
}

}  // namespace

std::optional<Expected<ExecPluginResult>> parse_result_line(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.substr(0, kResultLineMarker.size()) != kResultLineMarker) return std::nullopt;
  json doc = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  auto bad = [](std::string why) {
    return std::optional<Expected<ExecPluginResult>>(
        make_error(Errc::bad_field, "malformed fleetlink_result line: " + std::move(why)));
  };
  if (doc.is_discarded() || !doc.is_object()) return bad("not a JSON object");
  if (doc.size() != 1) return bad("the object must have the single key \"fleetlink_result\"");
  const json& r = doc["fleetlink_result"];
  if (!r.is_object()) return bad("\"fleetlink_result\" must be an object");
  ExecPluginResult out;
  for (const auto& [key, value] : r.items()) {
    if (key == "status") {
      if (!value.is_string()) return bad("status must be a string");
      auto s = value.get<std::string>();
      if (s == "ok") out.status = msg::Status::ok;
      else if (s == "failed") out.status = msg::Status::failed;
      else return bad("status must be \"ok\" or \"failed\", not \"" + s + "\"");
    } else if (key == "exit_code") {
      if (!value.is_number_integer() || value.get<std::int64_t>() < INT32_MIN ||
          value.get<std::int64_t>() > INT32_MAX) {
        return bad("exit_code must be a 32-bit integer");
      }
      out.exit_code = static_cast<std::int32_t>(value.get<std::int64_t>());
    } else if (key == "detail") {
      if (!value.is_string()) return bad("detail must be a string");
      out.detail = value.get<std::string>();
    }
    // Other keys are ignored, like unknown fields everywhere in the protocol.
  }
  return std::optional<Expected<ExecPluginResult>>(std::move(out));
}

ResultLineFilter::ResultLineFilter(Downstream downstream) : downstream_(std::move(downstream)) {}

void ResultLineFilter::complete_held_line(std::string& out) {
  std::string_view line(held_);
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  auto parsed = parse_result_line(line);
  if (parsed && parsed->has_value()) {
    result_ = std::move(parsed->value());
  } else {
    if (parsed) problem_ = parsed->error().detail;
    out += held_;
  }
  held_.clear();
  holding_ = false;
}

void ResultLineFilter::feed(std::string_view bytes) {
  std::string out;
  while (!bytes.empty()) {
    if (holding_) {
      auto nl = bytes.find('\n');
      std::size_t take = nl == std::string_view::npos ? bytes.size() : nl + 1;
      held_.append(bytes.substr(0, take));
      bytes.remove_prefix(take);
      if (!could_be_result_line(held_) || held_.size() > kMaxResultLine + 1) {
        out += held_;
        at_line_start_ = held_.back() == '\n';
        held_.clear();
        holding_ = false;
      } else if (nl != std::string_view::npos) {
        complete_held_line(out);
        at_line_start_ = true;
      }
    } else if (at_line_start_) {
      holding_ = true;
      at_line_start_ = false;
    } else {
      auto nl = bytes.find('\n');
      std::size_t take = nl == std::string_view::npos ? bytes.size() : nl + 1;
      out.append(bytes.substr(0, take));
      bytes.remove_prefix(take);
      at_line_start_ = nl != std::string_view::npos;
    }
  }
  if (!out.empty()) downstream_(out);
}

void ResultLineFilter::finish() {
  if (!holding_ || held_.empty()) return;
  std::string out;
  complete_held_line(out);
  if (!out.empty()) downstream_(out);
}

bool valid_plugin_kind(std::string_view kind) {
  if (kind.empty() || kind.size() > 64) return false;
  for (std::size_t i = 0; i < kind.size(); ++i) {
    char c = kind[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '_' && c != '-'))) return false;
  }
  return true;
}

std::string exec_plugin_request(const CommandContext& ctx) {
  json args = json::object();
  for (const auto& [k, v] : ctx.args) args[k] = v;
  json req = {{"protocol", 1}, {"cmd_id", ctx.cmd_id}, {"kind", ctx.kind}, {"args", args}};
  // Replace, not throw, on invalid UTF-8 in args: the plugin gets U+FFFD.
  return req.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

ExecPlugin::ExecPlugin(std::string kind, std::string program, ExecPluginOptions options)
    : kind_(std::move(kind)), program_(std::move(program)), options_(options),
      jobs_(options.max_running) {}

void ExecPlugin::start(const CommandContext& ctx, std::shared_ptr<Reporter> reporter) {
  std::string request = exec_plugin_request(ctx);
  jobs_.launch(ctx.cmd_id, reporter,
               [this, request = std::move(request), cmd_id = ctx.cmd_id,
                reporter](ProcessRunner& runner) {
                 SpawnSpec s;
                 s.group_record = options_.groups.get();
                 s.cmd_id = cmd_id;
                 s.argv = {program_};
                 s.with_stdin = true;
                 s.env = {{"FLEETLINK_PROTOCOL", "1"},
                          {"FLEETLINK_CMD_ID", cmd_id},
                          {"FLEETLINK_KIND", kind_}};
                 RunLimits limits;
                 limits.timeout = options_.timeout;
                 limits.kill_grace = options_.kill_grace;
                 OutputCollector output(reporter);
                 ResultLineFilter filter([&output](std::string_view b) { output.feed(b); });
                 auto run = runner.run(s, limits, request,
                                       [&filter](std::string_view b) { filter.feed(b); });
                 if (!run) {
                   return start_failure("plugin " + program_ + " could not start: " + run.error().detail);
                 }
                 filter.finish();
                 const std::string what = "plugin " + kind_;
                 Outcome o = outcome_from_run(*run, output, what);
                 const bool ended_normally = !run->timed_out && !run->cancelled && run->signal == 0;
                 if (ended_normally && filter.result()) {
                   const auto& r = *filter.result();
                   if (r.exit_code) o.exit_code = *r.exit_code;
                   if (r.status) o.status = *r.status;
                   else o.status = o.exit_code == 0 ? msg::Status::ok : msg::Status::failed;
                   o.detail = r.detail.value_or(o.status == msg::Status::ok ? "" : o.detail);
                 }
                 if (!filter.problem().empty()) {
                   o.detail += o.detail.empty() ? filter.problem() : "; " + filter.problem();
                 }
                 return o;
               });
}

void ExecPlugin::cancel(std::string_view cmd_id) { jobs_.cancel(cmd_id); }

}  // namespace fleetlink::agent
