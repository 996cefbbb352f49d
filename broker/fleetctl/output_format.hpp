#pragma once
// Human-readable renderings of control API answers (pure functions).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fleetctl {

// 47000 -> "47s", 192000 -> "3m12s", 7500000 -> "2h05m"; nullopt -> "-".
std::string format_age(std::optional<std::uint64_t> ms);

// Left-aligned columns separated by two spaces; no trailing blanks.
std::string render_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows);

// GET /v1/rigs body -> RIG STATE BOOT_ID VERSION LAST_ACK AGE OUTBOX UNACKED
std::string rigs_table(const nlohmann::json& body);

// GET /v1/rigs/{rig} body -> key: value lines and the unacked commands.
std::string rig_detail(const nlohmann::json& rig);

// GET /v1/commands/{id} body -> key: value lines (output not included).
std::string command_summary(const nlohmann::json& cmd);

// GET /v1/jobs body -> JOB_ID STATE KIND CREATED RIGS RUNNING OK FAILED REFUSED SKIPPED SILENT
std::string jobs_table(const nlohmann::json& body);

// GET /v1/jobs/{id} body -> key: value lines (state, deadline, limits, counts).
std::string job_summary(const nlohmann::json& job);

// The job's rigs -> RIG CMD_ID OUTCOME STATE ERROR EXIT FIRST_LINE (in the job's
// order): FIRST_LINE is the first line of the rig's output, or without output
// of its detail (why it ended so, why it was not sent).
std::string job_rigs_table(const nlohmann::json& job);

// A job's progress on one line: "running: done 3, failed 1, running 10,
// pending 26, silent 0 (of 40)" (refused and skipped when there are any;
// "cancelling" while a cancelled job's commands end).
std::string job_progress_line(const nlohmann::json& job);

// POST /v1/jobs?dry_run=true body -> a line with the count and limits, then RIG STATE.
std::string job_dry_run_text(const nlohmann::json& body);

// Whether every rig of a finished job is ok (what `job --wait` exits 0 on).
bool job_all_ok(const nlohmann::json& job);

// One SSE event's data -> "TIME TYPE rig=… cmd=… detail".
std::string event_line(const nlohmann::json& event);

// A JSON value as plain text: strings unquoted, null as "-".
std::string text_of(const nlohmann::json& v);

}  // namespace fleetctl
