// fleetctl: operator CLI for the fleetlink broker's control API.
//
//   fleetctl rigs | rig RIG | send RIG KIND [--lines N] [--arg k=v]... [--wait]
//            send (--rig-glob G | --label k=v)... KIND [--max-concurrency N|P%] [--max-errors N|P%]
//                 [--deadline S] [--wait]                               (a job)
//            job create|list|show|watch|cancel ... (job_commands.hpp), jobs, job JOB_ID [--wait]
//            status CMD_ID | logs [-f] CMD_ID | cancel CMD_ID | reconnect RIG | drain [--window-ms N] | reload
//            events | health
//            artifacts CMD_ID | fetch CMD_ID NAME [-o FILE] (artifact_commands.hpp)
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cli_checks.hpp"
#include "common/build_info.hpp"
#include "control_client.hpp"
#include "exit_codes.hpp"
#include "artifact_commands.hpp"
#include "job_commands.hpp"
#include "logs_command.hpp"
#include "output_format.hpp"

namespace fleetctl {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Globals {
  std::string control = "http://127.0.0.1:8080";
  std::string token;
  std::string token_file;
  std::string token_from;  // where the token came from, for messages: "--token / FLEETCTL_TOKEN", "--token-file F"
  bool json_output = false;
};

int fail(int code, const std::string& message) {
  std::cerr << "fleetctl: " << message << "\n";
  return code;
}

int unreachable(const TransportError& e) {
  return fail(kUnreachable, "control API unreachable: " + e.detail);
}

json parse_json(const std::string& text) {
  return json::parse(text, nullptr, /*allow_exceptions=*/false);
}

std::string field_text(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return "-";
  return text_of(j.at(key));
}

void print_raw(const std::string& body) {
  std::cout << body;
  if (body.empty() || body.back() != '\n') std::cout << '\n';
  std::cout.flush();
}

// A 401 in words: no token given, or the token given was refused. `reason` is the
// broker's (missing_token, bad_token; "-" from a broker that does not say).
std::string unauthorized_message(const Globals& g, const std::string& reason) {
  if (g.token.empty()) {
    return "unauthorized (401): the broker needs a control token and none was given: use --token, "
           "--token-file or FLEETCTL_TOKEN" +
           std::string(g.token_from.empty() ? "" : " (" + g.token_from + " is empty)");
  }
  const std::string& where = g.token_from;
  if (reason == "missing_token") {
    return "unauthorized (401): the broker received no token although one was given (" + where +
           "): does something between fleetctl and the broker drop the Authorization header?";
  }
  return "unauthorized (401): the broker refused the token: it is not this broker's control token; check " +
         where;
}

// Turns a non-2xx answer into a message and an exit code.
int api_error(const HttpResult& r, const Globals& g) {
  const json body = parse_json(r.body);
  if (g.json_output) print_raw(r.body);
  const std::string error = field_text(body, "error");
  const std::string detail = field_text(body, "detail");
  if (r.status == 401) return fail(kFailed, unauthorized_message(g, field_text(body, "reason")));
  if (error == "unknown_rig") {
    return fail(kUnknownRig, "unknown rig " + field_text(body, "rig_id") +
                                 ": " + detail);
  }
  if (error == "rig_unresponsive") {
    const std::string rig = field_text(body, "rig_id");
    const std::string action = field_text(body, "suggested_action");
    std::string message = "rig " + rig + " is unresponsive: " + detail + "\n  last ack: seq " +
                          field_text(body, "last_ack_seq") + " at " +
                          field_text(body, "last_ack_at") + "\n  suggested action: " + action;
    if (action == "force_reconnect") message += " (run: fleetctl reconnect " + rig + ")";
    return fail(kRigUnresponsive, message);
  }
  if (error == "unknown_command") return fail(kFailed, "unknown command: " + detail);
  if (error == "unknown_job") return fail(kFailed, "unknown job " + field_text(body, "job_id") + ": " + detail);
  if (error == "-") {
    return fail(kFailed, "HTTP " + std::to_string(r.status) + " from the control API: " + r.body);
  }
  return fail(kFailed, error + " (HTTP " + std::to_string(r.status) + "): " + detail);
}

std::string read_token_file(const std::string& path, bool& ok) {
  std::ifstream in(path);
  ok = static_cast<bool>(in);
  std::string token;
  if (ok) std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ' || token.back() == '\t')) {
    token.pop_back();
  }
  return token;
}

