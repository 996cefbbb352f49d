// The mesh's notes as JSON (redis/mesh_codec.hpp), without Redis: every kind
// round-trips with all its fields, fields a newer broker adds are ignored, and
// anything else that arrives on a channel (cut short, the wrong shape, a field
// missing or of the wrong type, too large, nested too deep) is an Error, never
// an exception, a crash or a half-read note.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "redis/mesh_codec.hpp"

using namespace fleetlink;
using namespace fleetlink::broker;
using namespace fleetlink::broker::redis;
using nlohmann::json;

namespace {

constexpr MeshKind kAllKinds[] = {MeshKind::probe,         MeshKind::superseded,    MeshKind::command,
                                  MeshKind::command_answer, MeshKind::cancel,       MeshKind::cancel_answer,
                                  MeshKind::reconnect,     MeshKind::reconnect_answer, MeshKind::event,
                                  MeshKind::rig_seen,      MeshKind::ping};
constexpr CancelOutcome kAllCancels[] = {CancelOutcome::unknown, CancelOutcome::finished, CancelOutcome::pending,
                                         CancelOutcome::cancelled, CancelOutcome::requested};
constexpr EnqueueError kAllEnqueueErrors[] = {
    EnqueueError::unknown_rig,       EnqueueError::rig_unresponsive,     EnqueueError::unsupported_kind,
    EnqueueError::draining,          EnqueueError::bad_request,          EnqueueError::conflict,
    EnqueueError::store_unavailable, EnqueueError::registry_unavailable, EnqueueError::route_timeout,
    EnqueueError::kind_not_allowed};

MeshNote base_note(MeshKind kind) {
  MeshNote n;
  n.kind = kind;
  n.from = "broker-b";
  n.ask = 0xFFFF'FFFF'FFFF'FFFFULL;  // the largest: no precision lost on the way
  n.rig_id = "rig-0414";
  n.boot_id = "01937ed9-7200-7000-8000-000000000001";
  n.cmd_id = "0190f5a2-1c3b-7d4e-8f00-123456789abc";
  n.held = true;
  n.cancel = CancelOutcome::requested;
  n.unrecorded = "store_unavailable: sqlite busy";
  return n;
}

CommandRequest full_request() {
  CommandRequest r;
  r.rig_id = "rig-0414";
  r.kind = "suite";
  r.args = {{"name", "suite-7"}, {"timeout", "2400"}, {"", "empty key"}, {"unicode", "gr\xc3\xbc\xc3\x9f"},
            {"quote\"back\\slash", "line\nbreak\ttab\x01"}};
  r.cmd_id = "0190f5a2-1c3b-7d4e-8f00-123456789abc";
  r.idempotency_key = "client-42";
  r.deliver_within_s = std::numeric_limits<std::uint32_t>::max();
  r.timeout_s = 2400;
  r.hold = true;
  r.job_id = "0190f5a2-0000-7000-8000-000000000001";
  r.operator_name = "alice";
  return r;
}

EnqueueOk full_ok() {
  EnqueueOk ok;
  ok.cmd_id = "0190f5a2-1c3b-7d4e-8f00-123456789abc";
  ok.rig_id = "rig-0414";
  ok.seq = 0xFFFF'FFFF'FFFFULL;
  ok.state = CommandState::acked;
  ok.existing = true;
  ok.held = true;
  ok.deliver_by_ms = 1'733'000'030'000;
  return ok;
}

EnqueueFailure full_failure() {
  EnqueueFailure f;
  f.error = EnqueueError::rig_unresponsive;
  f.rig_id = "rig-0414";
  f.detail = "outbox full (128/128), oldest queued cmd age 47s";
  f.last_ack_seq = 977;
  f.last_ack_at_ms = 1'733'000'000'123;
  f.suggested_action = "force_reconnect";
  f.cmd_id = "0190f5a2-1c3b-7d4e-8f00-123456789abd";
  return f;
}

FleetEvent full_event(EventType type) {
  return FleetEvent{type, "rig-0414", "0190f5a2-1c3b-7d4e-8f00-123456789abc", "succeeded exit=0",
                    1'733'000'000'999};
}

RigRecord full_rig() {
  RigRecord r;
  r.rig_id = "rig-0414";
  r.boot_id = "01937ed9-7200-7000-8000-000000000001";
  r.agent_version = "0.1.0+g1234abc";
  r.labels = {{"site", "lab-3"}, {"rack", "R12"}, {"", ""}, {"gpu", "a100 x8"}};
  r.kinds = {"shell", "suite", "reboot", "dmesg"};
  r.broker_id = "broker-b";
  r.first_seen_ms = 1'732'000'000'000;
  r.last_seen_ms = 1'733'000'000'000;
  return r;
}

// A note of this kind with everything its kind carries.
MeshNote full_note(MeshKind kind) {
  MeshNote n = base_note(kind);
  switch (kind) {
    case MeshKind::command: n.command = full_request(); break;
    case MeshKind::command_answer: n.outcome = full_failure(); break;
    case MeshKind::event: n.event = full_event(EventType::command_done); break;
    case MeshKind::rig_seen: n.rig = full_rig(); break;
    default: break;
  }
  return n;
}

void check_request(const CommandRequest& a, const CommandRequest& b) {
  CHECK(a.rig_id == b.rig_id);
  CHECK(a.kind == b.kind);
  CHECK(a.args == b.args);
  CHECK(a.cmd_id == b.cmd_id);
  CHECK(a.idempotency_key == b.idempotency_key);
  CHECK(a.deliver_within_s == b.deliver_within_s);
  CHECK(a.timeout_s == b.timeout_s);
  CHECK(a.hold == b.hold);
  CHECK(a.job_id == b.job_id);
  CHECK(a.operator_name == b.operator_name);
}

void check_outcome(const EnqueueOutcome& a, const EnqueueOutcome& b) {
  REQUIRE(a.index() == b.index());
  if (const auto* x = std::get_if<EnqueueOk>(&a)) {
    const auto& y = std::get<EnqueueOk>(b);
    CHECK(x->cmd_id == y.cmd_id);
    CHECK(x->rig_id == y.rig_id);
    CHECK(x->seq == y.seq);
    CHECK(x->state == y.state);
    CHECK(x->existing == y.existing);
    CHECK(x->held == y.held);
    CHECK(x->deliver_by_ms == y.deliver_by_ms);
    return;
  }
  const auto& x = std::get<EnqueueFailure>(a);
  const auto& y = std::get<EnqueueFailure>(b);
  CHECK(x.error == y.error);
  CHECK(x.rig_id == y.rig_id);
  CHECK(x.detail == y.detail);
  CHECK(x.last_ack_seq == y.last_ack_seq);
  CHECK(x.last_ack_at_ms == y.last_ack_at_ms);
  CHECK(x.suggested_action == y.suggested_action);
  CHECK(x.cmd_id == y.cmd_id);
}

void check_event(const FleetEvent& a, const FleetEvent& b) {
  CHECK(a.type == b.type);
  CHECK(a.rig_id == b.rig_id);
  CHECK(a.cmd_id == b.cmd_id);
  CHECK(a.detail == b.detail);
  CHECK(a.at_ms == b.at_ms);
  CHECK(a.offset == b.offset);
}

void check_rig(const RigRecord& a, const RigRecord& b) {
  CHECK(a.rig_id == b.rig_id);
  CHECK(a.boot_id == b.boot_id);
  CHECK(a.agent_version == b.agent_version);
  CHECK(a.labels == b.labels);
  CHECK(a.kinds == b.kinds);
  CHECK(a.broker_id == b.broker_id);
  CHECK(a.first_seen_ms == b.first_seen_ms);
  CHECK(a.last_seen_ms == b.last_seen_ms);
}

void check_same(const MeshNote& a, const MeshNote& b) {
  CHECK(a.kind == b.kind);
  CHECK(a.from == b.from);
  CHECK(a.ask == b.ask);
  CHECK(a.rig_id == b.rig_id);
  CHECK(a.boot_id == b.boot_id);
  CHECK(a.cmd_id == b.cmd_id);
  CHECK(a.held == b.held);
  CHECK(a.unrecorded == b.unrecorded);
  CHECK(a.cancel == b.cancel);
  REQUIRE(a.command.has_value() == b.command.has_value());
  if (a.command) check_request(*a.command, *b.command);
  REQUIRE(a.outcome.has_value() == b.outcome.has_value());
  if (a.outcome) check_outcome(*a.outcome, *b.outcome);
  REQUIRE(a.event.has_value() == b.event.has_value());
  if (a.event) check_event(*a.event, *b.event);
  REQUIRE(a.rig.has_value() == b.rig.has_value());
  if (a.rig) check_rig(*a.rig, *b.rig);
}

// Encodes, decodes, compares; and the decoded note encodes to the same text.
void round_trip(const MeshNote& n) {
  const std::string text = encode_note(n);
  CAPTURE(text);
  const auto back = decode_note(text);
  REQUIRE_MESSAGE(back.has_value(), back.error().detail);
  check_same(n, *back);
  CHECK(encode_note(*back) == text);
}

// decode_note refuses it with an Error (and does not throw).
void refused(std::string_view text) {
  const std::string head(text.substr(0, 300));
  CAPTURE(head);
  Expected<MeshNote> r = MeshNote{};
  REQUIRE_NOTHROW(r = decode_note(text));
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::malformed);
  CHECK_FALSE(r.error().detail.empty());
}
void refused_json(const json& j) { refused(j.dump()); }

