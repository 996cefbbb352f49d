#include "store/record_codec.hpp"

#include <limits>

namespace fleetlink::broker::store_codec {
namespace {

// ---- writing ----

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(static_cast<std::uint8_t>(v) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_signed(std::string& out, std::int64_t v) {
  put_varint(out, (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63));
}

void put_bytes(std::string& out, const void* data, std::size_t n) {
  put_varint(out, n);
  out.append(static_cast<const char*>(data), n);
}

void put_string(std::string& out, std::string_view s) { put_bytes(out, s.data(), s.size()); }

// 0 for absent, value + 1 otherwise: an optional costs one byte when absent, and
// UINT64_MAX (which nothing real holds) is the only value it cannot carry.
void put_optional(std::string& out, const std::optional<std::uint64_t>& v) {
  put_varint(out, v ? *v + 1 : 0);
}

void put_map(std::string& out, const StringMap& m) {
  put_varint(out, m.size());
  for (const auto& [k, v] : m) {
    put_string(out, k);
    put_string(out, v);
  }
}

// ---- reading ----

class Reader {
 public:
  Reader(std::string_view blob, const char* what) : p_(blob.data()), begin_(blob.data()),
                                                    end_(blob.data() + blob.size()), what_(what) {}

  bool varint(std::uint64_t& v) {
    v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) return fail("ends inside a number");
      const auto byte = static_cast<std::uint8_t>(*p_++);
      if (shift == 63 && byte > 1) return fail("holds a number larger than 64 bits");
      v |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return true;
    }
    return fail("holds a number larger than 64 bits");
  }
  template <typename T>
  bool unsigned_as(T& out) {
    std::uint64_t v = 0;
    if (!varint(v)) return false;
    if constexpr (sizeof(T) < sizeof(std::uint64_t)) {
      if (v > std::numeric_limits<T>::max()) return fail("holds a number out of range");
    }
    out = static_cast<T>(v);
    return true;
  }
  bool signed32(std::int32_t& out) {
    std::uint64_t z = 0;
    if (!varint(z)) return false;
    const auto v = static_cast<std::int64_t>((z >> 1) ^ (~(z & 1) + 1));
    if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max())
      return fail("holds a number out of range");
    out = static_cast<std::int32_t>(v);
    return true;
  }
  bool boolean(bool& out) {
    std::uint64_t v = 0;
    if (!varint(v)) return false;
    if (v > 1) return fail("holds a flag that is neither 0 nor 1");
    out = v == 1;
    return true;
  }
  bool optional(std::optional<std::uint64_t>& out) {
    std::uint64_t v = 0;
    if (!varint(v)) return false;
    out = v == 0 ? std::nullopt : std::optional<std::uint64_t>(v - 1);
    return true;
  }
  bool view(std::string_view& out) {
    std::uint64_t n = 0;
    if (!varint(n)) return false;
    if (n > static_cast<std::uint64_t>(end_ - p_)) return fail("has a length that runs past its end");
    out = std::string_view(p_, static_cast<std::size_t>(n));
    p_ += n;
    return true;
  }
  bool string(std::string& out) {
    std::string_view v;
    if (!view(v)) return false;
    out.assign(v);
    return true;
  }
  bool bytes(Bytes& out) {
    std::string_view v;
    if (!view(v)) return false;
    out.assign(v.begin(), v.end());
    return true;
  }
  // Every item takes at least `min_item` bytes: a count larger than what is left
  // is refused before anything is allocated for it.
  bool count(std::size_t& out, std::size_t min_item) {
    std::uint64_t n = 0;
    if (!varint(n)) return false;
    if (n > static_cast<std::uint64_t>(end_ - p_) / min_item) return fail("has a count that runs past its end");
    out = static_cast<std::size_t>(n);
    return true;
  }
  bool map(StringMap& out) {
    std::size_t n = 0;
    if (!count(n, 2)) return false;
    out.clear();
    for (std::size_t i = 0; i < n; ++i) {
      std::string k, v;
      if (!string(k) || !string(v)) return false;
      out.insert_or_assign(std::move(k), std::move(v));
    }
    return true;
  }
  bool version(std::uint8_t known) {
    std::uint8_t v = 0;
    return version(known, v);
  }
  bool version(std::uint8_t known, std::uint8_t& v) {
    if (p_ == end_) return fail("is empty");
    v = static_cast<std::uint8_t>(*p_++);
    if (v == 0) return fail("has no layout version");
    if (v > known) {
      return fail("has layout version " + std::to_string(v) + ", newer than this broker reads (" +
                  std::to_string(known) + "): written by a newer fleetlink-broker");
    }
    return true;
  }
  Expected<void> finish() {
    if (ok_ && p_ != end_) fail("has " + std::to_string(end_ - p_) + " bytes after its last field");
    if (ok_) return {};
    return error();
  }
  Expected<void> error() const { return make_error(Errc::malformed, std::string(what_) + " " + why_); }

