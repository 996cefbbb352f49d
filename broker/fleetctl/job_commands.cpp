#include "job_commands.hpp"

#include "cli_checks.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "exit_codes.hpp"
#include "output_format.hpp"

namespace fleetctl {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

json parse_json(const std::string& text) { return json::parse(text, nullptr, /*allow_exceptions=*/false); }

std::string field_text(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return "-";
  return text_of(j.at(key));
}

// "3" as the number 3, "10%" as the string: the API takes both.
json share_json(const std::string& text) {
  if (!text.empty() && std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
    return std::stoull(text);
  return text;
}

// k=v into `out`; false if there is no '=' or no key.
bool split_kv(const std::string& kv, json& out) {
  const std::size_t eq = kv.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  out[kv.substr(0, eq)] = kv.substr(eq + 1);
  return true;
}

int print_job(const JobCli& cli, const json& job) {
  if (cli.json_output) {
    std::cout << job.dump() << "\n";
  } else {
    std::cout << job_summary(job);
    if (job.contains("rigs")) std::cout << "\n" << job_rigs_table(job);
  }
  std::cout.flush();
  return kOk;
}

// Exit code for a finished job, with the reason on stderr.
int finished_job_exit(const JobCli& cli, const json& job) {
  if (job_all_ok(job)) return kOk;
  std::string why;
  const json counts = job.value("counts", json::object());
  for (const char* o : {"failed", "refused", "silent", "skipped"}) {
    const long n = counts.value(o, 0L);
    if (n > 0) why += (why.empty() ? "" : ", ") + std::to_string(n) + " " + o;
  }
  return cli.fail(kFailed, "job " + field_text(job, "job_id") + " " + field_text(job, "state") + ": " +
                               (why.empty() ? "not every rig ok" : why));
}

// Shows the job's progress on stderr: in place on a terminal, a line per change otherwise.
class Progress {
 public:
  explicit Progress(bool on) : on_(on), tty_(on && isatty(fileno(stderr)) != 0) {}
  void show(const json& job) {
    if (!on_ || !job.is_object()) return;
    const std::string line = "job " + field_text(job, "job_id") + " " + job_progress_line(job);
    if (line == last_) return;
    last_ = line;
    if (tty_) {
      std::cerr << "\r\033[K" << line << std::flush;
      open_ = true;
    } else {
      std::cerr << line << "\n" << std::flush;
    }
  }
  void end() {
    if (open_) std::cerr << "\n" << std::flush;
    open_ = false;
  }
  ~Progress() { end(); }

 private:
  bool on_;
  bool tty_;
  bool open_ = false;
  std::string last_;
};

// Follows a job until it is no longer running (timeout_s <= 0: until then; its
// deadline bounds it), asking without the rig list meanwhile; then `job` is all
// of it. kOk, or the exit code of what went wrong (reported).
int wait_job(JobCli& cli, const std::string& job_id, double timeout_s, json& job, Progress& progress) {
  ControlClient& c = cli.client;
  const bool bounded = timeout_s > 0;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(bounded ? timeout_s : 0));
  auto delay = std::chrono::milliseconds(100);
  const std::string path = "/v1/jobs/" + c.escape(job_id);
  TransportError e;
  progress.show(job);
  while (field_text(job, "state") == "running" || !job.is_object()) {
    if (bounded && Clock::now() >= deadline) {
      progress.end();
      if (!cli.json_output) std::cerr << job_summary(job);
      return cli.fail(kTimeout, "timed out after " + std::to_string(timeout_s) + "s waiting for job " + job_id +
                                    " (it goes on; see: fleetctl job show " + job_id + ")");
    }
    if (job.is_object()) std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(1000));
    const auto s = c.call("GET", path + "?rigs=false", {}, e, 10000);
    if (!s) return cli.unreachable(e);
    if (s->status != 200) return cli.api_error(*s);
    job = parse_json(s->body);
    if (!job.is_object()) return cli.fail(kFailed, "control API answered invalid JSON");
    progress.show(job);
  }
  progress.end();
  const auto s = c.call("GET", path, {}, e, 30000);
  if (!s) return cli.unreachable(e);
  if (s->status != 200) return cli.api_error(*s);
  job = parse_json(s->body);
  return job.is_object() ? kOk : cli.fail(kFailed, "control API answered invalid JSON");
}