bool accepted(const json& j) {
  Expected<MeshNote> r = MeshNote{};
  REQUIRE_NOTHROW(r = decode_note(j.dump()));
  return r.has_value();
}

// Every object of an encoded note by its path ("" is the note itself), so a
// test can take one field of any of them away or change its type.
void each_object(json& j, const std::string& path, const std::function<void(json&, const std::string&)>& f) {
  f(j, path);
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.value().is_object() && it.key() != "args" && it.key() != "labels" &&  // maps, not records
        it.key().rfind("zz_", 0) != 0)                                         // what a test added
      each_object(it.value(), path + "/" + it.key(), f);
}

// Notes with every optional field present: each field of them is required
// unless named here.
const std::vector<std::string> kOptional = {"/unrecorded", "/command/deliver_within_s", "/command/timeout_s",
                                            "/command/operator", "/outcome/last_ack_at_ms"};
bool optional_field(const std::string& path) {
  for (const auto& o : kOptional)
    if (o == path) return true;
  return false;
}

std::vector<json> full_notes_json() {
  std::vector<json> all;
  for (MeshKind k : kAllKinds) all.push_back(json::parse(encode_note(full_note(k))));
  MeshNote ok = full_note(MeshKind::command_answer);
  ok.outcome = full_ok();
  all.push_back(json::parse(encode_note(ok)));
  return all;
}

}  // namespace

