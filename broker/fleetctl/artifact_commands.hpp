#pragma once
// fleetctl's artifact commands (docs/OPERATIONS.md, "Artifacts"):
//
//   fleetctl artifacts CMD_ID               the files a command's rig uploaded: name, size, sha256
//   fleetctl fetch CMD_ID NAME [-o FILE]    one of them, to FILE (default: ./NAME), its sha256 checked
#include <string>

#include "job_commands.hpp"

namespace fleetctl {

int artifacts_list(JobCli& cli, const std::string& cmd_id);
int artifact_fetch(JobCli& cli, const std::string& cmd_id, const std::string& name, const std::string& out_path);

}  // namespace fleetctl