std::vector<std::string> split_ids(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

std::string share_check(const std::string& text) {
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  if (i == 0 || i > 7) return "a number of rigs or a percentage of them (10%) expected, got '" + text + "'";
  if (i == text.size()) return {};
  std::size_t j = i;
  if (text[j] == '.') {
    ++j;
    const std::size_t digits = j;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    if (j == digits || j - digits > 2) return "a percentage has at most two decimals: '" + text + "'";
  }
  if (j + 1 == text.size() && text[j] == '%') return {};
  return "a number of rigs or a percentage of them (10%) expected, got '" + text + "'";
}

int job_create(JobCli& cli, const JobSpec& spec, bool dry_run, Follow follow, double timeout_s) {
  ControlClient& c = cli.client;
  if (!spec.has_targets()) return cli.fail(kUsage, "a job needs targets: --ids, --glob and/or --label");
  json targets = json::object();
  if (!spec.ids.empty()) targets["ids"] = spec.ids;
  if (!spec.glob.empty()) targets["glob"] = spec.glob;
  if (!spec.labels.empty()) {
    json labels = json::object();
    for (const std::string& kv : spec.labels)
      if (!split_kv(kv, labels)) return cli.fail(kUsage, "--label wants key=value, got '" + kv + "'");
    targets["labels"] = labels;
  }
  json request{{"kind", spec.kind}, {"args", spec.args}, {"targets", targets}};
  if (!spec.max_concurrency.empty()) request["max_concurrency"] = share_json(spec.max_concurrency);
  if (!spec.max_errors.empty()) request["max_errors"] = share_json(spec.max_errors);
  if (spec.deadline_s >= 0) request["deadline_s"] = spec.deadline_s;
  if (spec.deliver_within_s >= 0) request["deliver_within_s"] = spec.deliver_within_s;
  if (spec.timeout_s >= 0) request["timeout_s"] = spec.timeout_s;
  if (spec.hold) request["hold"] = true;
  TransportError e;
  if (dry_run) {
    const auto r = c.call("POST", "/v1/jobs?dry_run=true", request.dump(), e);
    if (!r) return cli.unreachable(e);
    if (r->status != 200) return cli.api_error(*r);
    const json body = parse_json(r->body);
    if (!body.is_object()) return cli.fail(kFailed, "control API answered invalid JSON");
    if (cli.json_output) {
      std::cout << body.dump() << "\n";
    } else {
      std::cout << job_dry_run_text(body);
    }
    std::cout.flush();
    if (body.value("count", 0L) == 0) return cli.fail(kFailed, "no known rig matches the targets");
    return kOk;
  }
  const bool following = follow != Follow::no;
  // Following: the answer without its rig list (3 MB for 20,000 rigs); the end has it.
  const auto r = c.call("POST", following ? "/v1/jobs?rigs=false" : "/v1/jobs", request.dump(), e);
  if (!r) return cli.unreachable(e);
  if (r->status != 202) return cli.api_error(*r);
  json job = parse_json(r->body);
  const std::string job_id = field_text(job, "job_id");
  if (!cli.json_output) {
    std::cout << "job " << job_id << "\n";
    std::cout.flush();
  }
  if (!following) return print_job(cli, job);
  std::cerr << "job " << job_id << ": " << spec.kind << " to "
            << field_text(job.value("counts", json::object()), "total") << " rigs, deadline "
            << field_text(job, "deadline_at") << "\n";
  Progress progress(follow == Follow::watch);
  if (const int rc = wait_job(cli, job_id, timeout_s, job, progress); rc != kOk) return rc;
  print_job(cli, job);
  return finished_job_exit(cli, job);
}

int job_list(JobCli& cli, const std::string& state, long limit) {
  ControlClient& c = cli.client;
  std::string query;
  if (!state.empty()) query += "state=" + c.escape(state);
  if (limit > 0) query += std::string(query.empty() ? "" : "&") + "limit=" + std::to_string(limit);
  TransportError e;
  const auto r = c.call("GET", "/v1/jobs" + (query.empty() ? "" : "?" + query), {}, e);
  if (!r) return cli.unreachable(e);
  if (r->status != 200) return cli.api_error(*r);
  if (cli.json_output) {
    std::cout << r->body << (r->body.empty() || r->body.back() != '\n' ? "\n" : "") << std::flush;
    return kOk;
  }
  const json body = parse_json(r->body);
  if (body.is_discarded()) return cli.fail(kFailed, "control API answered invalid JSON");
  std::cout << jobs_table(body) << std::flush;
  return kOk;
}

int job_show(JobCli& cli, const std::string& job_id, bool wait, double timeout_s) {
  ControlClient& c = cli.client;
  json job;
  if (wait) {
    Progress quiet(false);
    if (const int rc = wait_job(cli, job_id, timeout_s, job, quiet); rc != kOk) return rc;
  } else {
    TransportError e;
    const auto r = c.call("GET", "/v1/jobs/" + c.escape(job_id), {}, e);
    if (!r) return cli.unreachable(e);
    if (r->status != 200) return cli.api_error(*r);
    job = parse_json(r->body);
    if (!job.is_object()) return cli.fail(kFailed, "control API answered invalid JSON");
  }
  print_job(cli, job);
  return field_text(job, "state") == "running" ? kOk : finished_job_exit(cli, job);
}

int job_watch(JobCli& cli, const std::string& job_id, double timeout_s) {
  json job;
  Progress progress(true);
  if (const int rc = wait_job(cli, job_id, timeout_s, job, progress); rc != kOk) return rc;
  print_job(cli, job);
  return finished_job_exit(cli, job);
}

int job_cancel(JobCli& cli, const std::string& job_id) {
  ControlClient& c = cli.client;
  TransportError e;
  const auto r = c.call("POST", "/v1/jobs/" + c.escape(job_id) + "/cancel", {}, e);
  if (!r) return cli.unreachable(e);
  if (r->status != 202) {
    const json body = parse_json(r->body);
    if (r->status == 409 && field_text(body, "error") == "not_running") {
      if (cli.json_output) std::cout << r->body << "\n" << std::flush;
      return cli.fail(kFailed, "job " + job_id + " is not running (state " + field_text(body, "state") +
                                   "): nothing to cancel");
    }
    if (r->status == 409 && field_text(body, "error") == "cancel_pending") {
      if (cli.json_output) std::cout << r->body << "\n" << std::flush;
      return cli.fail(kFailed, "job " + job_id + " was already cancelled (at " + field_text(body, "cancelled_at") +
                                   "): its commands are ending (follow: fleetctl job watch " + job_id + ")");
    }
    return cli.api_error(*r);
  }
  const json job = parse_json(r->body);
  if (!job.is_object()) return cli.fail(kFailed, "control API answered invalid JSON");
  if (cli.json_output) {
    std::cout << job.dump() << "\n" << std::flush;
    return kOk;
  }
  const json counts = job.value("counts", json::object());
  std::cout << "cancelled job " << job_id << ": nothing more is sent (" << field_text(counts, "skipped")
            << " rigs skipped), " << field_text(counts, "dispatched")
            << " commands in flight are being cancelled (follow: fleetctl job watch " << job_id << ")\n"
            << std::flush;
  return kOk;
}

JobCommands::JobCommands(CLI::App& app) {
  const CLI::Validator share_validator(share_check, "N|P%");
  const CLI::Validator positive = positive_number();
  jobs_ = app.add_subcommand("jobs", "list jobs, newest first (the same as: job list)");
  jobs_->add_option("--state", state_, "only jobs in this state (running, done, stopped, expired, cancelled)");
  jobs_->add_option("--limit", limit_, "at most this many (default 100, at most 1000)")->check(whole_number(1, 1000));

  job_ = app.add_subcommand("job",
                            "fan-out jobs: create, list, show, watch, cancel (job JOB_ID is job show JOB_ID)");
  job_->require_subcommand(0, 1);
  job_->add_option("JOB_ID", job_id_, "job id: show it (the same as: job show JOB_ID)");
  job_->add_flag("--wait", wait_, "with JOB_ID: follow it to its end; exit 1 unless every rig is ok");
  job_->add_option("--timeout", timeout_s_, "seconds to wait with --wait (default: until it ends)")
      ->check(positive);

  create_ = job_->add_subcommand("create", "create a job: one command to every rig the targets select");
  create_->add_option("KIND", spec_.kind, "command kind (dmesg, reboot, suite, or a plugin's)")->required();
  create_->add_option("--arg", args_, "argument key=value (repeatable)")->allow_extra_args(false);
  create_->add_option("--ids", ids_, "these rigs, comma-separated (a,b,c)");
  create_->add_option("--glob", spec_.glob, "every known rig whose id matches this glob (rig-04*)");
  create_->add_option("--label", spec_.labels, "every known rig with this label k=v (repeatable; all must match)")
      ->allow_extra_args(false);
  create_->add_option("--max-concurrency", spec_.max_concurrency,
                      "commands in flight at once, a number or a share of the rigs (25%) (default: all)")
      ->check(share_validator);
  create_->add_option("--max-errors", spec_.max_errors,
                      "stop sending once more than this many rigs failed, a number or a share (10%)")
      ->check(share_validator);
  create_->add_option("--deadline-s", spec_.deadline_s,
                      "seconds until it ends whatever its rigs do (default: the longest its commands can take)")
      ->check(whole_number(1, kWeekSeconds));
  create_->add_option("--deliver-within", spec_.deliver_within_s,
                      "seconds for each command to be acknowledged (default: the kind's)")
      ->check(whole_number(1, kWeekSeconds));
  create_->add_option("--cmd-timeout", spec_.timeout_s, "seconds for each command's result (default: the kind's)")
      ->check(whole_number(1, kWeekSeconds));
  create_->add_flag("--hold", spec_.hold, "listed rigs never seen: hold their commands until they connect");
  create_->add_flag("--dry-run", dry_run_, "show which rigs the targets select, with their state; send nothing");
  create_->add_flag("--watch", watch_flag_, "follow it with a progress line, then its rigs; exit 1 unless all ok");
  create_->add_flag("--wait", wait_, "follow it quietly to its end, then its rigs; exit 1 unless all ok");
  create_->add_option("--timeout", timeout_s_, "seconds to follow it (default: until it ends)")
      ->check(positive);

  list_ = job_->add_subcommand("list", "list jobs, newest first (the store's history)");
  list_->add_option("--state", state_, "only jobs in this state (running, done, stopped, expired, cancelled)");
  list_->add_option("--limit", limit_, "at most this many (default 100, at most 1000)")->check(whole_number(1, 1000));

  show_ = job_->add_subcommand("show", "a job's counts, state and deadline, then every rig's outcome, exit code "
                                       "and first line of output");
  show_->add_option("JOB_ID", job_id_, "job id")->required();

  watch_ = job_->add_subcommand("watch", "follow a job with a progress line, then its rigs; exit 1 unless all ok");
  watch_->add_option("JOB_ID", job_id_, "job id")->required();
  watch_->add_option("--timeout", timeout_s_, "seconds to follow it (default: until it ends)")
      ->check(positive);

  cancel_ = job_->add_subcommand("cancel", "cancel a running job: nothing more is sent, its commands are cancelled");
  cancel_->add_option("JOB_ID", job_id_, "job id")->required();
}

bool JobCommands::given() const { return *jobs_ || *job_; }

int JobCommands::run(JobCli& cli) {
  if (*jobs_ || *list_) return job_list(cli, state_, limit_);
  if (*create_) {
    if (watch_flag_ && wait_) return cli.fail(kUsage, "--watch or --wait, not both");
    if (dry_run_ && (watch_flag_ || wait_)) return cli.fail(kUsage, "--dry-run sends nothing: nothing to follow");
    for (const std::string& kv : args_)
      if (!split_kv(kv, spec_.args)) return cli.fail(kUsage, "--arg wants key=value, got '" + kv + "'");
    spec_.ids = split_ids(ids_);
    const Follow follow = watch_flag_ ? Follow::watch : wait_ ? Follow::wait : Follow::no;
    return job_create(cli, spec_, dry_run_, follow, timeout_s_);
  }
  if (*show_) return job_show(cli, job_id_, false, 0);
  if (*watch_) return job_watch(cli, job_id_, timeout_s_);
  if (*cancel_) return job_cancel(cli, job_id_);
  if (job_id_.empty()) return cli.fail(kUsage, "job: give a subcommand (create, list, show, watch, cancel) or JOB_ID");
  return job_show(cli, job_id_, wait_, timeout_s_);
}

}  // namespace fleetctl
