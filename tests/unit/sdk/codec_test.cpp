// Codec: round trips, determinism, and every way a frame can be wrong.
#include <doctest/doctest.h>

#include <msgpack.hpp>

#include <cstring>
#include <string>

#include "fleetlink/codec.hpp"
#include "sample_messages.hpp"

using namespace fleetlink;

namespace {

// Build a frame by hand with msgpack-cxx, for shapes encode() would never make.
struct FrameBuilder {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk{buf};
  Bytes bytes() const {
    const auto* p = reinterpret_cast<const std::uint8_t*>(buf.data());
    return Bytes(p, p + buf.size());
  }
};

Errc decode_error(const Bytes& b, const DecodeOptions& opts = {}) {
  const auto r = decode(b, opts);
  if (r) return Errc::ok;
  return r.error().code;
}

// A valid command frame with `extra` map entries supplied by `fill` and the given
// number of map entries declared.
template <typename Fill>
Bytes command_frame(std::uint32_t entries, Fill fill) {
  FrameBuilder f;
  f.pk.pack_map(entries);
  fill(f.pk);
  return f.bytes();
}

void pack_kv(msgpack::packer<msgpack::sbuffer>& pk, const char* k, const char* v) {
  pk.pack(std::string(k));
  pk.pack(std::string(v));
}

}  // namespace

TEST_CASE("every message survives a round trip") {
  for (const auto& m : test::sample_messages()) {
    CAPTURE(type_name(m));
    const Bytes wire = encode(m);
    const auto back = decode(wire);
    if (!back) FAIL(back.error().detail);
    CHECK(*back == m);
    CHECK(encode(*back) == wire);
  }
}

TEST_CASE("default-constructed fields round trip too") {
  msg::Goaway g;
  const auto back = decode(encode(g));
  REQUIRE(back);
  CHECK(std::get<msg::Goaway>(*back) == g);
}

TEST_CASE("encoding is deterministic and starts with v then t") {
  for (const auto& m : test::sample_messages()) {
    const Bytes a = encode(m);
    const Bytes b = encode(Message(m));
    CHECK(a == b);
    // fixmap header, "v" (0xa1 0x76), 1, "t" (0xa1 0x74)
    REQUIRE(a.size() > 6);
    CHECK((a[0] & 0xf0) == 0x80);
    CHECK(a[1] == 0xa1);
    CHECK(a[2] == 'v');
    CHECK(a[3] == 0x01);
    CHECK(a[4] == 0xa1);
    CHECK(a[5] == 't');
  }
}

TEST_CASE("integers use their smallest msgpack form") {
  msg::Ack a{1, test::kCmdId, false};
  const Bytes wire = encode(a);
  // "seq" key then positive fixint 1
  const std::string s(wire.begin(), wire.end());
  const auto pos = s.find("\xa3seq");
  REQUIRE(pos != std::string::npos);
  CHECK(static_cast<std::uint8_t>(s[pos + 4]) == 0x01);
  msg::Result r;
  r.cmd_id = test::kCmdId;
  r.exit_code = -1;
  const Bytes rw = encode(r);
  const std::string rs(rw.begin(), rw.end());
  const auto epos = rs.find("\xa9" "exit_code");
  REQUIRE(epos != std::string::npos);
  CHECK(static_cast<std::uint8_t>(rs[epos + 10]) == 0xff);  // negative fixint -1
}

TEST_CASE("truncation at every byte offset is an error, never a crash") {
  for (const auto& m : test::sample_messages()) {
    const Bytes wire = encode(m);
    for (std::size_t n = 0; n < wire.size(); ++n) {
      const Bytes cut(wire.begin(), wire.begin() + static_cast<std::ptrdiff_t>(n));
      const auto r = decode(cut);
      CHECK_FALSE(r.has_value());
      if (!r) CHECK(r.error().code == Errc::truncated);
    }
  }
}

