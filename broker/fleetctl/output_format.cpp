#include "output_format.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace fleetctl {

using nlohmann::json;

std::string text_of(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::string format_age(std::optional<std::uint64_t> ms) {
  if (!ms) return "-";
  const std::uint64_t s = *ms / 1000;
  char buf[48];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llus", static_cast<unsigned long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%llum%02llus", static_cast<unsigned long long>(s / 60),
                  static_cast<unsigned long long>(s % 60));
  } else if (s < 86400) {
    std::snprintf(buf, sizeof buf, "%lluh%02llum", static_cast<unsigned long long>(s / 3600),
                  static_cast<unsigned long long>((s % 3600) / 60));
  } else {
    std::snprintf(buf, sizeof buf, "%llud%02lluh", static_cast<unsigned long long>(s / 86400),
                  static_cast<unsigned long long>((s % 86400) / 3600));
  }
  return buf;
}

std::string render_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(header.size(), 0);
  for (std::size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (std::size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < cells.size() ? cells[i] : "";
      line += cell;
      if (i + 1 < width.size()) line.append(width[i] - cell.size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };
  emit(header);
  for (const auto& row : rows) emit(row);
  return out;
}

namespace {

std::optional<std::uint64_t> optional_ms(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) {
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  }
  return std::nullopt;
}

const json& field(const json& obj, const char* key) {
  static const json kNull;
  if (!obj.is_object()) return kNull;
  const auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

std::string outbox_text(const json& rig) {
  return text_of(field(rig, "outbox_depth")) + "/" + text_of(field(rig, "outbox_capacity"));
}

std::string last_ack_age(const json& rig) {
  return format_age(optional_ms(field(rig, "last_ack_age_ms")));
}

// "now" while connected; an offline rig's time since it was last seen.
std::string last_seen(const json& rig) {
  if (field(rig, "connected").is_boolean() && field(rig, "connected").get<bool>()) return "now";
  const std::optional<std::uint64_t> age = optional_ms(field(rig, "last_seen_age_ms"));
  return age ? format_age(age) + " ago" : "-";
}

}  // namespace

std::string rigs_table(const json& body) {
  std::vector<std::vector<std::string>> rows;
  const json& rigs = field(body, "rigs");
  if (rigs.is_array()) {
    for (const json& r : rigs) {
      rows.push_back({text_of(field(r, "rig_id")), text_of(field(r, "state")),
                      text_of(field(r, "boot_id")), text_of(field(r, "agent_version")),
                      text_of(field(r, "last_ack_seq")), last_ack_age(r), outbox_text(r),
                      text_of(field(r, "unacked")), last_seen(r)});
    }
  }
  std::sort(rows.begin(), rows.end());
  return render_table(
      {"RIG", "STATE", "BOOT_ID", "VERSION", "LAST_ACK", "AGE", "OUTBOX", "UNACKED", "LAST_SEEN"}, rows);
}

std::string rig_detail(const json& rig) {
  std::string out;
  auto line = [&](const char* label, const std::string& value) {
    out += label;
    out += value;
    out += '\n';
  };
  line("rig:            ", text_of(field(rig, "rig_id")));
  std::string state = text_of(field(rig, "state"));
  if (field(rig, "unresponsive_because").is_string()) state += " (" + text_of(field(rig, "unresponsive_because")) + ")";
  line("state:          ", state);
  line("boot_id:        ", text_of(field(rig, "boot_id")));
  line("agent_version:  ", text_of(field(rig, "agent_version")));
  line("peer:           ", text_of(field(rig, "peer")));
  line("connected_at:   ", text_of(field(rig, "connected_at")));
  line("last_ack:       ", "seq " + text_of(field(rig, "last_ack_seq")) + " at " +
                              text_of(field(rig, "last_ack_at")) + " (" + last_ack_age(rig) +
                              " ago)");
  line("outbox:         ", outbox_text(rig));
  std::string labels;
  const json& l = field(rig, "labels");
  if (l.is_object()) {
    for (const auto& [k, v] : l.items()) {
      if (!labels.empty()) labels += ", ";
      labels += k + "=" + text_of(v);
    }
  }
  line("labels:         ", labels.empty() ? "-" : labels);
  std::string kinds;
  const json& k = field(rig, "kinds");
  if (k.is_array()) {
    for (const json& kind : k) {
      if (!kinds.empty()) kinds += ", ";
      kinds += text_of(kind);
    }
  }
  line("kinds:          ", kinds.empty() ? "-" : kinds);
  const json& unacked = field(rig, "unacked_commands");
  line("unacked:        ", text_of(field(rig, "unacked")));
  if (unacked.is_array() && !unacked.empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const json& u : unacked) {
      rows.push_back({text_of(field(u, "cmd_id")), text_of(field(u, "seq")),
                      text_of(field(u, "kind")), format_age(optional_ms(field(u, "age_ms"))),
                      field(u, "sent") == true ? "yes" : "no"});
    }
    out += '\n';
    out += render_table({"CMD_ID", "SEQ", "KIND", "AGE", "SENT"}, rows);
  }
  return out;
}

