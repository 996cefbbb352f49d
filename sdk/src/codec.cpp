// msgpack codec for fleetlink messages.
//
// Wire shape (docs/PROTOCOL.md): one map per frame; "v" first, "t" second, then the
// message's fields in declaration order, every field always present. Each message
// lists its fields once (visit_fields below) and encode, decode and the docs follow
// that one list, so they cannot drift apart.
//
// Decoding never throws. msgpack-cxx reports bad input by exception; every one is
// caught here and turned into an Error. unpack_limit bounds container sizes and
// nesting depth, so a hostile frame cannot make the parser allocate much more than
// the frame's own size or recurse deeply.
#include "fleetlink/codec.hpp"

// msgpack is an implementation detail of libfleetlink: keep its inline functions and
// template instantiations out of the shared library's exported symbols. The C headers
// it pulls in come first, so libc's own functions keep their default visibility
// (hidden undefined references to ntohl or __assert_fail break sanitizer links).
#include <arpa/inet.h>
#include <cassert>
#include <cstdlib>
#include <cstring>
#pragma GCC visibility push(hidden)
#include <msgpack.hpp>
#pragma GCC visibility pop

#include <algorithm>
#include <array>
#include <limits>
#include <new>
#include <optional>
#include <string_view>
#include <type_traits>

#include "fleetlink/artifacts.hpp"
#include "fleetlink/uuid.hpp"