TEST_CASE("garbage is an error, never a crash") {
  std::uint64_t state = 0x9e3779b97f4a7c15ULL;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (int i = 0; i < 20000; ++i) {
    Bytes b(next() % 64);
    for (auto& c : b) c = static_cast<std::uint8_t>(next());
    (void)decode(b);  // must simply return
  }
  // Flip each byte of valid frames.
  for (const auto& m : test::sample_messages()) {
    const Bytes wire = encode(m);
    for (std::size_t i = 0; i < wire.size(); ++i) {
      for (std::uint8_t x : {0x01, 0x80, 0xff}) {
        Bytes b = wire;
        b[i] ^= x;
        (void)decode(b);
      }
    }
  }
  CHECK(decode_error(Bytes{0xc1}) == Errc::malformed);             // never-used byte
  CHECK(decode_error(Bytes{}) == Errc::truncated);
  CHECK(decode_error(Bytes{0x93, 0x01, 0x02, 0x03}) == Errc::malformed);  // array, not map
  CHECK(decode_error(Bytes{0xa3, 'a', 'b', 'c'}) == Errc::malformed);     // str, not map
}

TEST_CASE("trailing bytes after the map are malformed") {
  Bytes wire = encode(msg::Cancel{test::kCmdId});
  wire.push_back(0xc0);
  CHECK(decode_error(wire) == Errc::malformed);
}

TEST_CASE("oversized frames are refused before parsing") {
  const Bytes wire = encode(msg::Cancel{test::kCmdId});
  DecodeOptions small;
  small.max_frame_bytes = wire.size() - 1;
  CHECK(decode_error(wire, small) == Errc::too_large);
  small.max_frame_bytes = wire.size();
  CHECK(decode_error(wire, small) == Errc::ok);
}