// ---- subcommands --------------------------------------------------------

struct RigsFilter {
  std::string state;
  std::string rig_glob;
  std::string label;
};

int cmd_rigs(ControlClient& c, const Globals& g, const RigsFilter& f) {
  std::string query;
  auto add = [&](const char* key, const std::string& value) {
    if (value.empty()) return;
    query += query.empty() ? "?" : "&";
    query += key;
    query += "=";
    query += c.escape(value);
  };
  add("state", f.state);
  add("rig", f.rig_glob);
  add("label", f.label);
  TransportError e;
  const auto r = c.call("GET", "/v1/rigs" + query, {}, e);
  if (!r) return unreachable(e);
  if (r->status != 200) return api_error(*r, g);
  if (g.json_output) {
    print_raw(r->body);
    return kOk;
  }
  const json body = parse_json(r->body);
  if (body.is_discarded()) return fail(kFailed, "control API answered invalid JSON");
  std::cout << rigs_table(body);
  return kOk;
}

int cmd_rig(ControlClient& c, const Globals& g, const std::string& rig) {
  TransportError e;
  const auto r = c.call("GET", "/v1/rigs/" + c.escape(rig), {}, e);
  if (!r) return unreachable(e);
  if (r->status != 200) return api_error(*r, g);
  if (g.json_output) {
    print_raw(r->body);
    return kOk;
  }
  std::cout << rig_detail(parse_json(r->body));
  return kOk;
}

// Exit code for a finished command, with the reason on stderr.
int finished_command_exit(const json& cmd) {
  const std::string state = field_text(cmd, "state");
  const std::string id = field_text(cmd, "cmd_id");
  if (state == "succeeded") return kOk;
  if (state == "rejected" && cmd.value("nack", json()).is_object()) {
    const json& nack = cmd.at("nack");
    return fail(kFailed, "command " + id + " was refused by the rig (nack " + field_text(nack, "reason") +
                             "): " + field_text(nack, "detail"));
  }
  std::string message = "command " + id + " " + state;
  const json result = cmd.value("result", json());
  if (result.is_object()) {
    message += ": exit code " + field_text(result, "exit_code");
    if (result.value("signal", 0) != 0) message += ", signal " + field_text(result, "signal");
  }
  const std::string detail = field_text(cmd, "detail");
  if (!detail.empty() && detail != "-") message += ": " + detail;
  return fail(kFailed, message);
}

// The lifecycle's final states (docs/PROTOCOL.md section 6).
bool is_final(const std::string& state) {
  for (const char* s : {"succeeded", "failed", "timed_out", "cancelled", "undeliverable", "rejected", "interrupted"})
    if (state == s) return true;
  return false;
}