namespace fleetlink {
namespace {

enum class Need : std::uint8_t { required, optional };

// Wire names, in the order of the alternatives of Message.
constexpr std::array<std::string_view, std::variant_size_v<Message>> kTypeNames{
    "hello", "welcome", "command", "ack", "nack", "result", "output", "event", "cancel", "goaway"};

// Parser bounds. Field-level limits are checked after parsing (validate); these only
// keep the generic parser cheap on hostile input, including in unknown fields.
constexpr std::size_t kMaxArrayEntries = 4096;
constexpr std::size_t kMaxMapEntriesAnyLevel = 1024;
constexpr std::size_t kMaxDepth = 16;

// ---- the field lists --------------------------------------------------------

template <typename M, typename F>
void visit_fields(M& m, F& f) {
  using T = std::remove_const_t<M>;
  if constexpr (std::is_same_v<T, msg::Hello>) {
    f("rig_id", m.rig_id, Need::required);
    f("agent_version", m.agent_version, Need::required);
    f("boot_id", m.boot_id, Need::required);
    f("labels", m.labels, Need::optional);
    f("kinds", m.kinds, Need::optional);
  } else if constexpr (std::is_same_v<T, msg::Welcome>) {
    f("broker_id", m.broker_id, Need::required);
    f("session_id", m.session_id, Need::required);
    f("ping_interval_ms", m.ping_interval_ms, Need::optional);
    f("max_frame_bytes", m.max_frame_bytes, Need::optional);
  } else if constexpr (std::is_same_v<T, msg::Command>) {
    f("seq", m.seq, Need::required);
    f("cmd_id", m.cmd_id, Need::required);
    f("kind", m.kind, Need::required);
    f("args", m.args, Need::optional);
    f("issued_at_ms", m.issued_at_ms, Need::optional);
  } else if constexpr (std::is_same_v<T, msg::Ack>) {
    f("seq", m.seq, Need::required);
    f("cmd_id", m.cmd_id, Need::required);
    f("duplicate", m.duplicate, Need::optional);
  } else if constexpr (std::is_same_v<T, msg::Nack>) {
    f("seq", m.seq, Need::required);
    f("cmd_id", m.cmd_id, Need::optional);
    f("reason", m.reason, Need::required);
    f("detail", m.detail, Need::optional);
    f("expected_seq", m.expected_seq, Need::optional);
  } else if constexpr (std::is_same_v<T, msg::Result>) {
    f("cmd_id", m.cmd_id, Need::required);
    f("status", m.status, Need::required);
    f("exit_code", m.exit_code, Need::optional);
    f("signal", m.signal, Need::optional);
    f("output", m.output, Need::optional);
    f("truncated", m.truncated, Need::optional);
    f("dropped_bytes", m.dropped_bytes, Need::optional);
    f("started_at_ms", m.started_at_ms, Need::optional);
    f("finished_at_ms", m.finished_at_ms, Need::optional);
    f("detail", m.detail, Need::optional);
    f("interrupted", m.interrupted, Need::optional);
    f("artifacts", m.artifacts, Need::optional);
  } else if constexpr (std::is_same_v<T, msg::OutputChunk>) {
    f("cmd_id", m.cmd_id, Need::required);
    f("offset", m.offset, Need::required);
    f("data", m.data, Need::required);
  } else if constexpr (std::is_same_v<T, msg::Event>) {
    f("name", m.name, Need::required);
    f("fields", m.fields, Need::optional);
    f("at_ms", m.at_ms, Need::optional);
  } else if constexpr (std::is_same_v<T, msg::Cancel>) {
    f("cmd_id", m.cmd_id, Need::required);
  } else if constexpr (std::is_same_v<T, msg::Goaway>) {
    f("reason", m.reason, Need::optional);
    f("reconnect_after_ms", m.reconnect_after_ms, Need::optional);
  } else {
    static_assert(sizeof(T) == 0, "every message needs a field list");
  }
}

// ---- encoding ---------------------------------------------------------------

// Appends to a Bytes buffer the caller owns (encode_to): no 8 KiB msgpack
// sbuffer and no copy out of it for every frame sent.
struct BytesSink {
  Bytes& out;
  void write(const char* data, std::size_t n) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(data);
    out.insert(out.end(), p, p + n);
  }
};

using Packer = msgpack::packer<BytesSink>;

void put(Packer& pk, std::string_view s) {
  const auto n = static_cast<std::uint32_t>(s.size());
  pk.pack_str(n);
  pk.pack_str_body(s.data(), n);
}
void put(Packer& pk, const std::string& s) { put(pk, std::string_view(s)); }
void put(Packer& pk, std::uint64_t v) { pk.pack_uint64(v); }
void put(Packer& pk, std::uint32_t v) { pk.pack_uint64(v); }
void put(Packer& pk, std::int32_t v) {
  if (v >= 0) {
    pk.pack_uint64(static_cast<std::uint64_t>(v));  // smallest form: positive fixint/uint
  } else {
    pk.pack_int64(v);
  }
}
void put(Packer& pk, bool v) {
  if (v) {
    pk.pack_true();
  } else {
    pk.pack_false();
  }
}
void put(Packer& pk, const Bytes& b) {
  const auto n = static_cast<std::uint32_t>(b.size());
  pk.pack_bin(n);
  pk.pack_bin_body(reinterpret_cast<const char*>(b.data()), n);
}
void put(Packer& pk, const StringMap& m) {  // std::map: keys in byte order, deterministic
  pk.pack_map(static_cast<std::uint32_t>(m.size()));
  for (const auto& [k, v] : m) {
    put(pk, k);
    put(pk, v);
  }
}
void put(Packer& pk, const std::vector<std::string>& list) {
  pk.pack_array(static_cast<std::uint32_t>(list.size()));
  for (const auto& s : list) put(pk, s);
}
void put(Packer& pk, const std::vector<msg::ArtifactRef>& list) {
  pk.pack_array(static_cast<std::uint32_t>(list.size()));
  for (const auto& a : list) {
    pk.pack_map(3);
    put(pk, std::string_view("name"));
    put(pk, a.name);
    put(pk, std::string_view("size"));
    put(pk, a.size);
    put(pk, std::string_view("sha256"));
    put(pk, a.sha256);
  }
}
void put(Packer& pk, msg::NackReason r) { put(pk, std::string_view(to_string(r))); }
void put(Packer& pk, msg::Status s) { put(pk, std::string_view(to_string(s))); }

struct FieldCounter {
  std::uint32_t n = 0;
  template <typename T>
  void operator()(const char*, const T&, Need) { ++n; }
};

struct FieldWriter {
  Packer& pk;
  template <typename T>
  void operator()(const char* name, const T& value, Need) {
    put(pk, std::string_view(name));
    put(pk, value);
  }
};

// ---- decoding ---------------------------------------------------------------

bool read(const msgpack::object& o, std::string& out) {
  if (o.type != msgpack::type::STR) return false;
  out.assign(o.via.str.ptr, o.via.str.size);
  return true;
}
bool read(const msgpack::object& o, std::uint64_t& out) {
  if (o.type != msgpack::type::POSITIVE_INTEGER) return false;
  out = o.via.u64;
  return true;
}
bool read(const msgpack::object& o, std::uint32_t& out) {
  if (o.type != msgpack::type::POSITIVE_INTEGER ||
      o.via.u64 > std::numeric_limits<std::uint32_t>::max()) {
    return false;
  }
  out = static_cast<std::uint32_t>(o.via.u64);
  return true;
}
bool read(const msgpack::object& o, std::int32_t& out) {
  if (o.type == msgpack::type::POSITIVE_INTEGER &&
      o.via.u64 <= static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) {
    out = static_cast<std::int32_t>(o.via.u64);
    return true;
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER &&
      o.via.i64 >= std::numeric_limits<std::int32_t>::min()) {
    out = static_cast<std::int32_t>(o.via.i64);
    return true;
  }
  return false;
}
bool read(const msgpack::object& o, bool& out) {
  if (o.type != msgpack::type::BOOLEAN) return false;
  out = o.via.boolean;
  return true;
}
bool read(const msgpack::object& o, Bytes& out) {
  if (o.type != msgpack::type::BIN) return false;
  const auto* p = reinterpret_cast<const std::uint8_t*>(o.via.bin.ptr);
  out.assign(p, p + o.via.bin.size);
  return true;
}
bool read(const msgpack::object& o, StringMap& out) {
  if (o.type != msgpack::type::MAP) return false;
  out.clear();
  for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
    std::string k;
    std::string v;
    if (!read(o.via.map.ptr[i].key, k) || !read(o.via.map.ptr[i].val, v)) return false;
    if (!out.emplace(std::move(k), std::move(v)).second) return false;  // duplicate key
  }
  return true;
}
bool read(const msgpack::object& o, std::vector<std::string>& out) {
  if (o.type != msgpack::type::ARRAY) return false;
  out.clear();
  out.reserve(o.via.array.size);
  for (std::uint32_t i = 0; i < o.via.array.size; ++i) {
    std::string s;
    if (!read(o.via.array.ptr[i], s)) return false;
    out.push_back(std::move(s));
  }
  return true;
}
// {"name", "size", "sha256"}, each exactly once, nothing else.
bool read(const msgpack::object& o, msg::ArtifactRef& out) {
  if (o.type != msgpack::type::MAP || o.via.map.size != 3) return false;
  bool name = false, size = false, sha = false;
  for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
    std::string k;
    if (!read(o.via.map.ptr[i].key, k)) return false;
    const msgpack::object& v = o.via.map.ptr[i].val;
    if (k == "name" && !name) {
      name = read(v, out.name);
      if (!name) return false;
    } else if (k == "size" && !size) {
      size = read(v, out.size);
      if (!size) return false;
    } else if (k == "sha256" && !sha) {
      sha = read(v, out.sha256);
      if (!sha) return false;
    } else {
      return false;
    }
  }
  return name && size && sha;
}
bool read(const msgpack::object& o, std::vector<msg::ArtifactRef>& out) {
  if (o.type != msgpack::type::ARRAY) return false;
  out.clear();
  out.resize(o.via.array.size);
  for (std::uint32_t i = 0; i < o.via.array.size; ++i) {
    if (!read(o.via.array.ptr[i], out[i])) return false;
  }
  return true;
}
bool read(const msgpack::object& o, msg::NackReason& out) {
  std::string s;
  if (!read(o, s)) return false;
  const auto r = nack_reason_from_string(s);
  if (!r) return false;
  out = *r;
  return true;
}
bool read(const msgpack::object& o, msg::Status& out) {
  std::string s;
  if (!read(o, s)) return false;
  const auto r = status_from_string(s);
  if (!r) return false;
  out = *r;
  return true;
}

