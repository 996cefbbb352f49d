#pragma once
// One filled-in example of every message type, shared by the SDK unit tests.
#include <vector>

#include "fleetlink/messages.hpp"

namespace fleetlink::test {

inline constexpr const char* kCmdId = "01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6e";
inline constexpr const char* kBootId = "01936d3c-0000-7000-8000-000000000001";
inline constexpr const char* kSessionId = "01936d3c-0000-7000-8000-000000000002";

inline std::vector<Message> sample_messages() {
  std::vector<Message> out;
  out.emplace_back(msg::Hello{"rig-0414", "0.1.0", kBootId,
                              {{"lab", "b2"}, {"soc", "x86_64"}}, {"dmesg", "reboot", "suite"}});
  out.emplace_back(msg::Welcome{"broker-1", kSessionId, 20000, 131072});
  out.emplace_back(msg::Command{1, kCmdId, "dmesg", {{"lines", "50"}}, 1764448306123ULL});
  out.emplace_back(msg::Ack{1, kCmdId, false});
  out.emplace_back(msg::Nack{7, kCmdId, msg::NackReason::seq_gap, "expected seq 5", 5});
  out.emplace_back(msg::Result{kCmdId, msg::Status::failed, -1, 9, Bytes{'o', 'k', 0, 0xff},
                               true, 1234, 1764448306123ULL, 1764448307000ULL, "killed", true});
  out.emplace_back(msg::OutputChunk{kCmdId, 65536, Bytes{'l', 'i', 'n', 'e', '\n'}});
  out.emplace_back(msg::Event{"disk_low", {{"free_mb", "12"}}, 1764448306123ULL});
  out.emplace_back(msg::Cancel{kCmdId});
  out.emplace_back(msg::Goaway{"drain", 7500});
  return out;
}

}  // namespace fleetlink::test