 private:
  bool fail(std::string why) {
    if (ok_) {
      why_ = std::move(why) + " (at byte " + std::to_string(p_ - begin_) + ")";
      ok_ = false;
    }
    p_ = end_;
    return false;
  }

  const char* p_;
  const char* begin_;
  const char* end_;
  const char* what_;
  bool ok_ = true;
  std::string why_;
};

}  // namespace

std::int64_t state_code(CommandState s) noexcept {
  switch (s) {
    case CommandState::queued: return 0;
    case CommandState::sent: return 1;
    case CommandState::acked: return 2;
    case CommandState::running: return 3;
    case CommandState::succeeded: return 4;
    case CommandState::failed: return 5;
    case CommandState::timed_out: return 6;
    case CommandState::cancelled: return 7;
    case CommandState::undeliverable: return 8;
    case CommandState::rejected: return 9;
    case CommandState::interrupted: return 10;
  }
  return 0;
}

std::optional<CommandState> state_from_code(std::int64_t code) noexcept {
  switch (code) {
    case 0: return CommandState::queued;
    case 1: return CommandState::sent;
    case 2: return CommandState::acked;
    case 3: return CommandState::running;
    case 4: return CommandState::succeeded;
    case 5: return CommandState::failed;
    case 6: return CommandState::timed_out;
    case 7: return CommandState::cancelled;
    case 8: return CommandState::undeliverable;
    case 9: return CommandState::rejected;
    case 10: return CommandState::interrupted;
    default: return std::nullopt;
  }
}

// ---- commands.body, version 2 ----
//   kind, args, seq, deliver_by_ms, timeout_s, acked_boot_id, cancel_requested_at_ms?,
//   detail, duplicate, streamed_bytes, stream_next_offset, stream_gap_bytes,
//   operator_name (version 2; a version 1 record, written before it, has none)

void encode_command_body(const CommandView& v, std::string& out) {
  out.clear();
  out.push_back(static_cast<char>(kCommandBodyVersion));
  put_string(out, v.kind);
  put_map(out, v.args);
  put_varint(out, v.seq);
  put_varint(out, v.deliver_by_ms);
  put_varint(out, v.timeout_s);
  put_string(out, v.acked_boot_id);
  put_optional(out, v.cancel_requested_at_ms);
  put_string(out, v.detail);
  put_varint(out, v.duplicate ? 1 : 0);
  put_varint(out, v.streamed_bytes);
  put_varint(out, v.stream_next_offset);
  put_varint(out, v.stream_gap_bytes);
  put_string(out, v.operator_name);
}

Expected<void> decode_command_body(std::string_view blob, CommandView& v) {
  Reader r(blob, "command record");
  std::uint8_t version = 0;
  if (!r.version(kCommandBodyVersion, version)) return r.error();
  if (!(r.string(v.kind) && r.map(v.args) && r.unsigned_as(v.seq) && r.unsigned_as(v.deliver_by_ms) &&
        r.unsigned_as(v.timeout_s) && r.string(v.acked_boot_id) && r.optional(v.cancel_requested_at_ms) &&
        r.string(v.detail) && r.boolean(v.duplicate) && r.unsigned_as(v.streamed_bytes) &&
        r.unsigned_as(v.stream_next_offset) && r.unsigned_as(v.stream_gap_bytes)))
    return r.error();
  v.operator_name.clear();
  if (version >= 2 && !r.string(v.operator_name)) return r.error();
  return r.finish();
}

// ---- results.body, version 1 ----
//   flags (1: a RESULT, 2: a NACK),
//   [RESULT: status name, exit_code, signal, output, truncated, dropped_bytes,
//            started_at_ms, finished_at_ms, detail]
//   [NACK: seq, reason name, detail, expected_seq]
//   streamed_output
// Status and reason travel as their protocol names, which docs/PROTOCOL.md fixes,
// rather than as enum numbers, which nothing fixes.