const char* wire_type(const std::string&) { return "str"; }
const char* wire_type(std::uint64_t) { return "uint64"; }
const char* wire_type(std::uint32_t) { return "uint32"; }
const char* wire_type(std::int32_t) { return "int32"; }
const char* wire_type(bool) { return "bool"; }
const char* wire_type(const Bytes&) { return "bin"; }
const char* wire_type(const StringMap&) { return "map of str to str (unique keys)"; }
const char* wire_type(const std::vector<std::string>&) { return "array of str"; }
const char* wire_type(const std::vector<msg::ArtifactRef>&) {
  return "array of {name: str, size: uint64, sha256: str}";
}
const char* wire_type(msg::NackReason) { return "nack reason string"; }
const char* wire_type(msg::Status) { return "status string"; }

// Keys ordered by length first: most of a message's keys differ in length, so
// ordering them rarely compares bytes (sorting a RESULT's keys was ~1.5k
// instructions with a plain string comparison, for every frame).
inline bool key_less(std::string_view a, std::string_view b) noexcept {
  return a.size() != b.size() ? a.size() < b.size() : a < b;
}

// The top-level map's entries, sorted by key (key_less) so that duplicate keys are
// found and lookups are cheap even for a hostile frame with a thousand unknown keys.
struct TopLevel {
  std::vector<std::pair<std::string_view, const msgpack::object*>> entries;
  const msgpack::object* find(std::string_view key) const {
    const auto it = std::lower_bound(entries.begin(), entries.end(), key,
                                     [](const auto& e, std::string_view k) { return key_less(e.first, k); });
    return it != entries.end() && it->first == key ? it->second : nullptr;
  }
};

