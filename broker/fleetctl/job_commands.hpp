#pragma once
// fleetctl's job commands:
//
//   fleetctl job create KIND [--arg k=v]... (--ids a,b | --glob G | --label k=v)...
//                       [--max-concurrency N|P%] [--max-errors N|P%] [--deadline-s S] [--hold]
//                       [--dry-run] [--watch | --wait [--timeout S]]
//            job list [--state S] [--limit N]         (also: jobs)
//            job show JOB_ID                          (also: job JOB_ID [--wait])
//            job watch JOB_ID [--timeout S]
//            job cancel JOB_ID
//
// and send --rig-glob/--label, which creates a job too (job_create).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "control_client.hpp"

namespace fleetctl {

// What the job commands need of main.cpp: the client, --json, and its ways of
// reporting an error (one wording for every command).
struct JobCli {
  ControlClient& client;
  bool json_output = false;
  std::function<int(int code, const std::string& message)> fail;
  std::function<int(const HttpResult&)> api_error;
  std::function<int(const TransportError&)> unreachable;
};

// A job to create: what POST /v1/jobs takes.
struct JobSpec {
  std::string kind;
  nlohmann::json args = nlohmann::json::object();
  std::vector<std::string> ids;     // --ids a,b,c (split already)
  std::string glob;
  std::vector<std::string> labels;  // k=v
  std::string max_concurrency;      // "N" or "P%"; empty: all at once
  std::string max_errors;           // likewise; empty: never stop
  long deadline_s = -1;
  long deliver_within_s = -1;
  long timeout_s = -1;
  bool hold = false;
  bool has_targets() const { return !ids.empty() || !glob.empty() || !labels.empty(); }
};

enum class Follow { no, wait, watch };

// --max-errors and --max-concurrency: "" if `text` is a whole number or a
// percentage with at most two decimals, else why not (a CLI11 validator).
std::string share_check(const std::string& text);

// POST /v1/jobs (?dry_run=true: prints the selection, sends nothing). The job's
// id on the first line; followed to its end with Follow::wait / watch (timeout_s
// <= 0: until it ends).
int job_create(JobCli& cli, const JobSpec& spec, bool dry_run, Follow follow, double timeout_s);
int job_list(JobCli& cli, const std::string& state, long limit);
// The head, then every rig; a finished job that did not go well everywhere exits 1.
int job_show(JobCli& cli, const std::string& job_id, bool wait, double timeout_s);
// A progress line until it ends (in place on a TTY, a line per change otherwise,
// on stderr), then job_show's table; exit 1 unless every rig is ok.
int job_watch(JobCli& cli, const std::string& job_id, double timeout_s);
// POST /v1/jobs/{id}/cancel.
int job_cancel(JobCli& cli, const std::string& job_id);

// The CLI11 side: `job` with its subcommands (and `job JOB_ID [--wait]`), and `jobs`.
class JobCommands {
 public:
  explicit JobCommands(CLI::App& app);
  // One of them was on the command line.
  bool given() const;
  int run(JobCli& cli);

 private:
  CLI::App* jobs_ = nullptr;
  CLI::App* job_ = nullptr;
  CLI::App* create_ = nullptr;
  CLI::App* list_ = nullptr;
  CLI::App* show_ = nullptr;
  CLI::App* watch_ = nullptr;
  CLI::App* cancel_ = nullptr;
  JobSpec spec_;
  std::string ids_;  // --ids a,b,c
  std::vector<std::string> args_;
  bool dry_run_ = false;
  bool watch_flag_ = false;
  bool wait_ = false;
  double timeout_s_ = 0;
  std::string job_id_;
  std::string state_;
  long limit_ = 0;
};

}  // namespace fleetctl
