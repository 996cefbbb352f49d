// POST /v1/jobs (one command to every rig the targets select; ?dry_run=true:
// only which rigs), GET /v1/jobs (history, from the store), GET /v1/jobs/{job},
// POST /v1/jobs/{job}/cancel; and the older names of the same: POST
// /v1/commands with targets, GET /v1/batches/{batch}.
#include <charconv>
#include <string>
#include <vector>

#include "control/command_request.hpp"
#include "control/control_json.hpp"
#include "control/handler_support.hpp"
#include "control/handlers.hpp"
#include "control/http_util.hpp"
#include "control/job_json.hpp"
#include "control/jobs.hpp"
#include "fleet/command_defaults.hpp"
#include "fleetlink/uuid.hpp"

namespace fleetlink::broker::handlers {
namespace {

using json = nlohmann::ordered_json;

constexpr std::size_t kMaxListLimit = 1000;
// A listing filtered by a state the store does not index reads this many pages at most.
constexpr int kMaxListPages = 20;

bool parse_count(std::string_view text, std::uint64_t& out) {
  const auto res = std::from_chars(text.data(), text.data() + text.size(), out);
  return res.ec == std::errc{} && res.ptr == text.data() + text.size();
}

// "max_errors": 3 or "10%". False (and `error`) if malformed.
bool optional_share(const json& body, const char* key, std::optional<RigShare>& out, HttpResponse& error) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  if (it->is_number_unsigned() && it->get<std::uint64_t>() <= 1'000'000) {
    out = RigShare{it->get<std::uint64_t>(), 0, false};
    return true;
  }
  if (it->is_string()) out = parse_rig_share(it->get<std::string>());
  if (!out) {
    error = json_error(400, "bad_request",
                       "\"" + std::string(key) + "\" must be a number of rigs or a percentage of them (\"10%\")");
    return false;
  }
  return true;
}

// ?rigs=false: the answer without its per-rig list (a fleet-wide job lists
// 20,000 rigs, 3 MB). False if the value is invalid.
bool want_rig_list(const HttpRequest& req, bool& with_rigs) {
  const auto query = parse_query(req.query);
  const auto it = query.find("rigs");
  if (it == query.end() || it->second == "true") {
    with_rigs = true;
    return true;
  }
  with_rigs = false;
  return it->second == "false";
}

// The request's "targets" object: ids, an id glob and/or labels. False (and
// `error`) if malformed.
bool parse_targets(const json& t, JobTargets& targets, HttpResponse& error) {
  if (const auto ids = t.find("ids"); ids != t.end() && !ids->is_null()) {
    if (!ids->is_array()) {
      error = json_error(400, "bad_request", "\"targets.ids\" must be an array of strings");
      return false;
    }
    for (const json& id : *ids) {
      if (!id.is_string() || id.get<std::string>().empty()) {
        error = json_error(400, "bad_request", "\"targets.ids\" must be an array of strings");
        return false;
      }
      targets.ids.push_back(id.get<std::string>());
    }
  }
  if (const auto g = t.find("glob"); g != t.end() && !g->is_null()) {
    if (!g->is_string()) {
      error = json_error(400, "bad_request", "\"targets.glob\" must be a string");
      return false;
    }
    targets.glob = g->get<std::string>();
  }
  std::string detail;
  if (const auto l = t.find("labels"); l != t.end() && !json_to_string_map(*l, targets.labels, detail)) {
    error = json_error(400, "bad_request", "\"targets.labels\": " + detail);
    return false;
  }
  if (targets.empty()) {
    error = json_error(400, "bad_request", "\"targets\" must give \"ids\", \"glob\" or \"labels\"");
    return false;
  }
  return true;
}

bool in_range(const std::optional<std::uint32_t>& v, std::uint32_t max) { return !v || (*v >= 1 && *v <= max); }

// The job's request from the body; false (and `error`) if malformed.
bool read_job_request(const json& body, JobRequest& request, HttpResponse& error) {
  // The per-command fields, read as for one command; a job's commands each get them.
  CommandRequest one;
  if (auto bad = read_command_request(body, one)) {
    error = json_error(400, "bad_request", *bad);
    return false;
  }
  if (!one.cmd_id.empty() || !one.idempotency_key.empty()) {
    error = json_error(400, "bad_request",
                       "\"cmd_id\" and \"idempotency_key\" name one command; a job sends one to each of its rigs");
    return false;
  }
  if (!in_range(one.deliver_within_s, kMaxDeadlineS) || !in_range(one.timeout_s, kMaxDeadlineS)) {
    error = json_error(400, "bad_request",
                       "\"deliver_within_s\" and \"timeout_s\": 1.." + std::to_string(kMaxDeadlineS) + " seconds");
    return false;
  }
  request.kind = std::move(one.kind);
  request.args = std::move(one.args);
  request.deliver_within_s = one.deliver_within_s;
  request.timeout_s = one.timeout_s;
  request.hold = one.hold;
  const auto t = body.find("targets");
  if (t == body.end() || !t->is_object()) {
    error = json_error(400, "bad_request",
                       "\"targets\" is required: an object with \"ids\", \"glob\" and/or \"labels\"");
    return false;
  }
  if (!parse_targets(*t, request.targets, error)) return false;
  if (!optional_share(body, "max_concurrency", request.max_concurrency, error) ||
      !optional_share(body, "max_errors", request.max_errors, error))
    return false;
  if (request.max_concurrency && request.max_concurrency->percent && request.max_concurrency->basis_points == 0) {
    error = json_error(400, "bad_request", "\"max_concurrency\": a percentage above 0 (or 0 for all at once)");
    return false;
  }
  if (const auto d = body.find("deadline_s"); d != body.end() && !d->is_null()) {
    if (!d->is_number_unsigned() || d->get<std::uint64_t>() < 1 || d->get<std::uint64_t>() > kMaxJobDeadlineS) {
      error = json_error(400, "bad_request",
                         "\"deadline_s\": 1.." + std::to_string(kMaxJobDeadlineS) + " seconds (at most 7 days)");
      return false;
    }
    request.deadline_s = static_cast<std::uint32_t>(d->get<std::uint64_t>());
  }
  return true;
}

HttpResponse unknown_job(const std::string& job_id, bool batch_alias) {
  return json_response(404, json{{"error", batch_alias ? "unknown_batch" : "unknown_job"},
                                 {batch_alias ? "batch_id" : "job_id", job_id},
                                 {"detail", "no such job (or past the store's retention)"}});
}

HttpResponse text_response(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

// ?dry_run=true: the selection, nothing sent. False if the value is invalid.
bool want_dry_run(const HttpRequest& req, bool& dry_run) {
  const auto query = parse_query(req.query);
  const auto it = query.find("dry_run");
  dry_run = it != query.end() && it->second == "true";
  return it == query.end() || it->second == "true" || it->second == "false";
}

// {"dry_run":true,"kind":...,"targets":{...},"count":n,"max_concurrency":..,
//  "max_errors":..,"deadline_s":..,"rigs":[{"rig_id":..,"state":..},...]}
HttpResponse dry_run_answer(const Fleet& fleet, const JobRequest& request) {
  const JobPreview p = JobTable::preview(fleet, request);
  json rigs = json::array();
  for (const JobPreview::Rig& r : p.rigs) rigs.push_back(json{{"rig_id", r.rig_id}, {"state", r.state}});
  json ids = json::array();
  for (const std::string& id : request.targets.ids) ids.push_back(id);
  json labels = json::object();
  for (const auto& [k, v] : request.targets.labels) labels[k] = v;
  json out{{"dry_run", true},
           {"kind", request.kind},
           {"targets", json{{"ids", std::move(ids)},
                            {"glob", request.targets.glob.empty() ? json(nullptr) : json(request.targets.glob)},
                            {"labels", std::move(labels)}}},
           {"count", p.rigs.size()},
           {"max_concurrency", p.max_concurrency},
           {"max_errors", p.max_errors ? json(*p.max_errors) : json(nullptr)},
           {"deadline_s", p.deadline_s},
           {"rigs", std::move(rigs)}};
  return json_response(200, out);
}

HttpResponse post_job_as(const RouteContext& ctx, bool batch_alias) {
  if (ctx.options.jobs == nullptr) return json_error(503, "unavailable", "jobs are not available on this listener");
  bool with_rigs = true;
  if (!want_rig_list(ctx.request, with_rigs)) return json_error(400, "bad_request", "\"rigs\" must be true or false");
  bool dry_run = false;
  if (!want_dry_run(ctx.request, dry_run))
    return json_error(400, "bad_request", "\"dry_run\" must be true or false");
  HttpResponse error;
  const std::optional<json> body = parse_object_body(ctx.request, false, error);
  if (!body) return error;
  JobRequest request;
  if (!read_job_request(*body, request, error)) return error;
  // Which rigs the targets select, with their state: nothing is sent or recorded.
  if (dry_run) return dry_run_answer(ctx.fleet, request);
  request.operator_name = ctx.caller.name;
  if (ctx.fleet.draining()) {
    HttpResponse r = json_error(503, "draining", "broker " + ctx.fleet.broker_id() + " is draining");
    r.headers.emplace_back("Retry-After", "5");
    return r;
  }
  std::vector<std::string> rigs = JobTable::select(ctx.fleet, request.targets);
  if (rigs.empty()) return json_error(422, "no_matching_rigs", "no known rig matches the targets");
  const Job& job = ctx.options.jobs->start(ctx.fleet, std::move(request), std::move(rigs), uuid_v7().to_string(),
                                           ctx.now_ms);
  HttpResponse r = text_response(202, job_json_text(job, &ctx.fleet, with_rigs, batch_alias));
  r.headers.emplace_back("Location", "/v1/jobs/" + job.job_id);
  // The record comes first: the job and its commands are in the store before
  // the answer, and before any of them goes to a rig.
  r.after_record = ctx.fleet.persist();
  r.if_unrecorded = [job_id = job.job_id](const Error& e) {
    return json_response(503, json{{"error", "store_unavailable"},
                                   {"job_id", job_id},
                                   {"detail", "the job's commands could not be recorded (" + e.detail +
                                                  "): none was sent"}});
  };
  return r;
}

// {"jobs":[heads...],"next_before":<last or null>}
std::string jobs_page(const std::vector<std::string>& heads, const std::string* next_before) {
  std::string out = "{\"jobs\":[";
  for (std::size_t i = 0; i < heads.size(); ++i) {
    if (i > 0) out += ',';
    out += heads[i];
  }
  out += "],\"next_before\":";
  if (next_before != nullptr) {
    append_json_value(out, *next_before);
  } else {
    out += "null";
  }
  out += '}';
  return out;
}

HttpResponse get_job_as(const RouteContext& ctx, const std::string& job_id, bool batch_alias) {
  bool with_rigs = true;
  if (!want_rig_list(ctx.request, with_rigs)) return json_error(400, "bad_request", "\"rigs\" must be true or false");
  if (const Job* job = ctx.options.jobs ? ctx.options.jobs->find(job_id) : nullptr)
    return text_response(200, job_json_text(*job, &ctx.fleet, with_rigs, batch_alias));
  // Not running here: its dispatched rigs' states are the store's, through the fleet.
  auto render = [job_id, with_rigs, batch_alias](const Fleet& fleet, const std::optional<JobRecord>& record) {
    if (!record) return unknown_job(job_id, batch_alias);
    Expected<Job> stored = job_from_record(*record, with_rigs);
    if (!stored) return json_error(500, "bad_record", stored.error().detail);
    return text_response(200, job_json_text(*stored, &fleet, with_rigs, batch_alias));
  };
  CommandStore* store = ctx.options.store;
  if (store == nullptr) return unknown_job(job_id, batch_alias);
  if (!store->answers_at_once()) {
    // A store that answers later (Redis): the answer comes with its reply.
    HttpResponse r = json_error(503, "shutting_down", "the broker is shutting down");
    r.deferred = [store, job_id, render](Fleet& fleet, HttpResponse::Answer answer) {
      store->find_job(job_id, [&fleet, render, answer](std::optional<JobRecord> found) { answer(render(fleet, found)); });
    };
    return r;
  }
  std::optional<JobRecord> record;
  store->find_job(job_id, [&](std::optional<JobRecord> found) { record = std::move(found); });
  return render(ctx.fleet, record);
}

// A job that is not in this broker's table, as the store has it: unknown (404),
// finished (409 not_running), or running: another broker drives it (409 job_elsewhere).
HttpResponse cancel_not_here(const std::string& job_id, const std::optional<JobRecord>& record) {
  if (!record) return unknown_job(job_id, false);
  Expected<Job> stored = job_from_record(*record, false);
  if (!stored) return json_error(500, "bad_record", stored.error().detail);
  if (record->finished)
    return json_response(409, json{{"error", "not_running"},
                                   {"job_id", job_id},
                                   {"state", to_string(stored->state())},
                                   {"detail", "the job has already finished"}});
  return json_response(409, json{{"error", "job_elsewhere"},
                                 {"job_id", job_id},
                                 {"state", to_string(stored->state())},
                                 {"detail", "the job is running, driven by another broker sharing this store: "
                                            "cancel it through that broker's control API"}});
}

}  // namespace

// 202 with the job (state "cancelled", or "running" with cancelled_at while its
// commands end); 404 unknown; 409 not_running (finished), cancel_pending (cancelled
// before, its commands still ending) or job_elsewhere.
HttpResponse post_job_cancel(const RouteContext& ctx) {
  const std::string& job_id = ctx.params.get("job");
  if (ctx.options.jobs == nullptr) return json_error(503, "unavailable", "jobs are not available on this listener");
  switch (ctx.options.jobs->cancel(ctx.fleet, job_id, ctx.now_ms)) {
    case JobCancel::cancelled: {
      const Job* job = ctx.options.jobs->find(job_id);
      (void)ctx.fleet.persist();
      return text_response(202, job_json_text(*job, &ctx.fleet, true));
    }
    case JobCancel::finished: {
      const Job* job = ctx.options.jobs->find(job_id);
      return json_response(409, json{{"error", "not_running"},
                                     {"job_id", job_id},
                                     {"state", job != nullptr && job->finished() ? to_string(job->state()) : "expired"},
                                     {"detail", job != nullptr && job->finished()
                                                    ? "the job has already finished"
                                                    : "the job is ending: its deadline passed"}});
    }
    case JobCancel::pending: {
      // As for a command (POST /v1/commands/{id}/cancel): a second cancel while the
      // first is on its way is 409 cancel_pending, never a second 202.
      const Job* job = ctx.options.jobs->find(job_id);
      return json_response(409, json{{"error", "cancel_pending"},
                                     {"job_id", job_id},
                                     {"state", job != nullptr ? to_string(job->state()) : "running"},
                                     {"cancelled_at", job != nullptr ? iso8601_or_null(job->cancelled_at_ms) : json()},
                                     {"detail", "a cancel of this job is already on its way: its commands are ending"}});
    }
    case JobCancel::unknown:
      break;
  }
  CommandStore* store = ctx.options.store;
  if (store == nullptr) return unknown_job(job_id, false);
  if (!store->answers_at_once()) {
    HttpResponse r = json_error(503, "shutting_down", "the broker is shutting down");
    r.deferred = [store, job_id](Fleet&, HttpResponse::Answer answer) {
      store->find_job(job_id, [job_id, answer](std::optional<JobRecord> found) { answer(cancel_not_here(job_id, found)); });
    };
    return r;
  }
  std::optional<JobRecord> record;
  store->find_job(job_id, [&](std::optional<JobRecord> found) { record = std::move(found); });
  return cancel_not_here(job_id, record);
}

HttpResponse post_job(const RouteContext& ctx) { return post_job_as(ctx, false); }
HttpResponse post_commands_job(const RouteContext& ctx) { return post_job_as(ctx, true); }

HttpResponse get_job(const RouteContext& ctx) { return get_job_as(ctx, ctx.params.get("job"), false); }
HttpResponse get_batch(const RouteContext& ctx) { return get_job_as(ctx, ctx.params.get("batch"), true); }

// ?state=running|done|stopped|expired|cancelled&since=<unix ms>&before=<job_id>&limit=<n>
// (default 100, at most 1000), newest first; without rigs (GET /v1/jobs/{id} has them).
HttpResponse get_jobs(const RouteContext& ctx) {
  const auto q = parse_query(ctx.request.query);
  std::optional<JobState> state;
  std::uint64_t since_ms = 0;
  std::string before;
  std::size_t limit = 100;
  if (const auto it = q.find("state"); it != q.end()) {
    state = job_state_from_string(it->second);
    if (!state)
      return json_error(400, "bad_request",
                        "unknown state '" + it->second.substr(0, 32) + "' (running, done, stopped, expired, cancelled)");
  }
  if (const auto it = q.find("since"); it != q.end() && !parse_count(it->second, since_ms))
    return json_error(400, "bad_request", "\"since\" must be Unix milliseconds");
  if (const auto it = q.find("before"); it != q.end()) before = it->second;
  if (const auto it = q.find("limit"); it != q.end()) {
    std::uint64_t n = 0;
    if (!parse_count(it->second, n) || n == 0 || n > kMaxListLimit)
      return json_error(400, "bad_request", "\"limit\" must be 1.." + std::to_string(kMaxListLimit));
    limit = static_cast<std::size_t>(n);
  }
  const JobTable* table = ctx.options.jobs;
  std::vector<std::string> heads;
  std::string last;
  auto take = [&](const Job& job) {
    if (state && job.state() != *state) return;
    heads.push_back(job_json_text(job, nullptr, false));
    last = job.job_id;
  };
  CommandStore* store = ctx.options.store;
  if (store != nullptr && store->durable() && !store->answers_at_once()) {
    // A store that answers later (Redis): one page, answered with its reply.
    JobQuery query;
    if (state) query.finished = *state != JobState::running;
    query.since_ms = since_ms;
    query.before_job_id = before;
    query.limit = limit;
    query.head_only = true;
    HttpResponse r = json_error(503, "shutting_down", "the broker is shutting down");
    r.deferred = [store, query, state, limit, table](Fleet&, HttpResponse::Answer answer) {
      store->list_jobs(query, [state, limit, table, answer](std::vector<JobRecord> records) {
        std::vector<std::string> page;
        std::string page_last;
        for (const JobRecord& record : records) {
          if (page.size() == limit) break;
          page_last = record.job_id;
          if (const Job* mine = table ? table->find(record.job_id) : nullptr) {
            if (!state || mine->state() == *state) page.push_back(job_json_text(*mine, nullptr, false));
          } else if (Expected<Job> stored = job_from_record(record, false)) {
            if (!state || stored->state() == *state) page.push_back(job_json_text(*stored, nullptr, false));
          }
        }
        answer(text_response(200, jobs_page(page, page.size() == limit ? &page_last : nullptr)));
      });
    };
    return r;
  }
  if (store != nullptr && store->durable()) {
    // The store's history, with the jobs running here fresher than their last save.
    JobQuery query;
    if (state) query.finished = *state != JobState::running;
    query.since_ms = since_ms;
    query.before_job_id = before;
    query.limit = limit;
    query.head_only = true;  // the list shows heads; a fleet-wide job's rigs are ~1 MB
    for (int page = 0; page < kMaxListPages && heads.size() < limit; ++page) {
      std::vector<JobRecord> records;
      store->list_jobs(query, [&](std::vector<JobRecord> found) { records = std::move(found); });
      for (const JobRecord& record : records) {
        if (heads.size() == limit) break;
        if (const Job* mine = table ? table->find(record.job_id) : nullptr) {
          take(*mine);
        } else if (Expected<Job> stored = job_from_record(record, false)) {
          take(*stored);
        }
        last = record.job_id;
      }
      if (records.size() < query.limit || records.empty()) break;
      query.before_job_id = records.back().job_id;
    }
  } else if (table != nullptr) {
    // Nothing is stored: what memory holds is the history.
    table->for_each_newest_first([&](const Job& job) {
      if (heads.size() == limit || job.created_at_ms < since_ms) return;
      if (!before.empty() && job.job_id >= before) return;
      take(job);
    });
  }
  return text_response(200, jobs_page(heads, heads.size() == limit ? &last : nullptr));
}

}  // namespace fleetlink::broker::handlers