struct FieldReader {
  const TopLevel& top;
  std::optional<Error> error;
  template <typename T>
  void operator()(const char* name, T& out, Need need) {
    if (error) return;
    const msgpack::object* o = top.find(name);
    if (o == nullptr) {
      if (need == Need::required) {
        error = make_error(Errc::missing_field, std::string("missing field ") + name);
      }
      return;
    }
    if (!read(*o, out)) {
      error = make_error(Errc::bad_field,
                         std::string("field ") + name + ": expected " + wire_type(out));
    }
  }
};

// ---- validation -------------------------------------------------------------

bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  while (i < n) {
    const unsigned c = p[i];
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      return false;
    }
    i += len;
  }
  return true;
}

struct Checker {
  std::optional<Error> error;
  std::string field;  // the field of the first problem

  void fail(Errc code, const char* name, std::string detail) {
    if (error) return;
    error = make_error(code, std::move(detail));
    field = name;
  }
  void text(const char* name, std::string_view s, std::size_t max, bool non_empty) {
    if (error) return;
    if (s.size() > max) {
      fail(Errc::too_large, name, std::string(name) + ": longer than " + std::to_string(max) + " bytes");
    } else if (non_empty && s.empty()) {
      fail(Errc::bad_field, name, std::string(name) + ": must not be empty");
    } else if (!valid_utf8(s)) {
      fail(Errc::bad_field, name, std::string(name) + ": not valid UTF-8");
    }
  }
  void ident(const char* name, std::string_view s, std::size_t max) {
    if (error) return;
    if (s.empty() || s.size() > max) {
      fail(s.empty() ? Errc::bad_field : Errc::too_large, name,
           std::string(name) + ": must be 1.." + std::to_string(max) + " characters");
      return;
    }
    const bool ok = std::all_of(s.begin(), s.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == '-';
    });
    if (!ok) fail(Errc::bad_field, name, std::string(name) + ": only [A-Za-z0-9._-] allowed");
  }
  void uuid(const char* name, std::string_view s, bool may_be_empty = false) {
    if (error || (may_be_empty && s.empty())) return;
    if (!parse_uuid(s)) fail(Errc::bad_field, name, std::string(name) + ": not a UUID");
  }
  void map(const char* name, const StringMap& m, std::size_t max_value_bytes = kMaxMapValueBytes) {
    if (error) return;
    if (m.size() > kMaxMapEntries) {
      fail(Errc::too_large, name,
           std::string(name) + ": more than " + std::to_string(kMaxMapEntries) + " entries");
      return;
    }
    const std::string key_name = std::string(name) + " key";
    for (const auto& [k, v] : m) {
      if (error) return;
      if (k.size() > kMaxMapKeyBytes || k.empty() || !valid_utf8(k)) {
        fail(k.empty() ? Errc::bad_field : k.size() > kMaxMapKeyBytes ? Errc::too_large : Errc::bad_field, name,
             key_name + " '" + printable_prefix(k) + "': must be 1.." + std::to_string(kMaxMapKeyBytes) +
                 " bytes of UTF-8");
      } else if (v.size() > max_value_bytes) {
        fail(Errc::too_large, name,
             std::string(name) + " '" + printable_prefix(k) + "': value longer than " +
                 std::to_string(max_value_bytes) + " bytes");
      } else if (!valid_utf8(v)) {
        fail(Errc::bad_field, name, std::string(name) + " '" + printable_prefix(k) + "': value not valid UTF-8");
      }
    }
  }
  void bytes(const char* name, const Bytes& b, std::size_t max) {
    if (error) return;
    if (b.size() > max) {
      fail(Errc::too_large, name, std::string(name) + ": more than " + std::to_string(max) + " bytes");
    }
  }
  void artifacts(const std::vector<msg::ArtifactRef>& list) {
    if (error) return;
    if (list.size() > kMaxArtifactsPerResult) {
      fail(Errc::too_large, "artifacts", "artifacts: more than " + std::to_string(kMaxArtifactsPerResult) + " entries");
      return;
    }
    for (std::size_t i = 0; i < list.size() && !error; ++i) {
      if (!valid_artifact_name(list[i].name)) {
        fail(Errc::bad_field, "artifacts", "artifacts: name must be 1.." + std::to_string(kMaxArtifactNameBytes) +
                                  " of [A-Za-z0-9._-], not starting with '.'");
      } else if (!valid_sha256_hex(list[i].sha256)) {
        fail(Errc::bad_field, "artifacts", "artifacts: sha256 must be 64 lower-case hex digits");
      }
      for (std::size_t j = 0; j < i && !error; ++j) {
        if (list[j].name == list[i].name) fail(Errc::bad_field, "artifacts", "artifacts: name " + list[i].name + " twice");
      }
    }
  }
  void positive(const char* name, std::uint64_t v) {
    if (!error && v == 0) fail(Errc::bad_field, name, std::string(name) + ": must be >= 1");
  }
  // At most 32 printable ASCII characters of a key, for a message that names it.
  static std::string printable_prefix(std::string_view s) {
    std::string out;
    for (const char c : s.substr(0, 32)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
    if (s.size() > 32) out += "...";
    return out;
  }

  void check(const msg::Hello& m) {
    ident("rig_id", m.rig_id, kMaxIdBytes);
    text("agent_version", m.agent_version, kMaxVersionBytes, true);
    if (!error && !is_uuid_v7(m.boot_id)) fail(Errc::bad_field, "boot_id", "boot_id: not a UUIDv7");
    map("labels", m.labels, kMaxLabelValueBytes);
    if (!error && m.kinds.size() > kMaxKinds) {
      fail(Errc::too_large, "kinds", "kinds: more than " + std::to_string(kMaxKinds) + " entries");
    }
    for (const auto& k : m.kinds) ident("kinds", k, kMaxIdBytes);
  }
  void check(const msg::Welcome& m) {
    ident("broker_id", m.broker_id, kMaxBrokerIdBytes);
    uuid("session_id", m.session_id);
  }
  void check(const msg::Command& m) {
    positive("seq", m.seq);
    uuid("cmd_id", m.cmd_id);
    ident("kind", m.kind, kMaxIdBytes);
    map("args", m.args);
  }
  void check(const msg::Ack& m) {
    positive("seq", m.seq);
    uuid("cmd_id", m.cmd_id);
  }
  void check(const msg::Nack& m) {
    uuid("cmd_id", m.cmd_id, /*may_be_empty=*/true);  // empty: the command was undecodable
    text("detail", m.detail, kMaxDetailBytes, false);
  }
  void check(const msg::Result& m) {
    uuid("cmd_id", m.cmd_id);
    bytes("output", m.output, kMaxResultOutput);
    text("detail", m.detail, kMaxDetailBytes, false);
    artifacts(m.artifacts);
  }
  void check(const msg::OutputChunk& m) {
    uuid("cmd_id", m.cmd_id);
    bytes("data", m.data, kMaxChunkBytes);
  }
  void check(const msg::Event& m) {
    ident("name", m.name, kMaxIdBytes);
    map("fields", m.fields);
  }
  void check(const msg::Cancel& m) { uuid("cmd_id", m.cmd_id); }
  void check(const msg::Goaway& m) { text("reason", m.reason, kMaxReasonBytes, false); }
};

