// The store's blob layouts: every field round-trips, and a blob this code cannot
// read exactly (from a newer broker, cut short, or garbage) is an Error, never a
// crash or a half-filled record.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "store/record_codec.hpp"
#include "store/store_rows.hpp"

using namespace fleetlink;
using namespace fleetlink::broker;
namespace codec = fleetlink::broker::store_codec;

namespace {

CommandView full_command() {
  CommandView v;
  v.cmd_id = "0190f5a2-1c3b-7d4e-8f00-123456789abc";
  v.rig_id = "rig-0414";
  v.kind = "suite";
  v.args = {{"name", "suite-7"}, {"timeout", "2400"}, {"", "empty key"}, {"unicode", "gr\xc3\xbc\xc3\x9f"}};
  v.idempotency_key = "client-42";
  v.job_id = "0190f5a2-0000-7000-8000-000000000001";
  v.operator_name = "alice";
  v.seq = 0xFFFF'FFFF'FFFFULL;
  v.attempts = 3;
  v.state = CommandState::failed;
  v.enqueued_at_ms = 1'733'000'000'000;
  v.sent_at_ms = 1'733'000'000'005;
  v.acked_at_ms = 1'733'000'000'010;
  v.running_at_ms = 1'733'000'000'020;
  v.finished_at_ms = 1'733'000'040'000;
  v.deliver_by_ms = 1'733'000'060'000;
  v.timeout_s = 2400;
  v.acked_boot_id = "0190f5a2-aaaa-7bbb-8ccc-dddddddddddd";
  v.cancel_requested_at_ms = 0;  // present, and zero
  v.detail = "exit 3";
  v.duplicate = true;
  msg::Result r;
  r.cmd_id = v.cmd_id;
  r.status = msg::Status::failed;
  r.exit_code = -3;
  r.signal = 9;
  r.output = Bytes{0, 1, 2, 0xFF, 0x80};
  r.truncated = true;
  r.dropped_bytes = 77;
  r.started_at_ms = 11;
  r.finished_at_ms = 12;
  r.detail = "killed";
  v.result = r;
  msg::Nack n;
  n.cmd_id = v.cmd_id;
  n.seq = 9;
  n.reason = msg::NackReason::seq_gap;
  n.detail = "gap";
  n.expected_seq = 8;
  v.nack = n;
  v.streamed_output = std::string("line 1\nline 2\0tail", 18);
  v.streamed_bytes = 1 << 20;
  v.stream_next_offset = (1 << 20) + 5;
  v.stream_gap_bytes = 5;
  return v;
}

void check_same(const CommandView& a, const CommandView& b) {
  CHECK(a.cmd_id == b.cmd_id);
  CHECK(a.rig_id == b.rig_id);
  CHECK(a.kind == b.kind);
  CHECK(a.args == b.args);
  CHECK(a.idempotency_key == b.idempotency_key);
  CHECK(a.job_id == b.job_id);
  CHECK(a.seq == b.seq);
  CHECK(a.attempts == b.attempts);
  CHECK(a.state == b.state);
  CHECK(a.enqueued_at_ms == b.enqueued_at_ms);
  CHECK(a.sent_at_ms == b.sent_at_ms);
  CHECK(a.acked_at_ms == b.acked_at_ms);
  CHECK(a.running_at_ms == b.running_at_ms);
  CHECK(a.finished_at_ms == b.finished_at_ms);
  CHECK(a.deliver_by_ms == b.deliver_by_ms);
  CHECK(a.timeout_s == b.timeout_s);
  CHECK(a.acked_boot_id == b.acked_boot_id);
  CHECK(a.cancel_requested_at_ms == b.cancel_requested_at_ms);
  CHECK(a.detail == b.detail);
  CHECK(a.duplicate == b.duplicate);
  CHECK(a.operator_name == b.operator_name);
  CHECK(a.nack == b.nack);
  CHECK(a.result == b.result);
  CHECK(a.streamed_output == b.streamed_output);
  CHECK(a.streamed_bytes == b.streamed_bytes);
  CHECK(a.stream_next_offset == b.stream_next_offset);
  CHECK(a.stream_gap_bytes == b.stream_gap_bytes);
}

}  // namespace

TEST_CASE("codec: state codes are fixed, open ones below 4, every state has one") {
  CHECK(codec::state_code(CommandState::queued) == 0);
  CHECK(codec::state_code(CommandState::sent) == 1);
  CHECK(codec::state_code(CommandState::acked) == 2);
  CHECK(codec::state_code(CommandState::running) == 3);
  CHECK(codec::state_code(CommandState::interrupted) == 10);
  for (std::size_t i = 0; i < kCommandStateCount; ++i) {
    const auto s = static_cast<CommandState>(i);
    const auto code = codec::state_code(s);
    CHECK(codec::state_from_code(code) == s);
    CHECK(codec::is_final_code(code) == is_final(s));
  }
  CHECK_FALSE(codec::state_from_code(11));
  CHECK_FALSE(codec::state_from_code(-1));
}