// The command's args from --lines and --arg k=v; false (and a message) on a bad --arg.
bool build_args(int lines, const std::vector<std::string>& arg_list, json& args) {
  args = json::object();
  if (lines >= 0) args["lines"] = std::to_string(lines);
  for (const std::string& kv : arg_list) {
    const std::size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      fail(kUsage, "--arg wants key=value, got '" + kv + "'");
      return false;
    }
    args[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return true;
}

// A command's own deadlines (every rig's, for a job): unset when negative.
// What a send asks of its command beyond kind and args: deadlines, its identity
// (a repeated send with the same key or cmd_id is the same command), holding.
struct CommandDeadlines {
  long deliver_within_s = -1;
  long timeout_s = -1;
  std::string idempotency_key;
  std::string cmd_id;
  bool hold = false;
  void add_to(json& request) const {
    if (deliver_within_s >= 0) request["deliver_within_s"] = deliver_within_s;
    if (timeout_s >= 0) request["timeout_s"] = timeout_s;
    if (!idempotency_key.empty()) request["idempotency_key"] = idempotency_key;
    if (!cmd_id.empty()) request["cmd_id"] = cmd_id;
    if (hold) request["hold"] = true;
  }
};

struct FanOut {
  std::string rig_glob;
  std::vector<std::string> labels;   // k=v
  std::string max_concurrency;       // "N" or "P%"; empty: all at once
  std::string max_errors;            // likewise; empty: never stop
  long deadline_s = -1;
  bool wanted() const { return !rig_glob.empty() || !labels.empty(); }
};

// fleetctl send --rig-glob G / --label k=v KIND: a job (job create), its id on
// the first line; with --wait, followed to its end.
int cmd_send_job(JobCli& cli, const FanOut& fan, const std::string& kind, const json& args,
                 const CommandDeadlines& deadlines, bool wait, double timeout_s) {
  JobSpec spec;
  spec.kind = kind;
  spec.args = args;
  spec.glob = fan.rig_glob;
  spec.labels = fan.labels;
  spec.max_concurrency = fan.max_concurrency;
  spec.max_errors = fan.max_errors;
  spec.deadline_s = fan.deadline_s;
  spec.deliver_within_s = deadlines.deliver_within_s;
  spec.timeout_s = deadlines.timeout_s;
  spec.hold = deadlines.hold;
  return job_create(cli, spec, false, wait ? Follow::wait : Follow::no, timeout_s);
}

// The end of a followed command's output: its final state and exit code on
// stderr (stdout holds only the output), and the exit code scripts branch on.
int after_output(const FollowOutcome& o, const Globals& g, const std::string& cmd_id, double timeout_s) {
  switch (o.kind) {
    case FollowOutcome::Kind::unreachable: return unreachable(o.transport);
    case FollowOutcome::Kind::refused: return api_error(o.http, g);
    case FollowOutcome::Kind::timed_out:
      return fail(kTimeout, "timed out after " + std::to_string(timeout_s) + "s following command " + cmd_id +
                                " (last state: " + field_text(o.command, "state") +
                                "); check later with: fleetctl status " + cmd_id);
    case FollowOutcome::Kind::running:
      std::cerr << "fleetctl: command " << cmd_id << " is " << field_text(o.command, "state")
                << " (fleetctl logs -f " << cmd_id << " follows it)\n";
      return kOk;
    case FollowOutcome::Kind::finished: break;
  }
  if (o.gap_bytes > 0)
    std::cerr << "fleetctl: " << o.gap_bytes << " bytes of output were not kept by the broker (not shown)\n";
  const json result = o.command.value("result", json());
  if (result.is_object() && result.value("truncated", false))
    std::cerr << "fleetctl: output truncated (" << field_text(result, "dropped_bytes") << " bytes dropped)\n";
  const std::string state = field_text(o.command, "state");
  if (state == "succeeded") {
    std::cerr << "fleetctl: command " << cmd_id << " succeeded, exit code " << field_text(result, "exit_code") << "\n";
    return kOk;
  }
  return finished_command_exit(o.command);
}

int cmd_send(ControlClient& c, const Globals& g, const std::string& rig, const std::string& kind,
             int lines, const std::vector<std::string>& arg_list, const CommandDeadlines& deadlines, bool wait,
             double timeout_s) {
  json args;
  if (!build_args(lines, arg_list, args)) return kUsage;
  json request{{"kind", kind}, {"args", args}};
  deadlines.add_to(request);
  TransportError e;
  const auto r = c.call("POST", "/v1/rigs/" + c.escape(rig) + "/commands", request.dump(), e);
  if (!r) return unreachable(e);
  // 200: the command this send names (its key or cmd_id) existed already.
  if (r->status != 202 && r->status != 200) return api_error(*r, g);
  const json accepted = parse_json(r->body);
  const std::string cmd_id = field_text(accepted, "cmd_id");
  if (!wait) {
    if (g.json_output) {
      print_raw(r->body);
    } else {
      std::cout << cmd_id << "\n";
    }
    return kOk;
  }
  std::cerr << "sent " << kind << " to " << rig << ": cmd_id " << cmd_id << " seq "
            << field_text(accepted, "seq") << "\n";
  if (!g.json_output) {
    // Its output as it comes, then its end.
    ControlClient events(g.control, g.token);
    const FollowOutcome o = print_command_output(c, events, cmd_id, true, timeout_s, std::cout);
    return after_output(o, g, cmd_id, timeout_s);
  }

  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  auto delay = std::chrono::milliseconds(20);
  std::string last_state = "queued";
  while (true) {
    const auto remaining =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (remaining.count() <= 0) {
      return fail(kTimeout, "timed out after " + std::to_string(timeout_s) +
                                "s waiting for command " + cmd_id + " (last state: " +
                                last_state + "); check later with: fleetctl status " + cmd_id);
    }
    const long call_timeout = std::min<long>(static_cast<long>(remaining.count()) + 1, 10000);
    const auto s = c.call("GET", "/v1/commands/" + c.escape(cmd_id), {}, e, call_timeout);
    if (!s) {
      if (Clock::now() >= deadline) continue;  // reported as a timeout above
      return unreachable(e);
    }
    if (s->status != 200) return api_error(*s, g);
    const json cmd = parse_json(s->body);
    last_state = field_text(cmd, "state");
    if (is_final(last_state)) {
      if (g.json_output) {
        print_raw(s->body);
      } else {
        const json result = cmd.value("result", json());
        if (result.is_object() && result.contains("output") && result["output"].is_string()) {
          std::cout << result["output"].get<std::string>();
          std::cout.flush();
          if (result.value("truncated", false)) {
            std::cerr << "fleetctl: output truncated (" << field_text(result, "dropped_bytes")
                      << " bytes dropped)\n";
          }
        }
      }
      return finished_command_exit(cmd);
    }
    std::this_thread::sleep_for(std::min(delay, remaining));
    delay = std::min(delay * 2, std::chrono::milliseconds(250));
  }
}

int cmd_logs(ControlClient& c, const Globals& g, const std::string& cmd_id, bool follow, double timeout_s) {
  ControlClient events(g.control, g.token);
  const FollowOutcome o = print_command_output(c, events, cmd_id, follow, timeout_s, std::cout);
  return after_output(o, g, cmd_id, timeout_s);
}

int cmd_status(ControlClient& c, const Globals& g, const std::string& cmd_id) {
  TransportError e;
  const auto r = c.call("GET", "/v1/commands/" + c.escape(cmd_id), {}, e);
  if (!r) return unreachable(e);
  if (r->status != 200) return api_error(*r, g);
  const json cmd = parse_json(r->body);
  if (g.json_output) {
    print_raw(r->body);
  } else {
    std::cout << command_summary(cmd);
    const json result = cmd.value("result", json());
    if (result.is_object() && result.contains("output") && result["output"].is_string() &&
        !result["output"].get<std::string>().empty()) {
      std::cout << "output:\n" << result["output"].get<std::string>();
      if (result["output"].get<std::string>().back() != '\n') std::cout << '\n';
    } else if (!result.is_object()) {
      // Running: what it has streamed so far (the broker keeps the last 64 KiB).
      const auto o = c.call("GET", "/v1/commands/" + c.escape(cmd_id) + "/output", {}, e);
      const json out = o && o->status == 200 ? parse_json(o->body) : json();
      const std::string data = out.is_object() ? out.value("data", std::string()) : std::string();
      if (!data.empty()) {
        std::cout << "output so far";
        if (out.value("offset", 0) > 0) std::cout << " (from byte " << out.value("offset", 0) << ")";
        std::cout << ":\n" << data;
        if (data.back() != '\n') std::cout << '\n';
      }
    }
  }
  return is_final(field_text(cmd, "state")) ? finished_command_exit(cmd) : kOk;
}

// Asks the broker to send CANCEL for a command in flight. The command ends
// later with the rig's RESULT (fleetctl status CMD_ID shows it).
int cmd_cancel(ControlClient& c, const Globals& g, const std::string& cmd_id) {
  TransportError e;
  const auto r = c.call("POST", "/v1/commands/" + c.escape(cmd_id) + "/cancel", {}, e);
  if (!r) return unreachable(e);
  if (r->status != 202 && r->status != 200) {
    const json body = parse_json(r->body);
    if (r->status == 409 && field_text(body, "error") == "not_running") {
      if (g.json_output) print_raw(r->body);
      return fail(kFailed, "command " + cmd_id + " is not running (state " +
                               field_text(body, "state") + "): nothing to cancel");
    }
    if (r->status == 409 && field_text(body, "error") == "cancel_pending") {
      if (g.json_output) print_raw(r->body);
      return fail(kFailed, "a cancel of " + cmd_id + " is already on its way (asked at " +
                               field_text(body, "cancel_requested_at") + "; state " + field_text(body, "state") +
                               "): nothing sent again; it ends with the rig's answer (see: fleetctl status " +
                               cmd_id + ")");
    }
    return api_error(*r, g);
  }
  if (g.json_output) {
    print_raw(r->body);
  } else {
    if (r->status == 200)  // still queued: withdrawn, never reached the rig
      std::cout << "cancelled " << cmd_id << " before it reached its rig\n";
    else
      std::cout << "cancel sent for " << cmd_id << " (see: fleetctl status " << cmd_id << ")\n";
  }
  return kOk;
}

int cmd_reconnect(ControlClient& c, const Globals& g, const std::string& rig) {
  TransportError e;
  const auto r = c.call("POST", "/v1/rigs/" + c.escape(rig) + "/reconnect", {}, e);
  if (!r) return unreachable(e);
  if (r->status != 200) return api_error(*r, g);
  if (g.json_output) {
    print_raw(r->body);
  } else {
    std::cout << "closed the connection of " << rig << "; the agent will reconnect\n";
  }
  return kOk;
}

int cmd_drain(ControlClient& c, const Globals& g, long window_ms) {
  json body = json::object();
  if (window_ms >= 0) body["window_ms"] = window_ms;
  TransportError e;
  const auto r = c.call("POST", "/v1/admin/drain", body.dump(), e);
  if (!r) return unreachable(e);
  if (r->status != 202 && r->status != 200) return api_error(*r, g);
  if (g.json_output) {
    print_raw(r->body);
  } else {
    std::cout << "draining: rigs are sent GOAWAY spread over "
              << field_text(parse_json(r->body), "window_ms") << " ms\n";
  }
  return kOk;
}

// POST /v1/admin/reload: what changed, or why nothing did.
int cmd_reload(ControlClient& c, const Globals& g) {
  TransportError e;
  const auto r = c.call("POST", "/v1/admin/reload", "{}", e);
  if (!r) return unreachable(e);
  if (r->status != 200) {
    const json body = parse_json(r->body);
    if (field_text(body, "error") == "reload_failed") {
      if (g.json_output) print_raw(r->body);
      return fail(kFailed, "reload failed, the broker changed nothing: " + field_text(body, "detail"));
    }
    return api_error(*r, g);
  }
  if (g.json_output) {
    print_raw(r->body);
    return kOk;
  }
  const json body = parse_json(r->body);
  const json changed = body.is_object() ? body.value("changed", json::array()) : json::array();
  if (!changed.is_array() || changed.empty()) std::cout << "reloaded: nothing changed\n";
  else std::cout << "reloaded:\n";
  if (changed.is_array())
    for (const auto& line : changed) std::cout << "  " << text_of(line) << "\n";
  if (body.is_object() && body.contains("warnings") && body["warnings"].is_array())
    for (const auto& w : body["warnings"]) std::cout << "warning: " << text_of(w) << "\n";
  const std::string to_check = field_text(body, "rigs_to_check");
  if (to_check != "-" && to_check != "0")
    std::cout << to_check << " connection(s) are being checked against the new CAs and CRLs "
                             "(refused ones are closed 4401)\n";
  return kOk;
}

// Reads the SSE stream and prints one line per event (or its JSON with --json).
int cmd_events(ControlClient& c, const Globals& g, long max_events) {
  std::string buffer;
  long seen = 0;
  auto handle_block = [&](const std::string& block) {
    std::string data;
    std::size_t start = 0;
    while (start < block.size()) {
      std::size_t end = block.find('\n', start);
      if (end == std::string::npos) end = block.size();
      const std::string line = block.substr(start, end - start);
      if (line.rfind("data:", 0) == 0) {
        std::string piece = line.substr(5);
        if (!piece.empty() && piece.front() == ' ') piece.erase(0, 1);
        if (!data.empty()) data += '\n';
        data += piece;
      }
      start = end + 1;
    }
    if (data.empty()) return true;  // comment, retry or heartbeat
    if (g.json_output) {
      std::cout << data << "\n";
    } else {
      const json event = parse_json(data);
      std::cout << (event.is_discarded() ? data : event_line(event)) << "\n";
    }
    std::cout.flush();
    ++seen;
    return max_events <= 0 || seen < max_events;
  };
  TransportError e;
  std::string error_body;
  const long status = c.stream(
      "/v1/events",
      [&](std::string_view piece) {
        buffer.append(piece);
        std::size_t pos;
        while ((pos = buffer.find("\n\n")) != std::string::npos) {
          const std::string block = buffer.substr(0, pos);
          buffer.erase(0, pos + 2);
          if (!handle_block(block)) return false;
        }
        error_body = buffer;  // an error answer is plain JSON without blank lines
        return true;
      },
      e);
  if (status == 0) return unreachable(e);
  if (status != 200) return api_error(HttpResult{status, error_body}, g);
  return kOk;
}

int cmd_health(ControlClient& c, const Globals& g) {
  TransportError e;
  const auto h = c.call("GET", "/healthz", {}, e, 5000);
  if (!h) return unreachable(e);
  const auto r = c.call("GET", "/readyz", {}, e, 5000);
  if (!r) return unreachable(e);
  const bool live = h->status == 200;
  const bool ready = r->status == 200;
  if (g.json_output) {
    std::cout << json{{"healthz", live}, {"readyz", parse_json(r->body)}}.dump() << "\n";
  } else {
    std::cout << "healthz: " << (live ? "ok" : "FAILING (HTTP " + std::to_string(h->status) + ")")
              << "\nreadyz:  " << (ready ? "ready" : "not ready (HTTP " + std::to_string(r->status) + ")")
              << "\n";
  }
  return live && ready ? kOk : kFailed;
}

}  // namespace
}  // namespace fleetctl

