#pragma once
// A command's output stream, accounted. Every byte of it is either streamed
// (seen here) or counted in its RESULT's dropped_bytes. OutputChunk.offset is
// the byte offset in the whole stream, so a chunk starting past the end of the
// previous one shows a gap. Gaps the rig dropped itself are in its dropped_bytes
// already; gaps beyond that count were lost in transit (a connection ended with
// them written but not read) and are added to the RESULT when it arrives. Pure.
#include <cstdint>

#include "fleet/fleet.hpp"

namespace fleetlink::broker {

// Counts the chunk's new bytes in v (streamed_bytes, the bounded tail) and any gap
// before it; returns the gap in bytes. Bytes before stream_next_offset (a chunk
// seen twice) are not counted again.
std::uint64_t account_output(CommandView& v, const msg::OutputChunk& chunk);
// Adds to r the gap bytes its dropped_bytes does not cover (sets truncated when it
// does); returns the bytes added. Never more than were really lost: the rig's count
// includes every gap it made.
std::uint64_t reconcile_result(const CommandView& v, msg::Result& r);

}  // namespace fleetlink::broker