template <std::size_t I = 0>
Expected<Message> decode_as(std::size_t index, const TopLevel& top) {
  if constexpr (I < std::variant_size_v<Message>) {
    if (index != I) return decode_as<I + 1>(index, top);
    std::variant_alternative_t<I, Message> m{};
    FieldReader reader{top, std::nullopt};
    visit_fields(m, reader);
    if (reader.error) return *reader.error;
    Checker checker;
    checker.check(m);
    if (checker.error) return *checker.error;
    return Message{std::in_place_index<I>, std::move(m)};
  } else {
    return make_error(Errc::unknown_type, "no such message index");
  }
}

// Keep strings in the caller's buffer during decoding instead of copying them into
// the zone: decode() copies what it keeps into the message before returning.
bool reference_everything(msgpack::type::object_type, std::size_t, void*) { return true; }

Expected<Message> decode_object(const msgpack::object& root) {
  if (root.type != msgpack::type::MAP) {
    return make_error(Errc::malformed, "frame is not a msgpack map");
  }
  TopLevel top;
  top.entries.reserve(root.via.map.size);
  for (std::uint32_t i = 0; i < root.via.map.size; ++i) {
    const auto& kv = root.via.map.ptr[i];
    if (kv.key.type != msgpack::type::STR) {
      return make_error(Errc::malformed, "map key is not a string");
    }
    top.entries.emplace_back(std::string_view(kv.key.via.str.ptr, kv.key.via.str.size),
                             &kv.val);
  }
  std::sort(top.entries.begin(), top.entries.end(),
            [](const auto& a, const auto& b) { return key_less(a.first, b.first); });
  const auto dup = std::adjacent_find(
      top.entries.begin(), top.entries.end(),
      [](const auto& a, const auto& b) { return a.first == b.first; });
  if (dup != top.entries.end()) {
    std::string shown(dup->first.substr(0, 64));
    if (!valid_utf8(shown)) shown = "(not UTF-8)";
    return make_error(Errc::malformed, "duplicate key " + shown);
  }

  const msgpack::object* v = top.find("v");
  if (v == nullptr) return make_error(Errc::missing_field, "missing field v");
  if (v->type != msgpack::type::POSITIVE_INTEGER) {
    return make_error(Errc::bad_field, "field v: expected uint");
  }
  if (v->via.u64 != kProtocolVersion) {
    return make_error(Errc::unsupported_version,
                      "protocol version " + std::to_string(v->via.u64) + " not supported");
  }
  const msgpack::object* t = top.find("t");
  if (t == nullptr) return make_error(Errc::missing_field, "missing field t");
  if (t->type != msgpack::type::STR) return make_error(Errc::bad_field, "field t: expected str");
  const std::string_view type(t->via.str.ptr, t->via.str.size);
  const auto it = std::find(kTypeNames.begin(), kTypeNames.end(), type);
  if (it == kTypeNames.end()) {
    std::string shown(type.substr(0, 64));
    if (!valid_utf8(shown)) shown = "(not UTF-8)";
    return make_error(Errc::unknown_type, "unknown message type " + shown);
  }
  return decode_as(static_cast<std::size_t>(it - kTypeNames.begin()), top);
}

}  // namespace