namespace {
constexpr std::uint64_t kHasResult = 1;
constexpr std::uint64_t kHasNack = 2;
}  // namespace

void encode_result_body(const CommandView& v, std::string& out) {
  out.clear();
  out.push_back(static_cast<char>(kResultBodyVersion));
  put_varint(out, (v.result ? kHasResult : 0) | (v.nack ? kHasNack : 0));
  if (v.result) {
    const msg::Result& res = *v.result;
    put_string(out, fleetlink::to_string(res.status));
    put_signed(out, res.exit_code);
    put_signed(out, res.signal);
    put_bytes(out, res.output.data(), res.output.size());
    put_varint(out, res.truncated ? 1 : 0);
    put_varint(out, res.dropped_bytes);
    put_varint(out, res.started_at_ms);
    put_varint(out, res.finished_at_ms);
    put_string(out, res.detail);
  }
  if (v.nack) {
    const msg::Nack& n = *v.nack;
    put_varint(out, n.seq);
    put_string(out, fleetlink::to_string(n.reason));
    put_string(out, n.detail);
    put_varint(out, n.expected_seq);
  }
  put_string(out, v.streamed_output);
}

Expected<void> decode_result_body(std::string_view blob, CommandView& v) {
  Reader r(blob, "command result");
  if (!r.version(kResultBodyVersion)) return r.error();
  std::uint64_t flags = 0;
  if (!r.varint(flags)) return r.error();
  if (flags & ~(kHasResult | kHasNack)) return make_error(Errc::malformed, "command result has unknown flags");
  if (flags & kHasResult) {
    msg::Result res;
    res.cmd_id = v.cmd_id;
    std::string_view status;
    if (!(r.view(status) && r.signed32(res.exit_code) && r.signed32(res.signal) && r.bytes(res.output) &&
          r.boolean(res.truncated) && r.unsigned_as(res.dropped_bytes) && r.unsigned_as(res.started_at_ms) &&
          r.unsigned_as(res.finished_at_ms) && r.string(res.detail)))
      return r.error();
    const auto s = status_from_string(status);
    if (!s) return make_error(Errc::malformed, "command result has an unknown status '" + std::string(status) + "'");
    res.status = *s;
    v.result = std::move(res);
  } else {
    v.result.reset();
  }
  if (flags & kHasNack) {
    msg::Nack n;
    n.cmd_id = v.cmd_id;
    std::string_view reason;
    if (!(r.unsigned_as(n.seq) && r.view(reason) && r.string(n.detail) && r.unsigned_as(n.expected_seq)))
      return r.error();
    const auto why = nack_reason_from_string(reason);
    if (!why) return make_error(Errc::malformed, "command result has an unknown NACK reason '" + std::string(reason) + "'");
    n.reason = *why;
    v.nack = std::move(n);
  } else {
    v.nack.reset();
  }
  if (!r.string(v.streamed_output)) return r.error();
  return r.finish();
}

// ---- rigs.body, version 1 ----
//   boot_id, agent_version, labels, kinds, broker_id

void encode_rig_body(const RigRecord& rig, std::string& out) {
  out.clear();
  out.push_back(static_cast<char>(kRigBodyVersion));
  put_string(out, rig.boot_id);
  put_string(out, rig.agent_version);
  put_map(out, rig.labels);
  put_varint(out, rig.kinds.size());
  for (const std::string& k : rig.kinds) put_string(out, k);
  put_string(out, rig.broker_id);
}

Expected<void> decode_rig_body(std::string_view blob, RigRecord& rig) {
  Reader r(blob, "rig record");
  if (!r.version(kRigBodyVersion)) return r.error();
  std::size_t kinds = 0;
  if (!(r.string(rig.boot_id) && r.string(rig.agent_version) && r.map(rig.labels) && r.count(kinds, 1)))
    return r.error();
  rig.kinds.clear();
  rig.kinds.reserve(kinds);
  for (std::size_t i = 0; i < kinds; ++i) {
    if (!r.string(rig.kinds.emplace_back())) return r.error();
  }
  if (!r.string(rig.broker_id)) return r.error();
  return r.finish();
}

}  // namespace fleetlink::broker::store_codec
