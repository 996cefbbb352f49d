#pragma once
// A job as the control API shows it (GET /v1/jobs/{id}) and as the command store
// keeps it (JobRecord.body). Pure.
//
// The record's body is two JSON lines: the head (every field but the rigs, with
// times in Unix ms, "v" its version), then the rigs as arrays [rig_id, outcome,
// cmd_id, state, error, detail, exit_code, first_line] ("" or null for none).
// Version 1 records (rigs without exit_code and first_line, no cancelled_at_ms)
// are still read. A listing reads the first line only: a
// fleet-wide job's rigs are 1.5 MB, its head a few hundred bytes.
#include <string>

#include "control/jobs.hpp"
#include "fleet/fleet.hpp"
#include "fleetlink/expected.hpp"
#include "store/command_store.hpp"

namespace fleetlink::broker {

// The job as JSON text, "rigs" last (left out unless with_rigs). A dispatched
// rig's "state" is its command's now, asked of `live` (null: not shown); a
// settled rig's is the one its command ended in. `batch_alias` adds "batch_id"
// (the same id) for clients of the older batch API. The rig list is written
// directly, not through a JSON tree: a fleet-wide job lists 20,000 rigs, and the
// tree cost ~14k instructions per rig, as much as sending the commands. Byte for
// byte what dump_json of the equivalent tree gives (tested).
std::string job_json_text(const Job& job, const Fleet* live, bool with_rigs, bool batch_alias = false);

// The record the store keeps of the job now.
JobRecord job_record(const Job& job);

// The job a record holds; without its rigs (only their counts) unless with_rigs.
Expected<Job> job_from_record(const JobRecord& record, bool with_rigs);

}  // namespace fleetlink::broker