void encode_to(const Message& m, Bytes& out) {
  const std::size_t index = m.index();
  std::visit(
      [index, &out](const auto& body) {
        FieldCounter counter;
        visit_fields(body, counter);
        BytesSink sink{out};
        Packer pk(sink);
        pk.pack_map(2 + counter.n);
        put(pk, std::string_view("v"));
        put(pk, std::uint64_t{kProtocolVersion});
        put(pk, std::string_view("t"));
        put(pk, kTypeNames[index]);
        FieldWriter writer{pk};
        visit_fields(body, writer);
      },
      m);
}

Bytes encode(const Message& m) {
  Bytes out;
  out.reserve(128);
  encode_to(m, out);
  return out;
}

std::optional<CommandPeek> peek_command(std::span<const std::uint8_t> frame, std::size_t max_frame_bytes) {
  if (frame.empty() || frame.size() > max_frame_bytes) return std::nullopt;
  try {
    const msgpack::unpack_limit limit(kMaxArrayEntries, kMaxMapEntriesAnyLevel, frame.size(),
                                      frame.size(), frame.size(), kMaxDepth);
    std::size_t offset = 0;
    bool referenced = false;
    thread_local msgpack::zone zone;
    struct ClearZone {
      ~ClearZone() { zone.clear(); }
    } clear_zone;
    const msgpack::object root =
        msgpack::unpack(zone, reinterpret_cast<const char*>(frame.data()), frame.size(), offset, referenced,
                        &reference_everything, nullptr, limit);
    if (root.type != msgpack::type::MAP) return std::nullopt;
    CommandPeek peek;
    bool is_command = false;
    for (std::uint32_t i = 0; i < root.via.map.size; ++i) {
      const auto& kv = root.via.map.ptr[i];
      if (kv.key.type != msgpack::type::STR) continue;
      const std::string_view key(kv.key.via.str.ptr, kv.key.via.str.size);
      const msgpack::object& v = kv.val;
      if (key == "t") {
        is_command = v.type == msgpack::type::STR && std::string_view(v.via.str.ptr, v.via.str.size) == "command";
      } else if (key == "seq" && v.type == msgpack::type::POSITIVE_INTEGER) {
        peek.seq = v.via.u64;
      } else if (key == "cmd_id" && v.type == msgpack::type::STR && v.via.str.size <= 128) {
        peek.cmd_id.assign(v.via.str.ptr, v.via.str.size);
      }
    }
    if (!is_command) return std::nullopt;
    return peek;
  } catch (...) {
    return std::nullopt;  // not even a readable map: nothing to answer
  }
}

