#include "control/job_json.hpp"

#include <nlohmann/json.hpp>

#include "control/control_json.hpp"

namespace fleetlink::broker {

namespace {

using json = nlohmann::ordered_json;

// 1: rigs [rig_id, outcome, cmd_id, state, error, detail].
// 2: rigs [..., exit_code (or null), first line of output]; the head may have
//    "cancelled_at_ms". Both are read; 2 is written.
constexpr int kRecordVersion = 2;
constexpr int kOldestRecordVersion = 1;

json string_map_json(const StringMap& m) {
  json out = json::object();
  for (const auto& [k, v] : m) out[k] = v;
  return out;
}

json targets_json(const JobTargets& t) {
  json ids = json::array();
  for (const std::string& id : t.ids) ids.push_back(id);
  return json{{"ids", std::move(ids)},
              {"glob", t.glob.empty() ? json(nullptr) : json(t.glob)},
              {"labels", string_map_json(t.labels)}};
}

// As the request gave it: a number stays a number, a share is "10%".
json given_json(const std::optional<RigShare>& share) {
  if (!share) return nullptr;
  if (share->percent) return share->text();
  return share->count;
}

json optional_json(const std::optional<std::uint32_t>& v) { return v ? json(*v) : json(nullptr); }

json counts_json(const Job& job) {
  // From the counts, not the rig list: a job read without its rigs has only those.
  std::size_t total = 0;
  for (JobRigOutcome o : all_job_rig_outcomes()) total += job.count(o);
  json counts{{"total", total}};
  for (JobRigOutcome o : all_job_rig_outcomes()) counts[to_string(o)] = job.count(o);
  return counts;
}

void append_or_null(std::string& out, std::string_view v) {
  if (v.empty()) {
    out += "null";
  } else {
    append_json_value(out, v);
  }
}

}  // namespace

std::string job_json_text(const Job& job, const Fleet* live, bool with_rigs, bool batch_alias) {
  json head{{"job_id", job.job_id}};
  if (batch_alias) head["batch_id"] = job.job_id;
  head["kind"] = job.kind;
  head["args"] = string_map_json(job.args);
  head["targets"] = targets_json(job.targets);
  head["created_at"] = iso8601_utc_ms(job.created_at_ms);
  head["deadline_s"] = job.deadline_s;
  head["deadline_at"] = iso8601_utc_ms(job.deadline_at_ms);
  head["finished_at"] = iso8601_or_null(job.finished_at_ms);
  head["cancelled_at"] = iso8601_or_null(job.cancelled_at_ms);
  head["max_concurrency"] = job.max_concurrency;
  head["max_concurrency_given"] = given_json(job.max_concurrency_given);
  head["max_errors"] = job.max_errors ? json(*job.max_errors) : json(nullptr);
  head["max_errors_given"] = given_json(job.max_errors_given);
  head["deliver_within_s"] = optional_json(job.deliver_within_s);
  head["timeout_s"] = optional_json(job.timeout_s);
  head["hold"] = job.hold;
  head["operator"] = job.operator_name.empty() ? json(nullptr) : json(job.operator_name);
  head["state"] = to_string(job.state());
  head["errors"] = job.errors();
  head["counts"] = counts_json(job);
  std::string out = dump_json(head);
  if (!with_rigs) return out;
  out.pop_back();  // the closing brace: "rigs" comes last
  out.reserve(out.size() + 160 * job.rigs.size() + 16);
  out += ",\"rigs\":[";
  bool first = true;
  for (const JobRig& r : job.rigs) {
    if (!first) out += ',';
    first = false;
    out += "{\"rig_id\":";
    append_json_value(out, r.rig_id);
    out += ",\"outcome\":";
    append_json_value(out, to_string(r.outcome));
    out += ",\"cmd_id\":";
    append_or_null(out, r.cmd_id);
    out += ",\"state\":";
    const char* state = r.state ? to_string(*r.state) : nullptr;
    if (r.outcome == JobRigOutcome::dispatched && live != nullptr && !r.cmd_id.empty())
      live->read_command(r.cmd_id, [&](const CommandView& cmd) { state = to_string(cmd.state); });
    append_or_null(out, state ? std::string_view(state) : std::string_view());
    out += ",\"error\":";
    append_or_null(out, r.error);
    out += ",\"detail\":";
    append_or_null(out, r.detail);
    out += ",\"exit_code\":";
    out += r.exit_code ? std::to_string(*r.exit_code) : std::string("null");
    out += ",\"output_first_line\":";
    append_or_null(out, r.first_line);
    out += '}';
  }
  out += "]}";
  return out;
}

JobRecord job_record(const Job& job) {
  json head{{"v", kRecordVersion},
            {"job_id", job.job_id},
            {"kind", job.kind},
            {"args", string_map_json(job.args)},
            {"targets", targets_json(job.targets)},
            {"created_at_ms", job.created_at_ms},
            {"deadline_s", job.deadline_s},
            {"deadline_at_ms", job.deadline_at_ms},
            {"finished_at_ms", job.finished_at_ms ? json(*job.finished_at_ms) : json(nullptr)},
            {"cancelled_at_ms", job.cancelled_at_ms ? json(*job.cancelled_at_ms) : json(nullptr)},
            {"max_concurrency", job.max_concurrency},
            {"max_concurrency_given", job.max_concurrency_given ? json(job.max_concurrency_given->text()) : json(nullptr)},
            {"max_errors", job.max_errors ? json(*job.max_errors) : json(nullptr)},
            {"max_errors_given", job.max_errors_given ? json(job.max_errors_given->text()) : json(nullptr)},
            {"deliver_within_s", optional_json(job.deliver_within_s)},
            {"timeout_s", optional_json(job.timeout_s)},
            {"hold", job.hold},
            {"state", to_string(job.state())},
            {"stopped", job.stopped},
            {"expired", job.expired},
            {"counts", counts_json(job)}};
  // Only when there is one: a record without it reads as before (an older broker's, an open API's).
  if (!job.operator_name.empty()) head["operator"] = job.operator_name;
  JobRecord record;
  record.job_id = job.job_id;
  record.created_at_ms = job.created_at_ms;
  record.finished = job.finished();
  std::string& out = record.body;
  out = dump_json(head);
  out.reserve(out.size() + 80 * job.rigs.size() + 4);
  out += "\n[";
  bool first = true;
  for (const JobRig& r : job.rigs) {
    if (!first) out += ',';
    first = false;
    out += '[';
    append_json_value(out, r.rig_id);
    out += ',';
    append_json_value(out, to_string(r.outcome));
    out += ',';
    append_json_value(out, r.cmd_id);
    out += ',';
    append_json_value(out, r.state ? std::string_view(to_string(*r.state)) : std::string_view());
    out += ',';
    append_json_value(out, r.error);
    out += ',';
    append_json_value(out, r.detail);
    out += ',';
    out += r.exit_code ? std::to_string(*r.exit_code) : std::string("null");
    out += ',';
    append_json_value(out, r.first_line);
    out += ']';
  }
  out += ']';
  return record;
}

namespace {

using plain_json = nlohmann::json;

Error malformed(const JobRecord& record, const std::string& what) {
  return make_error(Errc::malformed, "job record " + record.job_id + ": " + what);
}

std::optional<std::uint32_t> optional_u32(const plain_json& head, const char* key) {
  const plain_json& v = head.at(key);
  if (v.is_null()) return std::nullopt;
  return v.get<std::uint32_t>();
}

std::optional<RigShare> optional_share(const plain_json& head, const char* key) {
  const plain_json& v = head.at(key);
  if (v.is_null()) return std::nullopt;
  std::optional<RigShare> share = parse_rig_share(v.get<std::string>());
  if (!share) throw std::invalid_argument(std::string("\"") + key + "\" is not a count or a share");
  return share;
}

void read_string_map(const plain_json& obj, StringMap& out) {
  for (const auto& [k, v] : obj.items()) out[k] = v.get<std::string>();
}

}  // namespace

Expected<Job> job_from_record(const JobRecord& record, bool with_rigs) {
  const std::string_view body = record.body;
  const std::size_t nl = body.find('\n');
  const plain_json head = plain_json::parse(body.substr(0, nl), nullptr, false);
  if (head.is_discarded() || !head.is_object()) return malformed(record, "its head is not a JSON object");
  Job job;
  try {
    const int version = head.at("v").get<int>();
    if (version < kOldestRecordVersion || version > kRecordVersion)
      return malformed(record, "version " + head.at("v").dump() + " is not known to this broker");
    job.job_id = head.at("job_id").get<std::string>();
    job.kind = head.at("kind").get<std::string>();
    read_string_map(head.at("args"), job.args);
    const plain_json& t = head.at("targets");
    for (const plain_json& id : t.at("ids")) job.targets.ids.push_back(id.get<std::string>());
    if (!t.at("glob").is_null()) job.targets.glob = t.at("glob").get<std::string>();
    read_string_map(t.at("labels"), job.targets.labels);
    job.created_at_ms = head.at("created_at_ms").get<std::uint64_t>();
    job.deadline_s = head.at("deadline_s").get<std::uint32_t>();
    job.deadline_at_ms = head.at("deadline_at_ms").get<std::uint64_t>();
    if (!head.at("finished_at_ms").is_null()) job.finished_at_ms = head.at("finished_at_ms").get<std::uint64_t>();
    if (const auto c = head.find("cancelled_at_ms"); c != head.end() && !c->is_null())
      job.cancelled_at_ms = c->get<std::uint64_t>();
    job.max_concurrency = head.at("max_concurrency").get<std::size_t>();
    job.max_concurrency_given = optional_share(head, "max_concurrency_given");
    if (!head.at("max_errors").is_null()) job.max_errors = head.at("max_errors").get<std::size_t>();
    job.max_errors_given = optional_share(head, "max_errors_given");
    job.deliver_within_s = optional_u32(head, "deliver_within_s");
    job.timeout_s = optional_u32(head, "timeout_s");
    job.hold = head.at("hold").get<bool>();
    if (const auto o = head.find("operator"); o != head.end()) job.operator_name = o->get<std::string>();
    job.stopped = head.at("stopped").get<bool>();
    job.expired = head.at("expired").get<bool>();
    const plain_json& counts = head.at("counts");
    for (JobRigOutcome o : all_job_rig_outcomes())
      job.counts[static_cast<std::size_t>(o)] = counts.at(to_string(o)).get<std::size_t>();
    if (!with_rigs) return job;

    if (nl == std::string_view::npos) return malformed(record, "it has no rigs line");
    const plain_json rigs = plain_json::parse(body.substr(nl + 1), nullptr, false);
    if (rigs.is_discarded() || !rigs.is_array()) return malformed(record, "its rigs are not a JSON array");
    job.rigs.reserve(rigs.size());
    for (const plain_json& row : rigs) {
      const std::size_t width = version == 1 ? 6 : 8;
      if (!row.is_array() || row.size() != width)
        return malformed(record, version == 1 ? "a rig is not [rig_id, outcome, cmd_id, state, error, detail]"
                                              : "a rig is not [rig_id, outcome, cmd_id, state, error, detail, "
                                                "exit_code, first_line]");
      JobRig& r = job.rigs.emplace_back();
      r.rig_id = row[0].get<std::string>();
      const std::optional<JobRigOutcome> outcome = job_rig_outcome_from_string(row[1].get<std::string>());
      if (!outcome) return malformed(record, "rig " + r.rig_id + ": unknown outcome " + row[1].dump());
      r.outcome = *outcome;
      r.cmd_id = row[2].get<std::string>();
      if (const std::string state = row[3].get<std::string>(); !state.empty()) {
        r.state = command_state_from_string(state);
        if (!r.state) return malformed(record, "rig " + r.rig_id + ": unknown command state " + row[3].dump());
      }
      r.error = row[4].get<std::string>();
      r.detail = row[5].get<std::string>();
      if (width == 8) {
        if (!row[6].is_null()) r.exit_code = row[6].get<std::int32_t>();
        r.first_line = row[7].get<std::string>();
      }
    }
    job.recount();
  } catch (const std::exception& e) {
    return malformed(record, e.what());
  }
  return job;
}

}  // namespace fleetlink::broker