TEST_CASE("mesh codec: every kind round-trips with all its fields") {
  for (MeshKind k : kAllKinds) {
    CAPTURE(to_string(k));
    round_trip(full_note(k));
    // ... and with nothing but the kind and the sender
    if (k != MeshKind::command && k != MeshKind::command_answer && k != MeshKind::event && k != MeshKind::rig_seen) {
      MeshNote bare;
      bare.kind = k;
      bare.from = "b";
      round_trip(bare);
    }
  }
}

TEST_CASE("mesh codec: command with a full request, and without its optional limits") {
  MeshNote n = full_note(MeshKind::command);
  round_trip(n);
  const auto j = json::parse(encode_note(n));
  CHECK(j.at("command").at("deliver_within_s") == 4294967295u);
  CHECK(j.at("command").at("timeout_s") == 2400);
  n.command->deliver_within_s.reset();
  n.command->timeout_s = 0;
  round_trip(n);
  n.command->timeout_s.reset();
  n.command->args.clear();
  n.command->hold = false;
  round_trip(n);
  const auto bare = json::parse(encode_note(n));
  CHECK_FALSE(bare.at("command").contains("deliver_within_s"));
  CHECK_FALSE(bare.at("command").contains("timeout_s"));
}

TEST_CASE("mesh codec: a command carries its operator; a note without one (an older broker's) has none") {
  MeshNote n = full_note(MeshKind::command);
  auto j = json::parse(encode_note(n));
  CHECK(j.at("command").at("operator") == "alice");
  j["command"].erase("operator");
  auto back = decode_note(j.dump());
  REQUIRE(back);
  REQUIRE(back->command);
  CHECK(back->command->operator_name.empty());
  CHECK(back->command->kind == "suite");
  // An open API's command: no field at all, so an older broker reads it unchanged.
  n.command->operator_name.clear();
  CHECK_FALSE(json::parse(encode_note(n)).at("command").contains("operator"));
  round_trip(n);
  // Not a string: refused like any field of the wrong type.
  j["command"]["operator"] = 7;
  CHECK_FALSE(decode_note(j.dump()));
}

