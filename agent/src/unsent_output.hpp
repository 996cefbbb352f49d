#pragma once
// Output chunks that the session accepted but never wrote (the connection ended
// with them still in its outbound queue, up to max_queued_bytes of them).
//
// The Reporter counted them as streamed when send() took them, so without this
// they would vanish from the accounting: neither seen by the broker nor in the
// RESULT's dropped_bytes. Each is charged to its command instead:
//  - a RESULT given back in the same batch (it was queued after its chunks) gets
//    its own chunks added to dropped_bytes before it is spooled;
//  - a command still running gets them when its RESULT is made (take());
//  - a command whose RESULT already waits in the spool gets them from the agent,
//    which rewrites that spooled RESULT (pending_ids()).
// Pure bookkeeping on the session's loop thread; no locking.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fleetlink/messages.hpp"

namespace fleetlink::agent {

// Adds n dropped bytes to a RESULT (and marks it truncated when n > 0).
void add_dropped(msg::Result& r, std::uint64_t n) noexcept;

class UnsentOutput {
 public:
  // Sorts what the session gave back: chunk bytes are counted per command, the
  // RESULTs are returned (in order) with their commands' count added and forgotten.
  std::vector<msg::Result> absorb(std::vector<Message> unsent);
  // The bytes counted for cmd_id, forgotten (0 if none).
  std::uint64_t take(std::string_view cmd_id);
  // Commands with bytes counted and no RESULT taken yet.
  std::vector<std::string> pending_ids() const;
  bool empty() const noexcept { return bytes_.empty(); }

 private:
  std::map<std::string, std::uint64_t, std::less<>> bytes_;
};

}  // namespace fleetlink::agent