Expected<Message> decode(std::span<const std::uint8_t> frame, const DecodeOptions& opts) {
  if (frame.size() > opts.max_frame_bytes) {
    return make_error(Errc::too_large, "frame of " + std::to_string(frame.size()) +
                                           " bytes is over the limit of " +
                                           std::to_string(opts.max_frame_bytes));
  }
  if (frame.empty()) return make_error(Errc::truncated, "empty frame");
  try {
    const msgpack::unpack_limit limit(kMaxArrayEntries, kMaxMapEntriesAnyLevel, frame.size(),
                                      frame.size(), frame.size(), kMaxDepth);
    std::size_t offset = 0;
    bool referenced = false;
    const auto* data = reinterpret_cast<const char*>(frame.data());
    // One zone per thread, emptied after each frame (it keeps its first chunk):
    // a fresh zone per frame was an 8 KiB malloc and free for every ACK.
    thread_local msgpack::zone zone;
    struct ClearZone {
      ~ClearZone() { zone.clear(); }
    } clear_zone;
    const msgpack::object root = msgpack::unpack(
        zone, data, frame.size(), offset, referenced, &reference_everything, nullptr, limit);
    if (offset != frame.size()) {
      return make_error(Errc::malformed, std::to_string(frame.size() - offset) +
                                             " trailing bytes after the message map");
    }
    return decode_object(root);
  } catch (const msgpack::insufficient_bytes&) {
    return make_error(Errc::truncated, "frame ends inside a value");
  } catch (const msgpack::size_overflow& e) {
    return make_error(Errc::too_large, std::string("msgpack limit: ") + e.what());
  } catch (const msgpack::parse_error& e) {
    return make_error(Errc::malformed, std::string("not msgpack: ") + e.what());
  } catch (const std::bad_alloc&) {
    return make_error(Errc::too_large, "out of memory decoding frame");
  } catch (const std::exception& e) {
    return make_error(Errc::malformed, std::string("undecodable frame: ") + e.what());
  } catch (...) {
    return make_error(Errc::malformed, "undecodable frame");
  }
}

std::optional<HelloFieldProblem> hello_field_problem(const msg::Hello& hello) {
  Checker checker;
  checker.check(hello);
  if (!checker.error) return std::nullopt;
  return HelloFieldProblem{checker.field, checker.error->code, checker.error->detail};
}

Expected<void> validate(const Message& m) {
  Checker checker;
  std::visit([&](const auto& body) { checker.check(body); }, m);
  if (checker.error) return *checker.error;
  return {};
}

}  // namespace fleetlink