std::string command_summary(const json& cmd) {
  std::string out;
  auto line = [&](const char* label, const std::string& value) {
    out += label;
    out += value;
    out += '\n';
  };
  line("cmd_id:       ", text_of(field(cmd, "cmd_id")));
  line("rig:          ", text_of(field(cmd, "rig_id")));
  line("kind:         ", text_of(field(cmd, "kind")));
  std::string args;
  const json& a = field(cmd, "args");
  if (a.is_object()) {
    for (const auto& [k, v] : a.items()) {
      if (!args.empty()) args += " ";
      args += k + "=" + text_of(v);
    }
  }
  line("args:         ", args.empty() ? "-" : args);
  line("seq:          ", text_of(field(cmd, "seq")));
  line("state:        ", text_of(field(cmd, "state")));
  const json& why = field(cmd, "detail");
  if (why.is_string() && !why.get<std::string>().empty()) line("why:          ", text_of(why));
  // Every step of its life that happened, with its time.
  line("enqueued_at:  ", text_of(field(cmd, "enqueued_at")));
  for (const char* step : {"sent_at", "acked_at", "running_at", "cancel_requested_at", "finished_at"}) {
    const json& at = field(cmd, step);
    if (at.is_string()) line((std::string(step) + ":" + std::string(13 - std::strlen(step), ' ')).c_str(), text_of(at));
  }
  if (const json& n = field(cmd, "attempts"); n.is_number() && n.get<int>() > 1)
    line("attempts:     ", text_of(n) + " (sent on that many connections)");
  if (const json& by = field(cmd, "deliver_by"); by.is_string() && !field(cmd, "acked_at").is_string())
    line("deliver_by:   ", text_of(by));
  if (const json& key = field(cmd, "idempotency_key"); key.is_string()) line("idempotency:  ", text_of(key));
  if (const json& job = field(cmd, "job_id"); job.is_string()) line("job:          ", text_of(job));
  if (field(cmd, "duplicate") == true) line("duplicate:    ", "yes (the rig had run it before)");
  const json& nack = field(cmd, "nack");
  if (nack.is_object()) {
    line("nack:         ", text_of(field(nack, "reason")) + ": " + text_of(field(nack, "detail")));
  }
  const json& r = field(cmd, "result");
  if (r.is_object()) {
    line("status:       ", text_of(field(r, "status")));
    line("exit_code:    ", text_of(field(r, "exit_code")));
    if (field(r, "signal") != 0) line("signal:       ", text_of(field(r, "signal")));
    if (!text_of(field(r, "detail")).empty() && !field(r, "detail").is_null()) {
      line("detail:       ", text_of(field(r, "detail")));
    }
    if (field(r, "truncated") == true) {
      line("truncated:    ", "yes (" + text_of(field(r, "dropped_bytes")) + " bytes dropped)");
    }
  }
  return out;
}

namespace {

constexpr const char* kOutcomes[] = {"pending", "dispatched", "ok", "failed", "refused", "skipped", "silent"};


std::uint64_t count_of(const json& counts, const char* key) {
  return optional_ms(field(counts, key)).value_or(0);
}

// A limit as resolved, with the share it came from: "2 (25%)", "3"; `none`
// when unset (or 0, when `zero_is_none`: a concurrency of 0 is all at once).
std::string limit_text(const json& job, const char* key, const char* given_key, const char* none, bool zero_is_none) {
  const json& v = field(job, key);
  if (v.is_null() || (zero_is_none && v == 0)) return none;
  std::string out = text_of(v);
  const json& given = field(job, given_key);
  if (given.is_string()) out += " (" + given.get<std::string>() + ")";
  return out;
}

}  // namespace

std::string jobs_table(const json& body) {
  std::vector<std::vector<std::string>> rows;
  const json& jobs = field(body, "jobs");
  if (jobs.is_array()) {
    for (const json& j : jobs) {
      const json& c = field(j, "counts");
      rows.push_back({text_of(field(j, "job_id")), text_of(field(j, "state")), text_of(field(j, "kind")),
                      text_of(field(j, "created_at")), std::to_string(count_of(c, "total")),
                      std::to_string(count_of(c, "pending") + count_of(c, "dispatched")),
                      std::to_string(count_of(c, "ok")), std::to_string(count_of(c, "failed")),
                      std::to_string(count_of(c, "refused")), std::to_string(count_of(c, "skipped")),
                      std::to_string(count_of(c, "silent"))});
    }
  }
  return render_table(
      {"JOB_ID", "STATE", "KIND", "CREATED", "RIGS", "RUNNING", "OK", "FAILED", "REFUSED", "SKIPPED", "SILENT"}, rows);
}