TEST_CASE("huge declared lengths do not allocate or crash") {
  // map32 with 4 billion entries, str32 / bin32 / array32 claiming 4 GiB.
  CHECK(decode_error(Bytes{0xdf, 0xff, 0xff, 0xff, 0xff}) != Errc::ok);
  CHECK(decode_error(Bytes{0x81, 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'}) != Errc::ok);
  CHECK(decode_error(Bytes{0x81, 0xa1, 'x', 0xc6, 0xff, 0xff, 0xff, 0xff}) != Errc::ok);
  CHECK(decode_error(Bytes{0x81, 0xa1, 'x', 0xdd, 0xff, 0xff, 0xff, 0xff}) != Errc::ok);
  CHECK(decode_error(Bytes{0x81, 0xa1, 'x', 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01}) != Errc::ok);
}

TEST_CASE("nesting bombs are refused") {
  Bytes deep_arrays(100000, 0x91);  // [[[[...]]]]
  deep_arrays.push_back(0xc0);
  CHECK(decode_error(deep_arrays) != Errc::ok);
  Bytes deep_maps;
  for (int i = 0; i < 30000; ++i) {
    deep_maps.push_back(0x81);
    deep_maps.push_back(0xa1);
    deep_maps.push_back('k');
  }
  deep_maps.push_back(0xc0);
  CHECK(decode_error(deep_maps) != Errc::ok);
}

TEST_CASE("version, type and field errors get their own codes") {
  auto frame = [](auto fill, std::uint32_t n) { return command_frame(n, fill); };
  // no v
  CHECK(decode_error(frame([](auto& pk) { pack_kv(pk, "t", "cancel"); }, 1)) ==
        Errc::missing_field);
  // v = 2
  CHECK(decode_error(frame(
            [](auto& pk) {
              pk.pack(std::string("v"));
              pk.pack(2);
              pack_kv(pk, "t", "cancel");
              pack_kv(pk, "cmd_id", test::kCmdId);
            },
            3)) == Errc::unsupported_version);
  // v as string
  CHECK(decode_error(frame(
            [](auto& pk) {
              pack_kv(pk, "v", "1");
              pack_kv(pk, "t", "cancel");
            },
            2)) == Errc::bad_field);
  // unknown type
  CHECK(decode_error(frame(
            [](auto& pk) {
              pk.pack(std::string("v"));
              pk.pack(1);
              pack_kv(pk, "t", "teleport");
            },
            2)) == Errc::unknown_type);
  // t not a string
  CHECK(decode_error(frame(
            [](auto& pk) {
              pk.pack(std::string("v"));
              pk.pack(1);
              pk.pack(std::string("t"));
              pk.pack(5);
            },
            2)) == Errc::bad_field);
  // missing required cmd_id
  CHECK(decode_error(frame(
            [](auto& pk) {
              pk.pack(std::string("v"));
              pk.pack(1);
              pack_kv(pk, "t", "cancel");
            },
            2)) == Errc::missing_field);
  // cmd_id of the wrong type
  CHECK(decode_error(frame(
            [](auto& pk) {
              pk.pack(std::string("v"));
              pk.pack(1);
              pack_kv(pk, "t", "cancel");
              pk.pack(std::string("cmd_id"));
              pk.pack(42);
            },
            3)) == Errc::bad_field);
  // cmd_id not a UUID
  CHECK(decode_error(frame(
            [](auto& pk) {
              pk.pack(std::string("v"));
              pk.pack(1);
              pack_kv(pk, "t", "cancel");
              pack_kv(pk, "cmd_id", "not-a-uuid");
            },
            3)) == Errc::bad_field);
  // duplicate key
  CHECK(decode_error(frame(
            [](auto& pk) {
              pk.pack(std::string("v"));
              pk.pack(1);
              pack_kv(pk, "t", "cancel");
              pack_kv(pk, "cmd_id", test::kCmdId);
              pack_kv(pk, "cmd_id", test::kCmdId);
            },
            4)) == Errc::malformed);
  // non-string key
  CHECK(decode_error(frame(
            [](auto& pk) {
              pk.pack(std::string("v"));
              pk.pack(1);
              pack_kv(pk, "t", "cancel");
              pack_kv(pk, "cmd_id", test::kCmdId);
              pk.pack(7);
              pk.pack(7);
            },
            4)) == Errc::malformed);
}

TEST_CASE("unknown fields are ignored, known ones still checked") {
  const Bytes wire = command_frame(5, [](auto& pk) {
    pk.pack(std::string("v"));
    pk.pack(1);
    pack_kv(pk, "t", "cancel");
    pk.pack(std::string("future_field"));
    pk.pack_array(2);
    pk.pack(1);
    pk.pack_map(1);
    pack_kv(pk, "a", "b");
    pack_kv(pk, "cmd_id", test::kCmdId);
    pk.pack(std::string("another"));
    pk.pack_nil();
  });
  const auto r = decode(wire);
  REQUIRE(r);
  CHECK(std::get<msg::Cancel>(*r).cmd_id == test::kCmdId);
}

TEST_CASE("optional fields take their defaults when absent") {
  const Bytes wire = command_frame(5, [](auto& pk) {
    pk.pack(std::string("v"));
    pk.pack(1);
    pack_kv(pk, "t", "command");
    pk.pack(std::string("seq"));
    pk.pack(3);
    pack_kv(pk, "cmd_id", test::kCmdId);
    pack_kv(pk, "kind", "dmesg");
  });
  const auto r = decode(wire);
  REQUIRE(r);
  const auto& c = std::get<msg::Command>(*r);
  CHECK(c.seq == 3);
  CHECK(c.args.empty());
  CHECK(c.issued_at_ms == 0);
}

TEST_CASE("result.interrupted: optional, written last, a bool; a RESULT from an older sender reads as false") {
  // What an agent before the field wrote: every other field, no "interrupted".
  const Bytes old_sender = command_frame(12, [](auto& pk) {
    pk.pack(std::string("v"));
    pk.pack(1);
    pack_kv(pk, "t", "result");
    pack_kv(pk, "cmd_id", test::kCmdId);
    pack_kv(pk, "status", "failed");
    for (const char* k : {"exit_code", "signal"}) {
      pk.pack(std::string(k));
      pk.pack(0);
    }
    pk.pack(std::string("output"));
    pk.pack_bin(0);
    pk.pack(std::string("truncated"));
    pk.pack(false);
    for (const char* k : {"dropped_bytes", "started_at_ms", "finished_at_ms"}) {
      pk.pack(std::string(k));
      pk.pack(0);
    }
    pack_kv(pk, "detail", "");
  });
  const auto r = decode(old_sender);
  REQUIRE(r);
  CHECK_FALSE(std::get<msg::Result>(*r).interrupted);

  msg::Result res;
  res.cmd_id = test::kCmdId;
  res.status = msg::Status::failed;
  res.interrupted = true;
  const Bytes wire = encode(res);
  // After "detail", before "artifacts" (added later, last): old receivers skip both as unknown.
  const std::string text(wire.begin(), wire.end());
  const std::string tail = std::string("\xab" "interrupted") + "\xc3" + "\xa9" "artifacts" + "\x90";
  REQUIRE(text.size() > tail.size());
  CHECK(text.substr(text.size() - tail.size()) == tail);
  CHECK(text.find("\xa6" "detail") < text.find("\xab" "interrupted"));
  const auto back = decode(wire);
  REQUIRE(back);
  CHECK(std::get<msg::Result>(*back).interrupted);

  // Anything but a bool is a bad field.
  const Bytes as_int = command_frame(5, [](auto& pk) {
    pk.pack(std::string("v"));
    pk.pack(1);
    pack_kv(pk, "t", "result");
    pack_kv(pk, "cmd_id", test::kCmdId);
    pack_kv(pk, "status", "failed");
    pk.pack(std::string("interrupted"));
    pk.pack(1);
  });
  CHECK(decode_error(as_int) == Errc::bad_field);
}

TEST_CASE("hello_field_problem: one rule per limit, naming the field") {
  auto problem = [](const msg::Hello& h) { return hello_field_problem(h); };
  const msg::Hello good{"rig-1", "1.0", test::kBootId, {{"lab", "b2"}}, {"dmesg", "suite"}};
  CHECK_FALSE(problem(good));
  CHECK(validate(good));
  auto field_of = [&](msg::Hello h) {
    const auto p = problem(h);
    REQUIRE(p);
    CHECK(p->text.starts_with(p->field));  // the sentence starts with what it is about
    // The codec refuses the same HELLO with the same words.
    const auto decoded = decode(encode(h));
    REQUIRE_FALSE(decoded);
    CHECK(decoded.error().detail == p->text);
    CHECK(decoded.error().code == p->code);
    return p->field;
  };
  msg::Hello h = good;
  h.rig_id = std::string(kMaxIdBytes + 1, 'r');
  CHECK(field_of(h) == "rig_id");
  h.rig_id = std::string(kMaxIdBytes, 'r');
  CHECK_FALSE(problem(h));
  h.rig_id = "rig/1";
  CHECK(field_of(h) == "rig_id");
  h = good;
  h.agent_version = std::string(kMaxVersionBytes + 1, 'v');
  CHECK(field_of(h) == "agent_version");
  h = good;
  h.boot_id = "6f1c1a52-1b0e-4d4e-9a6c-0e1a2b3c4d5e";  // a UUID, version 4: not time-ordered
  CHECK(field_of(h) == "boot_id");
  CHECK(problem(h)->code == Errc::bad_field);
  h = good;
  h.labels.clear();
  for (std::size_t i = 0; i < kMaxMapEntries; ++i) h.labels["k" + std::to_string(i)] = "v";
  CHECK_FALSE(problem(h));
  h.labels["one-more"] = "v";
  CHECK(field_of(h) == "labels");
  CHECK(problem(h)->code == Errc::too_large);
  h = good;
  h.labels = {{std::string(kMaxMapKeyBytes + 1, 'k'), "v"}};
  CHECK(field_of(h) == "labels");
  h.labels = {{"", "v"}};
  CHECK(field_of(h) == "labels");
  h.labels = {{"k", std::string(kMaxLabelValueBytes + 1, 'v')}};
  CHECK(field_of(h) == "labels");
  CHECK(problem(h)->text == "labels 'k': value longer than 256 bytes");
  h.labels = {{"k", std::string(kMaxLabelValueBytes, 'v')}};
  CHECK_FALSE(problem(h));
  h = good;
  h.kinds.assign(kMaxKinds, "k");
  CHECK_FALSE(problem(h));
  h.kinds.push_back("k");
  CHECK(field_of(h) == "kinds");
  CHECK(problem(h)->code == Errc::too_large);
  h.kinds = {"ok", "not ok"};
  CHECK(field_of(h) == "kinds");
  h.kinds = {std::string(kMaxIdBytes + 1, 'k')};
  CHECK(field_of(h) == "kinds");
}

TEST_CASE("field limits") {
  auto bad = [](Message m) {
    const auto r = decode(encode(m));
    return r ? Errc::ok : r.error().code;
  };
  msg::Hello h{"rig-1", "1.0", test::kBootId, {}, {}};
  CHECK(bad(h) == Errc::ok);
  h.rig_id = std::string(65, 'a');
  CHECK(bad(h) == Errc::too_large);
  h.rig_id = "rig 1";
  CHECK(bad(h) == Errc::bad_field);
  h.rig_id = "";
  CHECK(bad(h) == Errc::bad_field);
  h.rig_id = std::string(64, 'a');
  CHECK(bad(h) == Errc::ok);
  h.kinds.assign(kMaxKinds + 1, "k");
  CHECK(bad(h) == Errc::too_large);
  h.kinds.assign(kMaxKinds, "k");
  CHECK(bad(h) == Errc::ok);
  for (std::size_t i = 0; i <= kMaxMapEntries; ++i) h.labels["k" + std::to_string(i)] = "v";
  CHECK(bad(h) == Errc::too_large);
  h.labels = {{std::string(kMaxMapKeyBytes + 1, 'k'), "v"}};
  CHECK(bad(h) == Errc::too_large);
  h.labels = {{"k", std::string(kMaxMapValueBytes + 1, 'v')}};
  CHECK(bad(h) == Errc::too_large);
  // A label's value is bounded tighter than a command's args (kMaxLabelValueBytes).
  h.labels = {{"k", std::string(kMaxLabelValueBytes + 1, 'v')}};
  CHECK(bad(h) == Errc::too_large);
  h.labels = {{"k", std::string(kMaxLabelValueBytes, 'v')}};
  CHECK(bad(h) == Errc::ok);
  h.labels = {{"k", "\xff\xfe"}};
  CHECK(bad(h) == Errc::bad_field);  // not UTF-8
  h.labels = {{"k", "gr\xc3\xbc\xc3\x9f"}};
  CHECK(bad(h) == Errc::ok);

  msg::Result r;
  r.cmd_id = test::kCmdId;
  r.output.assign(kMaxResultOutput, 'x');
  CHECK(bad(r) == Errc::ok);
  r.output.push_back('x');
  CHECK(bad(r) == Errc::too_large);

  msg::OutputChunk c{test::kCmdId, 0, Bytes(kMaxChunkBytes, 'x')};
  CHECK(bad(c) == Errc::ok);
  c.data.push_back('x');
  CHECK(bad(c) == Errc::too_large);

  msg::Command cmd{0, test::kCmdId, "dmesg", {}, 0};
  CHECK(bad(cmd) == Errc::bad_field);  // seq starts at 1

  msg::Nack n{0, "", msg::NackReason::malformed, "undecodable", 0};
  CHECK(bad(n) == Errc::ok);  // a nack for a frame nobody could read has no cmd_id
  CHECK(validate(n).has_value());
  CHECK_FALSE(validate(msg::Cancel{"x"}).has_value());
}

TEST_CASE("unknown enum strings are bad fields") {
  Bytes wire = encode(msg::Nack{1, test::kCmdId, msg::NackReason::busy, "", 0});
  const std::string needle = "\xa4" "busy";
  std::string s(wire.begin(), wire.end());
  const auto pos = s.find(needle);
  REQUIRE(pos != std::string::npos);
  s.replace(pos, needle.size(), "\xa4" "lazy");
  CHECK(decode_error(Bytes(s.begin(), s.end())) == Errc::bad_field);
}

TEST_CASE("many unknown top-level keys are fine up to the parser bound") {
  auto frame_with_extra = [](std::uint32_t extra) {
    return command_frame(3 + extra, [extra](auto& pk) {
      pk.pack(std::string("v"));
      pk.pack(1);
      pack_kv(pk, "t", "cancel");
      pack_kv(pk, "cmd_id", test::kCmdId);
      for (std::uint32_t i = 0; i < extra; ++i) {
        pk.pack("x" + std::to_string(i));
        pk.pack(i);
      }
    });
  };
  CHECK(decode_error(frame_with_extra(1000)) == Errc::ok);
  CHECK(decode_error(frame_with_extra(1022)) == Errc::too_large);  // 1025 entries > 1024
}

TEST_CASE("encode_to appends the same bytes encode() returns") {
  msg::Ack ack;
  ack.seq = 7;
  ack.cmd_id = "01a00000-0000-7000-8000-000000000001";
  const Bytes whole = encode(ack);
  Bytes buf = {0xAA, 0xBB, 0xCC};  // room a sender keeps in front (lws's LWS_PRE)
  encode_to(ack, buf);
  REQUIRE(buf.size() == 3 + whole.size());
  CHECK(buf[0] == 0xAA);
  CHECK(Bytes(buf.begin() + 3, buf.end()) == whole);
  const auto back = decode(std::span<const std::uint8_t>(buf.data() + 3, buf.size() - 3));
  REQUIRE(back);
  CHECK(std::get<msg::Ack>(*back).seq == 7);
}

TEST_CASE("peek_command: what a refused COMMAND frame still says") {
  const auto frame = [](auto fill, std::uint32_t n) { return command_frame(n, fill); };
  // args is not a map: decode refuses it, peek reads seq and cmd_id.
  const Bytes bad_args = frame(
      [](auto& pk) {
        pack_kv(pk, "t", "command");
        pk.pack(std::string("v"));
        pk.pack(1);
        pk.pack(std::string("seq"));
        pk.pack(7);
        pack_kv(pk, "cmd_id", "01a00000-0000-7000-8000-000000000001");
        pack_kv(pk, "kind", "dmesg");
        pk.pack(std::string("args"));
        pk.pack_array(1);
        pk.pack(1);
      },
      6);
  REQUIRE_FALSE(decode(bad_args));
  const auto p = peek_command(bad_args, 4096);
  REQUIRE(p);
  CHECK(p->seq == 7u);
  CHECK(p->cmd_id == "01a00000-0000-7000-8000-000000000001");
  // seq of the wrong type: no seq; an over-long cmd_id: none.
  const Bytes bad_seq = frame(
      [](auto& pk) {
        pack_kv(pk, "t", "command");
        pack_kv(pk, "seq", "seven");
        pack_kv(pk, "cmd_id", std::string(129, 'x').c_str());
      },
      3);
  const auto q = peek_command(bad_seq, 4096);
  REQUIRE(q);
  CHECK_FALSE(q->seq);
  CHECK(q->cmd_id.empty());
  // Not a command, not a map, not msgpack, too big: nothing to answer.
  CHECK_FALSE(peek_command(frame([](auto& pk) { pack_kv(pk, "t", "cancel"); }, 1), 4096));
  FrameBuilder arr;
  arr.pk.pack_array(1);
  arr.pk.pack(1);
  CHECK_FALSE(peek_command(arr.bytes(), 4096));
  const Bytes junk = {0xc1, 0xc1, 0x00};
  CHECK_FALSE(peek_command(junk, 4096));
  CHECK_FALSE(peek_command(bad_args, 8));
  CHECK_FALSE(peek_command(Bytes{}, 4096));
}