int main(int argc, char** argv) {
  using namespace fleetctl;
  Globals g;
  CLI::App app{"fleetctl: operate a fleetlink broker through its control API", "fleetctl"};
  app.footer(kExitCodeHelp);
  app.set_version_flag("--version", fleetlink::build_info::version_line("fleetctl"));
  // Checks that say what is wrong in plain words (CLI11's own print their bounds as
  // "[0 - 1.79769e+308]"); the option's name goes before the message.
  constexpr long kNoMax = std::numeric_limits<long>::max();
  const CLI::Validator positive = positive_number();
  app.require_subcommand(1);
  app.fallthrough();
  app.add_option("--control", g.control, "control API base URL")
      ->envname("FLEETCTL_CONTROL")
      ->capture_default_str();
  app.add_option("--token", g.token, "bearer token for the control API")->envname("FLEETCTL_TOKEN");
  app.add_option("--token-file", g.token_file, "read the bearer token from this file");
  std::string ca_file;
  app.add_option("--ca", ca_file, "CA bundle (PEM) that signs the broker's control certificate (https:// URLs)")
      ->envname("FLEETCTL_CA")
      ->check(CLI::ExistingFile);
  app.add_flag("--json", g.json_output, "print the control API's raw JSON");

  auto* rigs = app.add_subcommand("rigs", "list rigs (connected, and known offline ones)");
  RigsFilter rigs_filter;
  rigs->add_option("--state", rigs_filter.state, "only rigs in this state (connected, unresponsive, draining, offline)");
  rigs->add_option("--rig", rigs_filter.rig_glob, "only rig ids matching this glob (rig-04*)");
  rigs->add_option("--label", rigs_filter.label, "only rigs with this label (key or key=value)");
  std::string rig_id;
  auto* rig = app.add_subcommand("rig", "show one rig, with its unacknowledged commands");
  rig->add_option("RIG", rig_id, "rig id")->required();

  auto* send = app.add_subcommand(
      "send",
      "send a command to a rig, or (--rig-glob/--label) a job: the command to every rig selected, "
      "its id printed first");
  std::string kind;
  int lines = -1;
  std::vector<std::string> args;
  bool wait = false;
  double timeout_s = 30;
  CommandDeadlines deadlines;
  send->add_option("RIG", rig_id, "rig id (left out with --rig-glob/--label)")->required();
  send->add_option("KIND", kind, "command kind (dmesg, reboot, suite, or a plugin's)");
  FanOut fan;
  const CLI::Validator share_validator(share_check, "N|P%");
  send->add_option("--rig-glob", fan.rig_glob, "a job to every known rig whose id matches (rig-04*)");
  send->add_option("--label", fan.labels, "a job to every known rig with this label k=v (repeatable)")
      ->allow_extra_args(false);  // one k=v per --label: KIND may follow
  send->add_option("--max-concurrency", fan.max_concurrency,
                   "job: commands in flight at once, a number or a share of the rigs (25%) (default: all)")
      ->check(share_validator);
  send->add_option("--max-errors", fan.max_errors,
                   "job: stop sending once more than this many rigs failed, a number or a share (10%)")
      ->check(share_validator);
  send->add_option("--deadline", fan.deadline_s,
                   "job: seconds until it ends whatever its rigs do; unacknowledged or unanswered rigs are "
                   "then silent (default: the longest its commands can take, at most 7 days)")
      ->check(whole_number(1, kWeekSeconds));
  send->add_option("--deliver-within", deadlines.deliver_within_s,
                   "seconds for the command to be acknowledged, else undeliverable (default: the kind's)")
      ->check(whole_number(1, kWeekSeconds));
  send->add_option("--cmd-timeout", deadlines.timeout_s,
                   "seconds for the command's result once acknowledged, else timed_out (default: the kind's)")
      ->check(whole_number(1, kWeekSeconds));
  send->add_option("--idempotency-key", deadlines.idempotency_key,
                   "a key of the caller's: sending again with it returns the existing command, never a second one");
  send->add_option("--cmd-id", deadlines.cmd_id,
                   "the command's id, a UUID of the caller's (UUIDv7 sorts by time): sending again returns it");
  send->add_flag("--hold", deadlines.hold,
                 "for a rig the broker has never seen: hold the command until it connects (deliver-within), "
                 "instead of unknown_rig");
  send->add_option("--lines", lines, "dmesg: number of lines (args.lines)")
      ->check(whole_number(0, std::numeric_limits<int>::max()));
  send->add_option("--arg", args, "extra argument key=value (repeatable)");
  send->add_flag("--wait", wait,
                 "wait for the result and print its output; a job: follow it to its end, exit 1 unless every "
                 "rig is ok");
  send->add_option("--timeout", timeout_s, "seconds to wait with --wait")
      ->capture_default_str()
      ->check(positive);

  JobCommands job_commands(app);

  auto* status = app.add_subcommand("status", "show a command's state and result");
  std::string cmd_id;
  status->add_option("CMD_ID", cmd_id, "command id")->required();

  auto* logs = app.add_subcommand("logs", "print a command's output (-f: as it arrives, until it ends)");
  bool logs_follow = false;
  double logs_timeout_s = 0;
  logs->add_option("CMD_ID", cmd_id, "command id")->required();
  logs->add_flag("-f,--follow", logs_follow, "follow the output until the command ends, then print its state");
  logs->add_option("--timeout", logs_timeout_s, "seconds to follow at most (default: until it ends)");

  auto* artifacts = app.add_subcommand("artifacts", "list the files a command's rig uploaded (name, size, sha256)");
  artifacts->add_option("CMD_ID", cmd_id, "command id")->required();
  auto* fetch = app.add_subcommand("fetch", "download one artifact of a command, its sha256 checked");
  std::string artifact_name;
  std::string fetch_out;
  fetch->add_option("CMD_ID", cmd_id, "command id")->required();
  fetch->add_option("NAME", artifact_name, "the artifact's name (fleetctl artifacts CMD_ID lists them)")->required();
  fetch->add_option("-o,--output", fetch_out, "where to write it (default: ./NAME)");

  auto* cancel = app.add_subcommand("cancel", "stop a command in flight (the rig gets CANCEL)");
  cancel->add_option("CMD_ID", cmd_id, "command id")->required();

  auto* reconnect = app.add_subcommand("reconnect", "close a rig's connection (it reconnects)");
  reconnect->add_option("RIG", rig_id, "rig id")->required();

  auto* drain = app.add_subcommand("drain", "drain the broker: GOAWAY every rig over a window");
  long window_ms = -1;
  drain->add_option("--window-ms", window_ms, "spread reconnects over this many ms (default: the broker's drain-window-ms)")
      ->check(whole_number(0, kNoMax));

  auto* reload = app.add_subcommand(
      "reload", "make the broker re-read its CA bundle, CRLs, certificate and key, and operators (as SIGHUP)");

  auto* events = app.add_subcommand("events", "stream live fleet events (Server-Sent Events)");
  long max_events = 0;
  events->add_option("--count", max_events, "stop after this many events (0: never)")
      ->capture_default_str()
      ->check(whole_number(0, kNoMax));

  auto* health = app.add_subcommand("health", "check /healthz and /readyz");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "fleetctl: " << e.what() << "\n(fleetctl --help lists the commands and options)\n";
    return kUsage;
  }

  if (!g.token.empty()) {
    g.token_from = "--token / FLEETCTL_TOKEN";
  } else if (!g.token_file.empty()) {
    bool ok = false;
    g.token = read_token_file(g.token_file, ok);
    if (!ok) return fail(kUsage, "cannot read token file " + g.token_file);
    g.token_from = "--token-file " + g.token_file;
  }

  ControlClient::set_ca_file(ca_file);
  ControlClient client(g.control, g.token);
  JobCli job_cli{client, g.json_output, fail, [&g](const HttpResult& r) { return api_error(r, g); }, unreachable};
  if (*rigs) return cmd_rigs(client, g, rigs_filter);
  if (*rig) return cmd_rig(client, g, rig_id);
  if (*send) {
    if (fan.wanted()) {
      // One positional only: it is the KIND.
      if (!kind.empty()) return fail(kUsage, "send --rig-glob/--label takes KIND only, not RIG");
      if (!deadlines.idempotency_key.empty() || !deadlines.cmd_id.empty())
        return fail(kUsage, "--idempotency-key and --cmd-id name one command, not a job's");
      json cmd_args;
      if (!build_args(lines, args, cmd_args)) return kUsage;
      return cmd_send_job(job_cli, fan, rig_id, cmd_args, deadlines, wait, timeout_s);
    }
    if (kind.empty()) return fail(kUsage, "send needs RIG and KIND");
    if (!fan.max_concurrency.empty() || !fan.max_errors.empty() || fan.deadline_s >= 0)
      return fail(kUsage, "--max-concurrency, --max-errors and --deadline are for a job (--rig-glob/--label)");
    return cmd_send(client, g, rig_id, kind, lines, args, deadlines, wait, timeout_s);
  }
  if (job_commands.given()) return job_commands.run(job_cli);
  if (*status) return cmd_status(client, g, cmd_id);
  if (*logs) return cmd_logs(client, g, cmd_id, logs_follow, logs_timeout_s);
  if (*artifacts) return artifacts_list(job_cli, cmd_id);
  if (*fetch) return artifact_fetch(job_cli, cmd_id, artifact_name, fetch_out);
  if (*cancel) return cmd_cancel(client, g, cmd_id);
  if (*reconnect) return cmd_reconnect(client, g, rig_id);
  if (*drain) return cmd_drain(client, g, window_ms);
  if (*reload) return cmd_reload(client, g);
  if (*events) return cmd_events(client, g, max_events);
  if (*health) return cmd_health(client, g);
  return kUsage;
}