TEST_CASE("mesh codec: command_answer with an EnqueueOk in every state") {
  for (std::size_t i = 0; i < kCommandStateCount; ++i) {
    MeshNote n = base_note(MeshKind::command_answer);
    EnqueueOk ok = full_ok();
    ok.state = static_cast<CommandState>(i);
    CAPTURE(to_string(ok.state));
    n.outcome = ok;
    round_trip(n);
  }
  MeshNote zero = base_note(MeshKind::command_answer);
  zero.outcome = EnqueueOk{};
  zero.unrecorded.clear();
  round_trip(zero);
}

TEST_CASE("mesh codec: command_answer with an EnqueueFailure of every error") {
  for (EnqueueError e : kAllEnqueueErrors) {
    CAPTURE(to_string(e));
    MeshNote n = base_note(MeshKind::command_answer);
    EnqueueFailure f = full_failure();
    f.error = e;
    n.outcome = f;
    round_trip(n);
    f.last_ack_at_ms.reset();  // never acknowledged anything
    n.outcome = f;
    round_trip(n);
    CHECK_FALSE(json::parse(encode_note(n)).at("outcome").contains("last_ack_at_ms"));
  }
}

TEST_CASE("mesh codec: cancel_answer with each outcome") {
  for (CancelOutcome c : kAllCancels) {
    MeshNote n = base_note(MeshKind::cancel_answer);
    n.cancel = c;
    CAPTURE(static_cast<int>(c));
    round_trip(n);
  }
}

TEST_CASE("mesh codec: event of each type") {
  for (EventType t : all_event_types()) {
    CAPTURE(to_string(t));
    MeshNote n = base_note(MeshKind::event);
    n.event = full_event(t);
    round_trip(n);
  }
}

TEST_CASE("mesh codec: rig_seen with labels and kinds, and with none") {
  MeshNote n = full_note(MeshKind::rig_seen);
  round_trip(n);
  n.rig->labels.clear();
  n.rig->kinds.clear();
  round_trip(n);
}

TEST_CASE("mesh codec: fields this broker does not know are ignored, at every level") {
  for (json j : full_notes_json()) {
    CAPTURE(j.dump());
    const auto before = decode_note(j.dump());
    REQUIRE(before.has_value());
    each_object(j, "", [](json& o, const std::string&) {
      o["zz_new_field"] = json{{"nested", json::array({1, "two", nullptr, 3.5})}};
      o["zz_other"] = -17;
    });
    const auto after = decode_note(j.dump());
    REQUIRE_MESSAGE(after.has_value(), after.error().detail);
    check_same(*before, *after);
  }
}

