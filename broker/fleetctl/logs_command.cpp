#include "logs_command.hpp"

#include <chrono>
#include <ostream>
#include <thread>

#include "output_follow.hpp"

namespace fleetctl {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

json parse(const std::string& text) { return json::parse(text, nullptr, /*allow_exceptions=*/false); }

bool final_state(const json& j) {
  const std::string s = j.is_object() ? j.value("state", std::string()) : std::string();
  for (const char* f : {"succeeded", "failed", "timed_out", "cancelled", "undeliverable", "rejected", "interrupted"})
    if (s == f) return true;
  return false;
}

// One GET, answered as JSON or as the outcome that ends the follow.
bool get_json(ControlClient& api, const std::string& path, json& body, FollowOutcome& out) {
  const auto r = api.call("GET", path, {}, out.transport);
  if (!r) {
    out.kind = FollowOutcome::Kind::unreachable;
    return false;
  }
  if (r->status != 200) {
    out.kind = FollowOutcome::Kind::refused;
    out.http = *r;
    return false;
  }
  body = parse(r->body);
  return true;
}

void print(std::ostream& out, OutputFollower& follower, const json& piece, const char* key) {
  if (!piece.is_object() || !piece.contains(key) || !piece[key].is_string()) return;
  const std::uint64_t offset = piece.value("offset", std::uint64_t{0});
  out << follower.take(offset, piece[key].get_ref<const std::string&>());
  out.flush();
}

}  // namespace

FollowOutcome print_command_output(ControlClient& api, ControlClient& events, const std::string& cmd_id,
                                   bool follow, double timeout_s, std::ostream& out) {
  FollowOutcome outcome;
  OutputFollower follower;
  const std::string output_path = "/v1/commands/" + api.escape(cmd_id) + "/output";
  const std::string command_path = "/v1/commands/" + api.escape(cmd_id);

  // Ends with the command's record: what it printed last, and its final state.
  auto finish = [&](FollowOutcome::Kind kind) {
    json cmd;
    if (!get_json(api, command_path, cmd, outcome)) return;
    // Its end was announced: a broker that reads the record from a shared store
    // may not have it yet (the owner writes it within a commit interval).
    for (int i = 0; i < 30 && kind == FollowOutcome::Kind::finished && !final_state(cmd); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (!get_json(api, command_path, cmd, outcome)) return;
    }
    json stored;
    if (!get_json(api, output_path, stored, outcome)) return;
    print(out, follower, stored, "data");  // a RESULT's output may hold more than was streamed
    outcome.command = std::move(cmd);
    outcome.kind = kind;
    outcome.gap_bytes = follower.gap_bytes();
  };

  if (!follow) {
    json stored;
    if (!get_json(api, output_path, stored, outcome)) return outcome;
    print(out, follower, stored, "data");
    json cmd;
    if (!get_json(api, command_path, cmd, outcome)) return outcome;
    outcome.kind = final_state(cmd) ? FollowOutcome::Kind::finished : FollowOutcome::Kind::running;
    outcome.command = std::move(cmd);
    outcome.gap_bytes = follower.gap_bytes();
    return outcome;
  }

  // Subscribed first, then the stored output read: nothing falls between the two.
  SseReader reader;
  bool subscribed = false, done = false, failed = false;
  const long timeout_ms = timeout_s > 0 ? static_cast<long>(timeout_s * 1000) : 0;
  const long status = events.stream(
      "/v1/events?types=command_output,command_done&cmd=" + events.escape(cmd_id),
      [&](std::string_view piece) {
        if (!subscribed) {
          subscribed = true;
          json stored;
          if (!get_json(api, output_path, stored, outcome)) {
            failed = true;
            return false;
          }
          print(out, follower, stored, "data");
          if (stored.value("final", false)) {
            done = true;
            return false;
          }
        }
        for (const SseReader::Event& e : reader.feed(piece)) {
          const json event = parse(e.data);
          if (e.name == "command_output") print(out, follower, event, "data");
          if (e.name == "command_done") {
            done = true;
            return false;
          }
        }
        return true;
      },
      outcome.transport, timeout_ms);
  if (failed) return outcome;
  if (status == 0) {
    outcome.kind = FollowOutcome::Kind::unreachable;
    return outcome;
  }
  if (status != 200) {
    outcome.kind = FollowOutcome::Kind::refused;
    outcome.http = HttpResult{status, reader.pending()};
    return outcome;
  }
  if (done) {
    finish(FollowOutcome::Kind::finished);
    return outcome;
  }
  if (events.timed_out()) {
    json cmd;
    if (get_json(api, command_path, cmd, outcome)) outcome.command = std::move(cmd);
    outcome.kind = FollowOutcome::Kind::timed_out;
    outcome.gap_bytes = follower.gap_bytes();
    return outcome;
  }
  // The broker closed the stream (shutting down): what the record says now.
  finish(FollowOutcome::Kind::finished);
  if (outcome.kind == FollowOutcome::Kind::finished && !final_state(outcome.command))
    outcome.kind = FollowOutcome::Kind::running;
  return outcome;
}

}  // namespace fleetctl
