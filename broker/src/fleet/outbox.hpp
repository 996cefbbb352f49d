#pragma once
// One rig connection's bounded outbox: every command not yet acknowledged,
// in seq order. seq is assigned here, at enqueue, starting at 1 per connection.
// Entries leave on ACK or NACK; what is left when the connection ends is lost
// (shown to the operator, never retransmitted). Pure logic, no sockets.
//
// Memory: empty until the first command (a vector growing on demand), so an
// idle rig costs only the members below.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fleetlink::broker {

struct CommandView;

struct OutboxEntry {
  std::uint64_t seq = 0;
  std::uint64_t enqueued_ms = 0;
  std::uint64_t sent_ms = 0;      // 0: not written yet
  std::string cmd_id;
  // The command's entry in the broker's command table, which never evicts a
  // command still in an outbox: saves a lookup at the write and at the ACK.
  CommandView* view = nullptr;
};

class Outbox {
 public:
  struct Full {
    std::string detail;           // "outbox full (128/128), oldest queued cmd age 47s"
  };

  // On success the new entry's seq; on a full outbox the reason.
  std::optional<Full> enqueue(std::string cmd_id, std::uint64_t now_ms, std::uint32_t capacity,
                              std::uint64_t* seq_out);
  // The seq the next enqueue will get.
  std::uint64_t next_seq() const noexcept { return next_seq_; }

  // Attaches the command table's view to the entry just enqueued as seq.
  void set_view(std::uint64_t seq, CommandView* view) noexcept;
  // Oldest entry not yet written, or nullptr.
  const OutboxEntry* next_unsent() const noexcept;
  void mark_sent(std::uint64_t seq, std::uint64_t now_ms) noexcept;
  bool has_unsent() const noexcept { return unsent_ < size(); }

  // Remove the entry for seq (ACK or NACK). Returns it when it was there and
  // its cmd_id matches (an empty cmd_id matches any).
  std::optional<OutboxEntry> settle(std::uint64_t seq, const std::string& cmd_id);
  // Remove by cmd_id (a RESULT arrived without an ACK). True if it was there.
  bool settle_cmd(const std::string& cmd_id);
  void record_ack(std::uint64_t seq, std::uint64_t now_ms) noexcept;

  // Everything still here (the connection ended): these commands are lost.
  std::vector<OutboxEntry> take_all();

  std::size_t size() const noexcept { return entries_ ? entries_->size() : 0; }
  std::size_t unsent() const noexcept { return size() - unsent_; }
  const std::vector<OutboxEntry>& entries() const noexcept;
  std::uint64_t last_ack_seq() const noexcept { return last_ack_seq_; }
  std::optional<std::uint64_t> last_ack_at_ms() const noexcept {
    return last_ack_at_ms_ ? std::optional<std::uint64_t>(last_ack_at_ms_) : std::nullopt;
  }

 private:
  // Seq order; null while empty: an idle rig's outbox is 8 bytes, not a vector's 24
  // (RigSession's size class, docs/PERFORMANCE.md).
  std::unique_ptr<std::vector<OutboxEntry>> entries_;
  std::uint64_t next_seq_ = 1;
  std::uint64_t last_ack_seq_ = 0;
  std::uint64_t last_ack_at_ms_ = 0;
  std::uint32_t unsent_ = 0;           // index of the first unsent entry
};

// "outbox full (128/128), oldest queued cmd age 47s"
std::string outbox_full_detail(std::size_t depth, std::size_t capacity, std::uint64_t oldest_age_ms);

}  // namespace fleetlink::broker