TEST_CASE("mesh codec: what is not a note object is refused") {
  refused("");
  refused(" ");
  refused("not json");
  refused("{");
  refused("{\"v\":1,");
  refused("{\"v\":1}garbage");
  refused("[]");
  refused("[{\"v\":1}]");
  refused("42");
  refused("-1");
  refused("\"a note\"");
  refused("null");
  refused("true");
  refused("{}");
  refused(std::string_view("\0\0\0\0", 4));
  refused("\xff\xfe{}");
  // A full note cut short at every byte.
  const std::string text = encode_note(full_note(MeshKind::command));
  for (std::size_t n = 0; n < text.size(); ++n) {
    const auto r = decode_note(std::string_view(text).substr(0, n));
    REQUIRE_FALSE(r.has_value());
  }
}

TEST_CASE("mesh codec: each required field missing is refused") {
  std::size_t removed = 0;
  for (const json& full : full_notes_json()) {
    REQUIRE(accepted(full));
    // Each path holding an object, then each of its fields, one at a time.
    std::vector<std::pair<std::string, std::string>> fields;
    json scan = full;
    each_object(scan, "", [&](json& o, const std::string& path) {
      for (auto it = o.begin(); it != o.end(); ++it) fields.emplace_back(path, it.key());
    });
    for (const auto& [path, key] : fields) {
      const std::string field = path + "/" + key;
      CAPTURE(field);
      CAPTURE(full.at("kind").get<std::string>());
      json j = full;
      j[json::json_pointer(path)].erase(key);
      if (optional_field(field)) {
        CHECK(accepted(j));
        continue;
      }
      refused_json(j);
      ++removed;
    }
  }
  CHECK(removed > 60);
}

TEST_CASE("mesh codec: a field of the wrong type is refused") {
  std::size_t changed = 0;
  for (const json& full : full_notes_json()) {
    std::vector<std::pair<std::string, json>> leaves;  // json pointer, its value in the full note
    json scan = full;
    each_object(scan, "", [&](json& o, const std::string& path) {
      for (auto it = o.begin(); it != o.end(); ++it) leaves.emplace_back(path + "/" + it.key(), it.value());
    });
    for (const auto& [field, value] : leaves) {
      std::vector<json> wrong = {nullptr, json::array(), json::object()};
      if (value.is_string()) {
        wrong.insert(wrong.end(), {7, true, json::array({"a"})});
      } else if (value.is_boolean()) {
        wrong.insert(wrong.end(), {1, 0, "true", "false"});
      } else if (value.is_number()) {
        // As a string, negative, fractional, a bool, too large for 64 bits.
        wrong.insert(wrong.end(), {"42", "0", -1, -0.0, 1.5, 1e3, true, false, 1e30});
        wrong.push_back(json::parse("18446744073709551616"));  // 2^64: read as a double
      } else if (value.is_object()) {  // args, labels: maps of strings
        wrong.insert(wrong.end(), {"k=v", json::array({"k", "v"}), json{{"k", 1}}, json{{"k", nullptr}},
                                   json{{"k", json::array()}}});
      } else if (value.is_array()) {  // kinds
        wrong.insert(wrong.end(), {"shell", json::array({1}), json::array({nullptr}), json::array({"a", 2}),
                                   json{{"0", "shell"}}});
      }
      for (const json& w : wrong) {
        if (w == value) continue;
        if (value.is_object() && w.is_object() && w.empty()) continue;  // an empty map is a map
        if (value.is_array() && w.is_array() && w.empty()) continue;    // and no kinds are kinds
        CAPTURE(field);
        CAPTURE(w.dump());
        CAPTURE(full.at("kind").get<std::string>());
        json j = full;
        j[json::json_pointer(field)] = w;
        refused_json(j);
        ++changed;
      }
    }
  }
  CHECK(changed > 300);
}

