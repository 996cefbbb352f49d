#pragma once
// fleetctl logs [-f] CMD_ID, and the live output of send --wait: a command's
// output as the broker keeps it (GET /v1/commands/{id}/output), then, when
// following, its command_output events (GET /v1/events?cmd=) until it ends.
#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

#include "control_client.hpp"

namespace fleetctl {

struct FollowOutcome {
  enum class Kind {
    finished,     // the command ended: `command` is its record
    running,      // not following, and it has not ended: `command` is its record
    timed_out,    // following gave up at the timeout
    unreachable,  // no HTTP answer: `transport`
    refused,      // a non-2xx answer: `http`
  };
  Kind kind = Kind::finished;
  nlohmann::json command;
  HttpResult http;
  TransportError transport;
  std::uint64_t gap_bytes = 0;  // output not printed because the broker no longer had it
};

// Prints the output to `out`. `events` holds the stream while `api` reads (two
// connections: the stream's is busy). timeout_s <= 0: no limit.
FollowOutcome print_command_output(ControlClient& api, ControlClient& events, const std::string& cmd_id,
                                   bool follow, double timeout_s, std::ostream& out);

}  // namespace fleetctl