TEST_CASE("codec: a full command round-trips through its row (body and result)") {
  const CommandView v = full_command();
  store_rows::CommandRow row;
  store_rows::to_row(v, true, row);
  CHECK(row.has_result);
  CHECK(static_cast<std::uint8_t>(row.body[0]) == codec::kCommandBodyVersion);
  CHECK(static_cast<std::uint8_t>(row.result_body[0]) == codec::kResultBodyVersion);
  row.committed = true;
  auto back = store_rows::to_view(row);
  REQUIRE(back);
  check_same(*back, v);
  CHECK(back->recorded);
}

TEST_CASE("codec: a default command round-trips; no result unless final and asked") {
  CommandView v;
  v.cmd_id = "c";
  store_rows::CommandRow row;
  store_rows::to_row(v, true, row);
  CHECK_FALSE(row.has_result);  // queued: a result is written when the command ends
  auto back = store_rows::to_view(row);
  REQUIRE(back);
  check_same(*back, v);
  CHECK_FALSE(back->recorded);
  v.state = CommandState::succeeded;
  store_rows::to_row(v, false, row);
  CHECK_FALSE(row.has_result);
}

TEST_CASE("codec: a version 1 command record (before operator_name) still decodes, with no operator") {
  // Bytes as a broker before version 2 wrote them: kind "reboot", args {"a": "b"}, seq 5,
  // deliver_by_ms 1000, timeout_s 30, acked_boot_id "", cancel_requested_at_ms absent,
  // detail "ok", duplicate 0, streamed_bytes 3, stream_next_offset 3, stream_gap_bytes 0.
  const unsigned char bytes[] = {1,                                     // version
                                  6, 'r', 'e', 'b', 'o', 'o', 't',       // kind
                                  1, 1, 'a', 1, 'b',                     // args
                                  5,                                     // seq
                                  0xe8, 0x07,                            // deliver_by_ms 1000
                                  30,                                    // timeout_s
                                  0,                                     // acked_boot_id
                                  0,                                     // cancel_requested_at_ms: absent
                                  2, 'o', 'k',                           // detail
                                  0,                                     // duplicate
                                  3, 3, 0};                              // streamed, next offset, gap
  const std::string v1(reinterpret_cast<const char*>(bytes), sizeof bytes);
  CommandView out;
  out.operator_name = "stale";  // a decode leaves nothing of what was there
  auto r = codec::decode_command_body(v1, out);
  REQUIRE_MESSAGE(r, (r ? std::string() : r.error().detail));
  CHECK(out.kind == "reboot");
  CHECK(out.args == StringMap{{"a", "b"}});
  CHECK(out.seq == 5);
  CHECK(out.deliver_by_ms == 1000);
  CHECK(out.timeout_s == 30);
  CHECK_FALSE(out.cancel_requested_at_ms);
  CHECK(out.detail == "ok");
  CHECK(out.streamed_bytes == 3);
  CHECK(out.stream_next_offset == 3);
  CHECK(out.operator_name.empty());
  // A version 1 record with the new field after it is refused: version 1 has no such field.
  std::string v1_plus = v1 + std::string(1, static_cast<char>(5)) + "alice";
  CHECK_FALSE(codec::decode_command_body(v1_plus, out));
  // The same fields at version 2 carry the operator; without it the record ends early.
  std::string v2 = v1_plus;
  v2[0] = 2;
  REQUIRE(codec::decode_command_body(v2, out));
  CHECK(out.operator_name == "alice");
  std::string v2_short = v1;
  v2_short[0] = 2;
  CHECK_FALSE(codec::decode_command_body(v2_short, out));
}

TEST_CASE("codec: the operator is written in the command record") {
  CommandView v = full_command();
  std::string blob;
  codec::encode_command_body(v, blob);
  CommandView back;
  REQUIRE(codec::decode_command_body(blob, back));
  CHECK(back.operator_name == "alice");
  v.operator_name.clear();
  codec::encode_command_body(v, blob);
  REQUIRE(codec::decode_command_body(blob, back));
  CHECK(back.operator_name.empty());
}

TEST_CASE("codec: a rig round-trips") {
  RigRecord r;
  r.rig_id = "rig-1";
  r.boot_id = "boot";
  r.agent_version = "1.2.3";
  r.labels = {{"site", "lab-2"}, {"arch", "arm64"}};
  r.kinds = {"reboot", "dmesg", "suite", ""};
  r.broker_id = "broker-a";
  std::string blob;
  codec::encode_rig_body(r, blob);
  RigRecord back;
  REQUIRE(codec::decode_rig_body(blob, back));
  CHECK(back.boot_id == r.boot_id);
  CHECK(back.agent_version == r.agent_version);
  CHECK(back.labels == r.labels);
  CHECK(back.kinds == r.kinds);
  CHECK(back.broker_id == r.broker_id);
}

