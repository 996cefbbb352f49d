#pragma once
// Every step of a command's life, in one place. A command is created queued in
// its rig's outbox, then:
//
//   queued --write--> sent --ACK--> acked --OUTPUT--> running --RESULT--> done
//      \                \              \_______________________\--RESULT--> done
//       \                \--NACK--> nacked
//        \________________\--connection ended before an ACK--> lost
//
// done, nacked and lost are final: nothing changes a finished command, and the
// table may evict it (oldest finished first). A RESULT also settles a command
// whose ACK was never seen. Each step takes the time it happened (Unix ms).
#include <cstdint>

#include "fleet/command_table.hpp"
#include "fleetlink/messages.hpp"

namespace fleetlink::broker::lifecycle {

constexpr bool is_final(CommandState s) noexcept {
  return s == CommandState::done || s == CommandState::nacked || s == CommandState::lost;
}

// Written to the socket.
void sent(CommandView& v, std::uint64_t now_ms);
// The rig accepted it (or had run it before: ack.duplicate).
void acked(CommandView& v, const msg::Ack& ack, std::uint64_t now_ms);
// A chunk of its output arrived; returns the bytes skipped before the chunk (a gap).
std::uint64_t output(CommandView& v, const msg::OutputChunk& chunk);
// Its RESULT arrived (output cut to kMaxResultOutput); returns the output bytes
// lost in transit, now counted in the result's dropped_bytes.
std::uint64_t done(CommandTable& table, CommandView& v, msg::Result result, std::uint64_t now_ms);
// The rig refused it.
void nacked(CommandTable& table, CommandView& v, const msg::Nack& nack, std::uint64_t now_ms);
// Its connection ended before the rig acknowledged it: never retransmitted.
void lost(CommandTable& table, CommandView& v, std::uint64_t now_ms);

}  // namespace fleetlink::broker::lifecycle