TEST_CASE("mesh codec: numbers out of their field's range are refused") {
  json j = json::parse(encode_note(full_note(MeshKind::command)));
  j["command"]["deliver_within_s"] = 4294967296ULL;  // 2^32: does not fit a uint32
  refused_json(j);
  j = json::parse(encode_note(full_note(MeshKind::command)));
  j["command"]["timeout_s"] = -1;
  refused_json(j);
  j = json::parse(encode_note(full_note(MeshKind::probe)));
  j["ask"] = -1;
  refused_json(j);
  j["ask"] = std::numeric_limits<std::int64_t>::min();
  refused_json(j);
  j["ask"] = std::numeric_limits<std::uint64_t>::max();
  CHECK(accepted(j));
}

TEST_CASE("mesh codec: unknown kind, version and names are refused") {
  const json probe = json::parse(encode_note(full_note(MeshKind::probe)));
  for (const char* kind : {"", "PROBE", "probe ", "unknown", "commands", "rig-seen"}) {
    json j = probe;
    j["kind"] = kind;
    refused_json(j);
  }
  for (const json& v : {json(0), json(2), json(-1), json(1000), json("1"), json(1.5), json(true)}) {
    CAPTURE(v.dump());
    json j = probe;
    j["v"] = v;
    refused_json(j);
  }
  for (const char* c : {"", "Cancelled", "canceled", "done", "unknown "}) {
    json j = probe;
    j["cancel"] = c;
    refused_json(j);
  }
  json answer = json::parse(encode_note(full_note(MeshKind::command_answer)));
  for (const char* e : {"", "UNKNOWN_RIG", "rate_limited", "unknown"}) {
    json j = answer;
    j["outcome"]["error"] = e;
    refused_json(j);
  }
  MeshNote ok_note = base_note(MeshKind::command_answer);
  ok_note.outcome = full_ok();
  const json ok = json::parse(encode_note(ok_note));
  for (const char* s : {"", "Queued", "done", "unknown", "finished"}) {
    json j = ok;
    j["outcome"]["state"] = s;
    refused_json(j);
  }
  const json event = json::parse(encode_note(full_note(MeshKind::event)));
  for (const char* t : {"", "command-done", "rig_deleted", "unknown"}) {
    json j = event;
    j["event"]["type"] = t;
    refused_json(j);
  }
}

TEST_CASE("mesh codec: a kind without what it carries is refused") {
  const std::pair<MeshKind, const char*> needs[] = {{MeshKind::command, "command"},
                                                    {MeshKind::command_answer, "outcome"},
                                                    {MeshKind::event, "event"},
                                                    {MeshKind::rig_seen, "rig"}};
  for (const auto& [kind, field] : needs) {
    CAPTURE(field);
    json j = json::parse(encode_note(full_note(kind)));
    REQUIRE(accepted(j));
    j.erase(field);
    refused_json(j);
    // what another kind carries is no substitute
    j["rig"] = json::parse(encode_note(full_note(MeshKind::rig_seen))).at("rig");
    j["event"] = json::parse(encode_note(full_note(MeshKind::event))).at("event");
    if (kind == MeshKind::rig_seen) j.erase("rig");
    if (kind == MeshKind::event) j.erase("event");
    refused_json(j);
  }
  // An empty sender.
  MeshNote n = full_note(MeshKind::probe);
  n.from.clear();
  refused(encode_note(n));
}

TEST_CASE("mesh codec: a note over kMaxMeshNoteBytes is refused unread") {
  MeshNote n = full_note(MeshKind::event);
  const std::string small = encode_note(n);
  REQUIRE(small.size() < kMaxMeshNoteBytes);
  // Padded with whitespace to the limit: still read. One byte more: refused.
  std::string at_limit = small + std::string(kMaxMeshNoteBytes - small.size(), ' ');
  REQUIRE(at_limit.size() == kMaxMeshNoteBytes);
  CHECK(decode_note(at_limit).has_value());
  refused(at_limit + " ");
  n.event->detail.assign(kMaxMeshNoteBytes, 'x');
  refused(encode_note(n));
  refused(std::string(kMaxMeshNoteBytes * 4, '['));
}