TEST_CASE("codec: a blob from a newer broker is refused, saying so") {
  const CommandView v = full_command();
  std::string body, result, rig;
  codec::encode_command_body(v, body);
  codec::encode_result_body(v, result);
  codec::encode_rig_body(RigRecord{}, rig);
  body[0] = static_cast<char>(codec::kCommandBodyVersion + 1);
  result[0] = static_cast<char>(codec::kResultBodyVersion + 1);
  rig[0] = static_cast<char>(codec::kRigBodyVersion + 1);
  CommandView out;
  auto e = codec::decode_command_body(body, out);
  REQUIRE_FALSE(e);
  CHECK(e.error().detail.find("newer fleetlink-broker") != std::string::npos);
  CHECK_FALSE(codec::decode_result_body(result, out));
  RigRecord r;
  CHECK_FALSE(codec::decode_rig_body(rig, r));
  body[0] = 0;
  CHECK_FALSE(codec::decode_command_body(body, out));
}

TEST_CASE("codec: every truncation of every blob is refused") {
  const CommandView v = full_command();
  std::string body, result, rig;
  codec::encode_command_body(v, body);
  codec::encode_result_body(v, result);
  RigRecord r;
  r.labels = {{"a", "b"}};
  r.kinds = {"x", "y"};
  r.boot_id = "boot";
  codec::encode_rig_body(r, rig);
  for (std::size_t n = 0; n < body.size(); ++n) {
    CommandView out;
    CHECK_FALSE(codec::decode_command_body(std::string_view(body).substr(0, n), out));
  }
  for (std::size_t n = 0; n < result.size(); ++n) {
    CommandView out;
    CHECK_FALSE(codec::decode_result_body(std::string_view(result).substr(0, n), out));
  }
  for (std::size_t n = 0; n < rig.size(); ++n) {
    RigRecord out;
    CHECK_FALSE(codec::decode_rig_body(std::string_view(rig).substr(0, n), out));
  }
  // And one byte too many.
  CommandView out;
  auto e = codec::decode_command_body(body + "x", out);
  REQUIRE_FALSE(e);
  CHECK(e.error().detail.find("after its last field") != std::string::npos);
}

TEST_CASE("codec: hand-made malformed blobs") {
  CommandView out;
  RigRecord rig;
  // A length far past the end, a count that cannot fit, an 11-byte varint, a flag of 2.
  CHECK_FALSE(codec::decode_command_body(std::string("\x01\xFF\xFF\xFF\xFF\x0F", 6), out));
  CHECK_FALSE(codec::decode_rig_body(std::string("\x01\x00\x00\xFF\xFF\xFF\xFF\x0F", 8), rig));
  CHECK_FALSE(codec::decode_command_body(std::string("\x01\x00\x00\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\x01", 14), out));
  CHECK_FALSE(codec::decode_command_body(std::string("\x01\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00", 13), out));
  // A valid layout with a status nobody knows.
  std::string result;
  result.push_back(1);
  result.push_back(1);  // flags: a RESULT
  result.push_back(7);
  result += "weird!!";
  result.append(9, '\0');
  auto e = codec::decode_result_body(result, out);
  REQUIRE_FALSE(e);
  CHECK(e.error().detail.find("unknown status") != std::string::npos);
  // Unknown flags.
  CHECK_FALSE(codec::decode_result_body(std::string("\x01\x04\x00", 3), out));
  // The largest 64-bit varint is fine where a 64-bit field is.
  std::string body("\x01\x00\x00", 3);  // kind "", no args
  body += std::string("\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\x01", 10);  // seq = UINT64_MAX
  body += std::string("\x00\x00\x00\x00\x00\x00\x00\x00\x00", 9);
  REQUIRE(codec::decode_command_body(body, out));
  CHECK(out.seq == ~0ULL);
  // ... but not in a 32-bit one (timeout_s).
  std::string body32("\x01\x00\x00\x00\x00", 5);
  body32 += std::string("\xFF\xFF\xFF\xFF\x10", 5);
  body32 += std::string("\x00\x00\x00\x00\x00\x00\x00\x00", 8);
  CHECK_FALSE(codec::decode_command_body(body32, out));
}

TEST_CASE("codec: random bytes and bit flips never crash a decoder") {
  std::mt19937_64 rng(12345);
  const CommandView v = full_command();
  std::string body, result, rig;
  codec::encode_command_body(v, body);
  codec::encode_result_body(v, result);
  codec::encode_rig_body(RigRecord{"r", "b", "v", {{"k", "v"}}, {"a"}, "br", 1, 2}, rig);
  std::size_t accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string blob;
    const int pick = i % 4;
    if (pick == 0) {
      blob.resize(rng() % 64);
      for (char& c : blob) c = static_cast<char>(rng());
      if (!blob.empty() && (rng() & 1)) blob[0] = 1;  // a known version, so the fields are read
    } else {
      blob = pick == 1 ? body : pick == 2 ? result : rig;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) blob[rng() % blob.size()] ^= static_cast<char>(1 << (rng() % 8));
      if (rng() % 3 == 0) blob.resize(rng() % (blob.size() + 1));
    }
    CommandView out;
    RigRecord r;
    accepted += codec::decode_command_body(blob, out).has_value();
    accepted += codec::decode_result_body(blob, out).has_value();
    accepted += codec::decode_rig_body(blob, r).has_value();
  }
  // Some flips land in a string's bytes and still decode: fine, as long as
  // nothing crashed (ASan/UBSan builds check the reads stay in bounds).
  CHECK(accepted < 60000);
}