std::string job_summary(const json& job) {
  std::string out;
  auto line = [&](const char* label, const std::string& value) {
    out += label;
    out += value;
    out += '\n';
  };
  line("job:          ", text_of(field(job, "job_id")));
  std::string kind = text_of(field(job, "kind"));
  const json& a = field(job, "args");
  if (a.is_object()) {
    for (const auto& [k, v] : a.items()) kind += " " + k + "=" + text_of(v);
  }
  line("command:      ", kind);
  line("state:        ", text_of(field(job, "state")));
  line("created_at:   ", text_of(field(job, "created_at")));
  line("deadline_at:  ", text_of(field(job, "deadline_at")) + " (" + text_of(field(job, "deadline_s")) + " s)");
  if (const json& at = field(job, "finished_at"); at.is_string()) line("finished_at:  ", text_of(at));
  if (const json& at = field(job, "cancelled_at"); at.is_string()) line("cancelled_at: ", text_of(at));
  line("concurrency:  ", limit_text(job, "max_concurrency", "max_concurrency_given", "all at once", true));
  line("max_errors:   ", limit_text(job, "max_errors", "max_errors_given", "none (never stops)", false));
  const json& c = field(job, "counts");
  std::string counts = text_of(field(c, "total")) + " rigs";
  for (const char* o : kOutcomes) {
    if (const std::uint64_t n = count_of(c, o); n > 0) counts += ", " + std::to_string(n) + " " + o;
  }
  line("rigs:         ", counts);
  return out;
}

namespace {

// The first line of a string value ("-" for none).
std::string first_line(const json& v) {
  if (!v.is_string()) return "-";
  const std::string& s = v.get_ref<const std::string&>();
  const std::size_t end = s.find_first_of("\r\n");
  std::string line = s.substr(0, end);
  return line.empty() ? "-" : line;
}

}  // namespace

std::string job_rigs_table(const json& job) {
  std::vector<std::vector<std::string>> rows;
  const json& rigs = field(job, "rigs");
  if (rigs.is_array()) {
    for (const json& r : rigs) {
      // The first line of its output; without output, of why it ended so.
      std::string line = first_line(field(r, "output_first_line"));
      if (line == "-") line = first_line(field(r, "detail"));
      rows.push_back({text_of(field(r, "rig_id")), text_of(field(r, "cmd_id")), text_of(field(r, "outcome")),
                      text_of(field(r, "state")), text_of(field(r, "error")), text_of(field(r, "exit_code")),
                      line});
    }
  }
  return render_table({"RIG", "CMD_ID", "OUTCOME", "STATE", "ERROR", "EXIT", "FIRST_LINE"}, rows);
}

std::string job_progress_line(const json& job) {
  const json& c = field(job, "counts");
  std::string out = text_of(field(job, "state"));
  if (field(job, "cancelled_at").is_string() && out == "running") out = "cancelling";
  out += ": done " + std::to_string(count_of(c, "ok"));
  out += ", failed " + std::to_string(count_of(c, "failed"));
  if (const std::uint64_t n = count_of(c, "refused"); n > 0) out += ", refused " + std::to_string(n);
  out += ", running " + std::to_string(count_of(c, "dispatched"));
  out += ", pending " + std::to_string(count_of(c, "pending"));
  out += ", silent " + std::to_string(count_of(c, "silent"));
  if (const std::uint64_t n = count_of(c, "skipped"); n > 0) out += ", skipped " + std::to_string(n);
  out += " (of " + std::to_string(count_of(c, "total")) + ")";
  return out;
}

std::string job_dry_run_text(const json& body) {
  std::vector<std::vector<std::string>> rows;
  const json& rigs = field(body, "rigs");
  if (rigs.is_array()) {
    for (const json& r : rigs) rows.push_back({text_of(field(r, "rig_id")), text_of(field(r, "state"))});
  }
  std::string out = "dry run: " + text_of(field(body, "kind")) + " would go to " + text_of(field(body, "count")) +
                    " rigs (concurrency " + limit_text(body, "max_concurrency", "-", "all at once", true) +
                    ", max_errors " + limit_text(body, "max_errors", "-", "none", false) + ", deadline " +
                    text_of(field(body, "deadline_s")) + " s); nothing was sent\n";
  return out + render_table({"RIG", "STATE"}, rows);
}

bool job_all_ok(const json& job) {
  const json& c = field(job, "counts");
  return field(job, "state") != "running" && count_of(c, "ok") == count_of(c, "total");
}

std::string event_line(const json& e) {
  std::string out = text_of(field(e, "at")) + " " + text_of(field(e, "type"));
  const json& rig = field(e, "rig_id");
  if (rig.is_string() && !rig.get<std::string>().empty()) out += " rig=" + text_of(rig);
  const json& cmd = field(e, "cmd_id");
  if (cmd.is_string() && !cmd.get<std::string>().empty()) out += " cmd=" + text_of(cmd);
  const json& detail = field(e, "detail");
  if (detail.is_string() && !detail.get<std::string>().empty()) out += " " + text_of(detail);
  return out;
}

}  // namespace fleetctl