TEST_CASE("mesh codec: deep nesting is refused or ignored, never a crash") {
  refused(std::string(10000, '['));
  refused(std::string(10000, '{'));
  refused(std::string(100000, '['));
  // Balanced and as deep as the size limit allows: not an object.
  const std::size_t depth = kMaxMeshNoteBytes / 2;
  refused(std::string(depth, '[') + std::string(depth, ']'));
  // Objects in objects, as deep as fits.
  std::string objects;
  const std::size_t odepth = (kMaxMeshNoteBytes - 16) / 7;
  for (std::size_t i = 0; i < odepth; ++i) objects += "{\"a\":";
  objects += "1";
  objects.append(odepth, '}');
  REQUIRE(objects.size() <= kMaxMeshNoteBytes);
  refused(objects);
  // Deep where a field of a record is expected, and in a field nobody reads.
  json j = json::parse(encode_note(full_note(MeshKind::probe)));
  std::string text = j.dump();
  text.pop_back();
  const std::size_t fdepth = 100000;
  const std::string deep = std::string(fdepth, '[') + std::string(fdepth, ']');
  CHECK(decode_note(text + ",\"zz_unknown\":" + deep + "}").has_value());
  refused(text + ",\"rig\":" + deep + "}");
  refused(text + ",\"from\":" + deep + "}");  // the later of two "from"s counts
}

TEST_CASE("mesh codec: bytes that are not UTF-8 are replaced on encode, not thrown") {
  MeshNote n = full_note(MeshKind::event);
  n.event->detail = "exit=1 \xff\xfe tail";
  n.event->rig_id = "rig-\xc3";  // cut inside a two-byte sequence
  n.from = "broker-\x80";
  std::string text;
  REQUIRE_NOTHROW(text = encode_note(n));
  const auto back = decode_note(text);
  REQUIRE_MESSAGE(back.has_value(), back.error().detail);
  const std::string fffd = "\xef\xbf\xbd";  // U+FFFD
  CHECK(back->event->detail.rfind("exit=1 ", 0) == 0);
  CHECK(back->event->detail.find(fffd) != std::string::npos);
  CHECK(back->event->detail.find('\xff') == std::string::npos);
  CHECK(back->event->detail.size() >= std::string("exit=1  tail").size());
  CHECK(back->event->detail.substr(back->event->detail.size() - 5) == " tail");
  CHECK(back->event->rig_id == "rig-" + fffd);
  CHECK(back->from == "broker-" + fffd);
  // In a map's keys and values, and a list.
  MeshNote rig = full_note(MeshKind::rig_seen);
  rig.rig->labels["\xfe"] = "v\xff";
  rig.rig->kinds.push_back("\xc0\xaf");  // overlong
  REQUIRE_NOTHROW(text = encode_note(rig));
  const auto back_rig = decode_note(text);
  REQUIRE_MESSAGE(back_rig.has_value(), back_rig.error().detail);
  CHECK(back_rig->rig->labels.size() == rig.rig->labels.size());
  CHECK(back_rig->rig->kinds.size() == rig.rig->kinds.size());
  // Raw invalid bytes in a string of the arriving text are not a note.
  std::string raw = encode_note(full_note(MeshKind::probe));
  raw.insert(raw.find("broker-b") + 7, "\xff");
  refused(raw);
}

TEST_CASE("mesh codec: a command_output event keeps its offset (and its bytes)") {
  MeshNote n;
  n.kind = MeshKind::event;
  n.from = "broker-a";
  n.event = FleetEvent{EventType::command_output, "rig-1", "0190f5a2-1c3b-7d4e-8f00-123456789abc",
                       "line 7\nline 8\n", 1'733'000'000'999, 1ULL << 40};
  auto back = decode_note(encode_note(n));
  REQUIRE(back);
  REQUIRE(back->event);
  check_event(*back->event, *n.event);
  // An offset that is not a whole number is refused like any other bad number.
  json j = json::parse(encode_note(n));
  j["event"]["offset"] = -3;
  CHECK_FALSE(decode_note(j.dump()));
  j["event"]["offset"] = 1.5;
  CHECK_FALSE(decode_note(j.dump()));
}
