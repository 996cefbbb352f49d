#pragma once
// benchctl's client of the control stream (GET /v1/stream, subprotocol
// "fleetlink-stream"): commands as JSON lines over one WebSocket, each answered
// with "queued" and then "acked" on the same socket (notify "acked"). Everything
// ready to send goes out in one frame, as a real automation client would do.
#include <cstdint>
#include <string>
#include <vector>

namespace fleetlink::bench {

struct StreamCommand {
  std::string rig_id;
  std::int64_t t_send = 0;  // steady clock, ns: the frame carrying the request was written
  std::int64_t t_ack = 0;   // the "acked" line was read
  bool acked = false;
};

class StreamClient {
 public:
  StreamClient(std::string control, std::string token) : control_(std::move(control)), token_(std::move(token)) {}
  ~StreamClient();
  StreamClient(const StreamClient&) = delete;
  StreamClient& operator=(const StreamClient&) = delete;

  bool connect(std::string& error);
  // Sends every command with at most `inflight` not yet acknowledged; false on a
  // refusal, an error line, a closed stream or the timeout (error says which).
  bool run(std::vector<StreamCommand>& cmds, unsigned inflight, const std::string& kind, int timeout_s,
           std::string& error);

 private:
  bool send_all(const std::string& bytes);
  bool read_some(int timeout_ms, std::string& error);
  // Parses complete frames in rx_; answer lines go to on_line.
  bool parse_frames(std::vector<StreamCommand>& cmds, unsigned& in_flight, std::size_t& acked,
                    std::string& error);

  std::string control_;
  std::string token_;
  int fd_ = -1;
  std::string rx_;
  std::uint64_t mask_state_ = 0x9E3779B97F4A7C15ULL;
};

}  // namespace fleetlink::bench
