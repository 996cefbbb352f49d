#include "redis/redis_store.hpp"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <charconv>
#include <new>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "common/log.hpp"
#include "redis/store_scripts.hpp"
#include "store/record_codec.hpp"

namespace fleetlink::broker::redis {

using store_codec::is_final_code;
using store_rows::CommandRow;
using store_rows::matches;
using store_rows::PendingWrites;
using store_rows::RigRow;

namespace {

using Args = std::shared_ptr<std::vector<std::string>>;

// Ids per call of load()'s reads.
constexpr std::size_t kLoadChunk = 500;
// A rig's open commands: far more than any outbox or held queue.
constexpr std::size_t kOpenOfLimit = 10'000;

// EVALSHA <sha> 0 <op> <prefix>, the sha filled in when sent.
Args script_args(const char* op, const std::string& prefix, std::size_t reserve = 0) {
  auto a = std::make_shared<std::vector<std::string>>();
  a->reserve(5 + reserve);
  a->insert(a->end(), {"EVALSHA", "", "0", op, prefix});
  return a;
}

bool is_noscript(const Reply& r) { return r.is_error() && r.str.rfind("NOSCRIPT", 0) == 0; }

template <class T>
bool number_of(std::string_view s, T& out) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

bool is_text(const Reply& r) { return r.type == Reply::Type::string || r.type == Reply::Type::status; }

// A row of the script: {cmd_id, s, r, j, k, e, a, st, ak, rn, f, b, res}.
bool parse_row(const Reply& r, CommandRow& row) {
  if (r.type != Reply::Type::array || r.elements.size() != 13) return false;
  const auto& e = r.elements;
  auto text = [](const Reply& x, std::string& out) {
    if (x.type == Reply::Type::nil) {
      out.clear();
      return true;
    }
    if (!is_text(x)) return false;
    out = x.str;
    return true;
  };
  auto opt = [](const Reply& x, std::optional<std::uint64_t>& out) {
    if (x.type == Reply::Type::nil) {
      out.reset();
      return true;
    }
    std::uint64_t v = 0;
    if (!is_text(x) || !number_of(x.str, v)) return false;
    out = v;
    return true;
  };
  if (!is_text(e[0]) || e[0].str.empty()) return false;
  row.cmd_id = e[0].str;
  if (!is_text(e[1]) || !number_of(e[1].str, row.state)) return false;
  if (!text(e[2], row.rig_id) || !text(e[3], row.job_id) || !text(e[4], row.idempotency_key)) return false;
  if (!is_text(e[5]) || !number_of(e[5].str, row.enqueued_at)) return false;
  if (!is_text(e[6]) || !number_of(e[6].str, row.attempts)) return false;
  if (!opt(e[7], row.sent_at) || !opt(e[8], row.acked_at) || !opt(e[9], row.running_at) ||
      !opt(e[10], row.finished_at))
    return false;
  if (!is_text(e[11])) return false;
  row.body = e[11].str;
  row.has_result = e[12].type != Reply::Type::nil;
  if (row.has_result) {
    if (!is_text(e[12])) return false;
    row.result_body = e[12].str;
  } else {
    row.result_body.clear();
  }
  row.committed = true;
  return true;
}

// A job of the script: {job_id, created, finished, body}.
bool parse_job(const Reply& r, JobRecord& j) {
  if (r.type != Reply::Type::array || r.elements.size() != 4) return false;
  const auto& e = r.elements;
  if (!is_text(e[0]) || !is_text(e[1]) || !is_text(e[2]) || !is_text(e[3])) return false;
  j.job_id = e[0].str;
  if (!number_of(e[1].str, j.created_at_ms)) return false;
  if (e[2].str != "0" && e[2].str != "1") return false;
  j.finished = e[2].str == "1";
  j.body = e[3].str;
  return true;
}

// "<first>:<last>:<blob>"
Expected<RigRecord> parse_rig(const std::string& rig_id, const std::string& value) {
  const std::size_t p1 = value.find(':');
  const std::size_t p2 = p1 == std::string::npos ? std::string::npos : value.find(':', p1 + 1);
  RigRecord rig;
  rig.rig_id = rig_id;
  if (p2 == std::string::npos || !number_of(std::string_view(value).substr(0, p1), rig.first_seen_ms) ||
      !number_of(std::string_view(value).substr(p1 + 1, p2 - p1 - 1), rig.last_seen_ms))
    return make_error(Errc::malformed, "rig " + rig_id + ": its record has no times");
  if (auto r = store_codec::decode_rig_body(std::string_view(value).substr(p2 + 1), rig); !r)
    return make_error(r.error().code, "rig " + rig_id + ": " + r.error().detail);
  return rig;
}

std::string opt_text(const std::optional<std::uint64_t>& v) { return v ? std::to_string(*v) : std::string(); }

// The two parts of a list's reply: {{matches...}, {extras...}}.
const Reply* part(const Expected<Reply>& r, std::size_t i) {
  if (!r || r->type != Reply::Type::array || r->elements.size() != 2) return nullptr;
  return &r->elements[i];
}

bool answered(const Expected<Reply>& r) { return r && !r->is_error() && r->type == Reply::Type::array; }

// A user's callback: its exception stops here.
template <class F, class V>
void answer(const char* what, F& done, V&& value) noexcept {
  try {
    if (done) done(std::forward<V>(value));
  } catch (const std::exception& e) {
    FL_ERROR("store: the callback of %s failed: %s", what, e.what());
  } catch (...) {
    FL_ERROR("store: the callback of %s failed", what);
  }
}

}  // namespace

// ---- the object, its loop ----

RedisStore::RedisStore(uv_loop_t* loop, RedisConnection& connection, RedisStoreOptions options)
    : loop_(loop),
      connection_(connection),
      options_(std::move(options)),
      alive_(std::make_shared<int>(0)),
      current_(std::make_unique<PendingWrites>()) {
  options_.rows_per_call = std::max<std::size_t>(options_.rows_per_call, 1);
  options_.retry_max = std::max(options_.retry_max, options_.retry_min);
  for (uv_timer_t** t : {&retry_timer_, &defer_timer_}) {
    *t = new uv_timer_t;
    uv_timer_init(loop_, *t);
    (*t)->data = this;
  }
}

RedisStore::~RedisStore() {
  // What was put and submitted is written too, if Redis can be reached: nothing
  // is promised about it, but a store closing in order keeps what it can.
  bool unwritten = pending();
  for (const auto& b : batches_) unwritten = unwritten || !b->done;
  if (unwritten) {
    if (auto r = commit(); !r) FL_WARN("store: writes not made durable at close: %s", r.error().detail.c_str());
  }
  alive_.reset();
  for (uv_timer_t** t : {&retry_timer_, &defer_timer_}) {
    uv_timer_stop(*t);
    uv_close(reinterpret_cast<uv_handle_t*>(*t), [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
    *t = nullptr;
  }
  sync_close();
}

void RedisStore::defer(std::function<void()> f) {
  try {
    deferred_.push_back(std::move(f));
  } catch (const std::exception& e) {
    FL_ERROR("store: an answer could not be queued: %s", e.what());
    return;
  }
  if (deferred_.size() == 1) {
    uv_timer_start(
        defer_timer_, [](uv_timer_t* t) { static_cast<RedisStore*>(t->data)->run_deferred(); }, 0, 0);
  }
}

void RedisStore::run_deferred() {
  std::vector<std::function<void()>> work;
  work.swap(deferred_);
  const std::weak_ptr<int> alive = alive_;
  for (auto& f : work) {
    if (alive.expired()) return;  // a callback destroyed the store
    try {
      f();
    } catch (const std::exception& e) {
      FL_ERROR("store: a deferred answer failed: %s", e.what());
    } catch (...) {
      FL_ERROR("store: a deferred answer failed");
    }
  }
}

void RedisStore::request(const std::vector<std::string>& argv, ReplyCallback done) {
  // RedisConnection answers at once when it is down: such an answer waits for
  // the next turn of the loop, so nothing is answered before the call returns.
  auto inside = std::make_shared<bool>(true);
  std::weak_ptr<int> alive = alive_;
  connection_.command(argv, [this, alive, inside, done = std::move(done)](Expected<Reply> r) mutable {
    if (alive.expired()) return;
    if (*inside) {
      defer([done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
      return;
    }
    done(std::move(r));
  });
  *inside = false;
}

void RedisStore::eval(Args args, bool may_reload, ReplyCallback done) {
  if (sha_.empty()) {
    load_script_then(std::move(args), std::move(done));
    return;
  }
  (*args)[1] = sha_;
  std::weak_ptr<int> alive = alive_;
  const std::vector<std::string>& argv = *args;
  request(argv, [this, alive, args, may_reload, done = std::move(done)](Expected<Reply> r) mutable {
    if (alive.expired()) return;
    if (r && may_reload && is_noscript(*r)) {  // Redis lost its scripts (a restart, SCRIPT FLUSH): once more
      sha_.clear();
      load_script_then(std::move(args), std::move(done));
      return;
    }
    done(std::move(r));
  });
}

void RedisStore::load_script_then(Args args, ReplyCallback done) {
  std::weak_ptr<int> alive = alive_;
  request({"SCRIPT", "LOAD", kStoreScript}, [this, alive, args, done = std::move(done)](Expected<Reply> r) mutable {
    if (alive.expired()) return;
    if (!r) return done(r.error());
    if (r->is_error() || r->type != Reply::Type::string)
      return done(make_error(Errc::io, "redis SCRIPT LOAD of the store script: " + r->str));
    sha_ = r->str;
    ++stats_.script_loads;
    eval(std::move(args), false, std::move(done));
  });
}

StoreCounters RedisStore::counters() const noexcept {
  StoreCounters c;
  c.commits = stats_.commits;
  c.commit_failures = stats_.commit_failures;
  c.rows_written = stats_.rows_written;
  return c;
}

void RedisStore::wake() {
  if (!wake_) return;
  try {
    wake_();
  } catch (const std::exception& e) {
    FL_ERROR("store: the wakeup failed: %s", e.what());
  }
}

void RedisStore::note_writes(long long counter) {
  if (last_writes_ >= 0 && counter > last_writes_ + 1)
    stats_.foreign_writes_seen += static_cast<std::uint64_t>(counter - last_writes_ - 1);
  // Lower: Redis started over (no persistence, FLUSHALL).
  last_writes_ = counter;
}

// ---- writes ----

void RedisStore::put_command(const CommandView& v, bool with_result) {
  try {
    current_->put(v, with_result);
  } catch (const std::exception& e) {
    FL_ERROR("store: command %s could not be buffered: %s", v.cmd_id.c_str(), e.what());
  }
}

void RedisStore::put_rig(const RigRecord& r) {
  try {
    current_->put(r);
  } catch (const std::exception& e) {
    FL_ERROR("store: rig %s could not be buffered: %s", r.rig_id.c_str(), e.what());
  }
}

void RedisStore::put_job(const JobRecord& j) {
  try {
    current_->put(j);
  } catch (const std::exception& e) {
    FL_ERROR("store: job %s could not be buffered: %s", j.job_id.c_str(), e.what());
  }
}

std::unique_ptr<RedisStore::Batch> RedisStore::take_current() {
  auto b = std::make_unique<Batch>();
  auto fresh = std::make_unique<PendingWrites>();
  b->number = last_batch_ + 1;
  b->writes = std::move(*current_);
  current_ = std::move(fresh);
  b->rows = b->writes.row_count();
  return b;
}

std::vector<std::vector<std::string>> RedisStore::write_calls(const PendingWrites& w) const {
  std::vector<std::vector<std::string>> calls;
  const CommandRow* rows = w.commands();
  const std::size_t nc_all = w.command_count();
  const auto& rigs = w.rigs();
  const auto& jobs = w.jobs();
  std::size_t ci = 0, ri = 0, ji = 0;
  while (ci < nc_all || ri < rigs.size() || ji < jobs.size()) {
    std::size_t room = options_.rows_per_call;
    const std::size_t nc = std::min(room, nc_all - ci);
    room -= nc;
    const std::size_t nr = std::min(room, rigs.size() - ri);
    room -= nr;
    const std::size_t nj = std::min(room, jobs.size() - ji);
    std::vector<std::string>& argv = calls.emplace_back();
    argv.reserve(8 + nc * 14 + (nr + nj) * 4);
    argv.insert(argv.end(), {"EVALSHA", "", "0", "write", options_.key_prefix, std::to_string(nc),
                             std::to_string(nr), std::to_string(nj)});
    for (std::size_t i = 0; i < nc; ++i, ++ci) {
      const CommandRow& r = rows[ci];
      argv.push_back(r.cmd_id);
      argv.push_back(r.rig_id);
      argv.push_back(std::to_string(r.state));
      argv.push_back(r.job_id);
      argv.push_back(r.idempotency_key);
      argv.push_back(std::to_string(r.enqueued_at));
      argv.push_back(std::to_string(r.attempts));
      argv.push_back(opt_text(r.sent_at));
      argv.push_back(opt_text(r.acked_at));
      argv.push_back(opt_text(r.running_at));
      argv.push_back(opt_text(r.finished_at));
      argv.push_back(r.body);
      argv.push_back(r.has_result ? "1" : "0");
      argv.push_back(r.has_result ? r.result_body : std::string());
    }
    for (std::size_t i = 0; i < nr; ++i, ++ri) {
      const RigRow& r = rigs[ri];
      argv.push_back(r.rig.rig_id);
      argv.push_back(std::to_string(r.rig.first_seen_ms));
      argv.push_back(std::to_string(r.rig.last_seen_ms));
      argv.push_back(r.body);
    }
    for (std::size_t i = 0; i < nj; ++i, ++ji) {
      const JobRecord& j = jobs[ji];
      argv.push_back(j.job_id);
      argv.push_back(std::to_string(j.created_at_ms));
      argv.push_back(j.finished ? "1" : "0");
      argv.push_back(j.body);
    }
  }
  return calls;
}

std::uint64_t RedisStore::submit() {
  try {
    if (pending()) {
      std::unique_ptr<Batch> b = take_current();
      const std::size_t rows = b->rows;
      batches_.push_back(std::move(b));
      last_batch_ = batches_.back()->number;
      backlog_rows_ += rows;
    }
  } catch (const std::exception& e) {
    FL_ERROR("store: the writes could not be made a batch: %s", e.what());
  }
  send_ready();
  return last_batch_;
}

void RedisStore::send_ready() {
  for (const auto& b : batches_)
    if (!b->done && !b->in_flight) send(*b);
}

void RedisStore::send(Batch& b) {
  b.attempt = ++attempts_;
  b.attempt_error.reset();
  std::vector<std::vector<std::string>> calls;
  try {
    calls = write_calls(b.writes);
  } catch (const std::exception& e) {
    b.attempt_error = make_error(Errc::io, std::string("the batch could not be encoded: ") + e.what());
    attempt_failed(b);
    return;
  }
  b.in_flight = true;
  b.calls_left = calls.size();
  const std::uint64_t number = b.number, attempt = b.attempt;
  std::weak_ptr<int> alive = alive_;
  for (auto& c : calls) {
    try {
      eval(std::make_shared<std::vector<std::string>>(std::move(c)), true,
           [this, alive, number, attempt](Expected<Reply> r) {
             if (alive.expired()) return;
             on_write_reply(number, attempt, std::move(r));
           });
    } catch (const std::exception& e) {
      // Out of memory: this call is not sent; the attempt fails when the others answered.
      if (!b.attempt_error) b.attempt_error = make_error(Errc::io, std::string("a call was not sent: ") + e.what());
      if (--b.calls_left == 0) {
        b.in_flight = false;
        attempt_failed(b);
        return;
      }
    }
  }
}

void RedisStore::on_write_reply(std::uint64_t number, std::uint64_t attempt, Expected<Reply> r) {
  Batch* b = nullptr;
  for (const auto& p : batches_) {
    if (p->number == number) {
      b = p.get();
      break;
    }
  }
  if (b == nullptr || !b->in_flight || b->attempt != attempt) return;  // made durable otherwise (commit())
  if (!r) {
    if (!b->attempt_error) b->attempt_error = r.error();
  } else if (r->is_error()) {
    if (!b->attempt_error) b->attempt_error = make_error(Errc::io, "redis store script: " + r->str);
  } else if (r->type != Reply::Type::array || r->elements.size() != 2 ||
             r->elements[0].type != Reply::Type::integer || r->elements[1].type != Reply::Type::integer) {
    if (!b->attempt_error) b->attempt_error = make_error(Errc::malformed, "redis store script: an unexpected answer");
  } else {
    note_writes(r->elements[0].integer);
    stats_.key_conflicts += static_cast<std::uint64_t>(std::max(0LL, r->elements[1].integer));
  }
  if (--b->calls_left > 0) return;
  b->in_flight = false;
  if (b->attempt_error) {
    attempt_failed(*b);
    return;
  }
  batch_done(*b);
  advance();
  wake();
}

void RedisStore::attempt_failed(Batch& b) {
  ++stats_.commit_failures;
  const Error e = b.attempt_error.value_or(make_error(Errc::io, "the batch failed"));
  if (!failing_) {
    failing_ = true;
    FL_WARN("store: redis %s: batch %llu not written (%s); it is tried again", connection_.endpoint().c_str(),
            static_cast<unsigned long long>(b.number), e.detail.c_str());
  }
  if (!b.reported) {
    b.reported = true;
    try {
      outcomes_.push_back(BatchOutcome{b.number, e});
    } catch (...) {
    }
  }
  schedule_retry();
  wake();
}

void RedisStore::batch_done(Batch& b) {
  b.done = true;
  b.in_flight = false;
  ++stats_.commits;
  stats_.rows_written += b.writes.command_count();
  backoff_ = std::chrono::milliseconds(0);
  if (failing_) {
    failing_ = false;
    FL_INFO("store: redis %s: writing again", connection_.endpoint().c_str());
  }
  if (!b.reported) {
    b.reported = true;
    try {
      outcomes_.push_back(BatchOutcome{b.number, Expected<void>{}});
    } catch (...) {
    }
  }
}

void RedisStore::advance() {
  while (!batches_.empty() && batches_.front()->done) {
    durable_through_ = std::max(durable_through_, batches_.front()->number);
    backlog_rows_ -= std::min<std::uint64_t>(backlog_rows_, batches_.front()->rows);
    batches_.pop_front();
  }
}

void RedisStore::schedule_retry() {
  backoff_ = backoff_.count() == 0 ? options_.retry_min : std::min(backoff_ * 2, options_.retry_max);
  if (uv_is_active(reinterpret_cast<uv_handle_t*>(retry_timer_))) return;
  uv_timer_start(
      retry_timer_, [](uv_timer_t* t) { static_cast<RedisStore*>(t->data)->send_ready(); },
      static_cast<std::uint64_t>(backoff_.count()), 0);
}

void RedisStore::connection_up() {
  backoff_ = std::chrono::milliseconds(0);
  uv_timer_stop(retry_timer_);
  send_ready();
}

std::vector<BatchOutcome> RedisStore::take_outcomes() {
  std::vector<BatchOutcome> out;
  out.swap(outcomes_);
  return out;
}

// ---- the synchronous connection: load(), commit() ----

void RedisStore::sync_close() noexcept {
  if (sync_ != nullptr) {
    redisFree(sync_);
    sync_ = nullptr;
  }
}

Expected<Reply> RedisStore::sync_call(const std::vector<std::string>& argv) {
  const std::string where = "redis " + options_.host + ":" + std::to_string(options_.port);
  std::vector<const char*> args;
  std::vector<std::size_t> lens;
  args.reserve(argv.size());
  lens.reserve(argv.size());
  for (const std::string& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  std::string why;
  for (int tries = 0; tries < 2; ++tries) {
    const bool reused = sync_ != nullptr;
    if (sync_ == nullptr) {
      const auto ms = options_.sync_timeout.count();
      timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
      sync_ = redisConnectWithTimeout(options_.host.c_str(), options_.port, tv);
      if (sync_ == nullptr || sync_->err != 0) {
        why = sync_ ? sync_->errstr : "out of memory";
        sync_close();
        return make_error(Errc::io, where + ": cannot connect: " + why);
      }
      (void)redisSetTimeout(sync_, tv);
    }
    auto* reply = static_cast<redisReply*>(
        redisCommandArgv(sync_, static_cast<int>(args.size()), args.data(), lens.data()));
    if (reply == nullptr) {
      why = sync_->errstr;
      sync_close();
      if (reused) continue;  // a connection from before (Redis restarted since): once more on a new one
      break;
    }
    Reply out = copy_reply(reply);
    freeReplyObject(reply);
    return out;
  }
  return make_error(Errc::io, where + ": " + why);
}

Expected<Reply> RedisStore::sync_eval(const std::vector<std::string>& args) {
  std::vector<std::string> argv;
  argv.reserve(args.size() + 3);
  argv.insert(argv.end(), {"EVAL", kStoreScript, "0"});
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = sync_call(argv);
  if (!r) return r;
  if (r->is_error()) return make_error(Errc::io, "redis store script: " + r->str);
  return r;
}

Expected<void> RedisStore::sync_write(const PendingWrites& w) {
  for (std::vector<std::string>& argv : write_calls(w)) {
    argv[0] = "EVAL";
    argv[1] = kStoreScript;
    auto r = sync_call(argv);
    if (!r) return r.error();
    if (r->is_error()) return make_error(Errc::io, "redis store script: " + r->str);
    if (r->type != Reply::Type::array || r->elements.size() != 2) 
      return make_error(Errc::malformed, "redis store script: an unexpected answer");
    note_writes(r->elements[0].integer);
    stats_.key_conflicts += static_cast<std::uint64_t>(std::max(0LL, r->elements[1].integer));
  }
  return {};
}

Expected<void> RedisStore::commit() {
  try {
    if (pending()) {
      std::unique_ptr<Batch> b = take_current();
      const std::size_t rows = b->rows;
      batches_.push_back(std::move(b));
      last_batch_ = batches_.back()->number;
      backlog_rows_ += rows;
    }
    bool wrote = false;
    Expected<void> result;
    for (const auto& b : batches_) {
      if (b->done) continue;
      auto r = sync_write(b->writes);
      if (!r) {
        ++stats_.commit_failures;
        if (!b->reported) {
          b->reported = true;
          outcomes_.push_back(BatchOutcome{b->number, r.error()});
        }
        result = make_error(r.error().code, "cannot commit batch " + std::to_string(b->number) + " to redis: " +
                                                r.error().detail + "; it stays pending");
        break;
      }
      b->attempt = ++attempts_;  // an attempt on the async connection is answered for nothing now
      batch_done(*b);
      wrote = true;
    }
    advance();
    if (wrote || !result) wake();
    return result;
  } catch (const std::exception& e) {
    return make_error(Errc::io, std::string("cannot commit to redis: ") + e.what());
  }
}

Expected<StoreSnapshot> RedisStore::load() {
  try {
    const std::string& P = options_.key_prefix;
    auto fail = [](const Error& e) { return make_error(e.code, "cannot load the command store from redis: " + e.detail); };
    StoreSnapshot snap;

    // Rows of `ids` by the script's `op`, `head` for getjobs.
    auto fetch = [&](const char* op, const std::vector<std::string>& ids, std::vector<Reply>& out) -> Expected<void> {
      for (std::size_t i = 0; i < ids.size(); i += kLoadChunk) {
        std::vector<std::string> args{op, P};
        if (std::string_view(op) == "getjobs") args.emplace_back("0");
        const std::size_t end = std::min(ids.size(), i + kLoadChunk);
        args.insert(args.end(), ids.begin() + static_cast<std::ptrdiff_t>(i), ids.begin() + static_cast<std::ptrdiff_t>(end));
        auto r = sync_eval(args);
        if (!r) return r.error();
        if (r->type != Reply::Type::array || r->elements.size() != end - i)
          return make_error(Errc::malformed, "an unexpected answer of the store script");
        for (Reply& e : r->elements) out.push_back(std::move(e));
      }
      return {};
    };
    auto members = [&](const std::string& key, std::vector<std::string>& out) -> Expected<void> {
      auto r = sync_call({"ZRANGEBYLEX", key, "-", "+"});
      if (!r) return r.error();
      if (r->type != Reply::Type::array) return make_error(Errc::malformed, key + " is not a sorted set: " + r->str);
      for (const Reply& e : r->elements) out.push_back(e.str);
      return {};
    };

    // The open commands.
    std::vector<std::string> ids;
    if (auto r = members(P + "open", ids); !r) return fail(r.error());
    std::vector<Reply> replies;
    if (auto r = fetch("get", ids, replies); !r) return fail(r.error());
    std::vector<CommandRow> rows;
    for (const Reply& e : replies) {
      if (e.type == Reply::Type::nil) continue;  // in the index, gone since
      CommandRow& row = rows.emplace_back();
      if (!parse_row(e, row))
        return make_error(Errc::malformed, "cannot load the command store from redis: an open command's record is damaged");
    }
    std::vector<CommandRow> extras;
    if (unwritten_commands() > 0) {
      replies.clear();
      if (auto r = fetch("get", unwritten_ids(true, {}), replies); !r) return fail(r.error());
      for (const Reply& e : replies) {
        CommandRow row;
        if (parse_row(e, row)) extras.push_back(std::move(row));
      }
      overlay(rows, extras, nullptr, true, {});
    }
    std::sort(rows.begin(), rows.end(), [](const CommandRow& a, const CommandRow& b) { return a.cmd_id < b.cmd_id; });
    snap.open_commands.reserve(rows.size());
    for (const CommandRow& row : rows) {
      // Refused rather than left out (as the SQLite store does): an open
      // command dropped here would never be delivered nor finished.
      auto v = store_rows::to_view(row);
      if (!v) return fail(v.error());
      snap.open_commands.push_back(std::move(*v));
    }

    // The rigs.
    auto all = sync_call({"HGETALL", P + "rigs"});
    if (!all) return fail(all.error());
    if (all->type != Reply::Type::array) return fail(make_error(Errc::malformed, P + "rigs is not a hash"));
    std::vector<RigRow> rigs;
    for (std::size_t i = 0; i + 1 < all->elements.size(); i += 2) {
      auto rig = parse_rig(all->elements[i].str, all->elements[i + 1].str);
      if (!rig) return fail(rig.error());
      const std::string& value = all->elements[i + 1].str;
      const std::size_t p2 = value.find(':', value.find(':') + 1);
      rigs.push_back(RigRow{std::move(*rig), value.substr(p2 + 1)});
    }
    {
      std::unordered_map<std::string, std::size_t> at;
      for (std::size_t i = 0; i < rigs.size(); ++i) at.emplace(rigs[i].rig.rig_id, i);
      each_unwritten([&](const PendingWrites& w) {
        for (const RigRow& p : w.rigs()) {
          if (auto it = at.find(p.rig.rig_id); it != at.end()) {
            store_rows::combine(rigs[it->second], p);
            continue;
          }
          rigs.push_back(p);
          at.emplace(p.rig.rig_id, rigs.size() - 1);
        }
      });
    }
    snap.rigs.reserve(rigs.size());
    for (RigRow& r : rigs) snap.rigs.push_back(std::move(r.rig));
    std::sort(snap.rigs.begin(), snap.rigs.end(), [](const RigRecord& a, const RigRecord& b) { return a.rig_id < b.rig_id; });

    // The open jobs.
    ids.clear();
    if (auto r = members(P + "jobsopen", ids); !r) return fail(r.error());
    replies.clear();
    if (auto r = fetch("getjobs", ids, replies); !r) return fail(r.error());
    for (const Reply& e : replies) {
      JobRecord j;
      if (parse_job(e, j)) snap.open_jobs.push_back(std::move(j));
    }
    std::vector<JobRecord> stored_jobs;
    if (const auto unwritten = unwritten_job_ids(); !unwritten.empty()) {
      replies.clear();
      if (auto r = fetch("getjobs", unwritten, replies); !r) return fail(r.error());
      for (const Reply& e : replies) {
        JobRecord j;
        if (parse_job(e, j)) stored_jobs.push_back(std::move(j));
      }
    }
    overlay_jobs(snap.open_jobs, stored_jobs);
    snap.open_jobs.erase(std::remove_if(snap.open_jobs.begin(), snap.open_jobs.end(),
                                        [](const JobRecord& j) { return j.finished; }),
                         snap.open_jobs.end());
    std::sort(snap.open_jobs.begin(), snap.open_jobs.end(),
              [](const JobRecord& a, const JobRecord& b) { return a.job_id < b.job_id; });

    auto writes = sync_call({"GET", P + "writes"});
    if (!writes) return fail(writes.error());
    long long counter = 0;
    if (writes->type == Reply::Type::string && number_of(writes->str, counter)) last_writes_ = counter;
    else last_writes_ = 0;
    return snap;
  } catch (const std::exception& e) {
    return make_error(Errc::io, std::string("cannot load the command store from redis: ") + e.what());
  }
}

// ---- reads ----

std::size_t RedisStore::unwritten_commands() const noexcept {
  std::size_t n = 0;
  each_unwritten([&](const PendingWrites& w) { n += w.command_count(); });
  return n;
}

std::vector<std::string> RedisStore::unwritten_ids(bool open_only, std::string_view rig_id) const {
  std::vector<std::string> out;
  std::unordered_set<std::string_view> seen;
  each_unwritten([&](const PendingWrites& w) {
    const CommandRow* rows = w.commands();
    for (std::size_t i = 0, n = w.command_count(); i < n && out.size() < options_.overlay_fetch_max; ++i) {
      if (open_only && !rig_id.empty() && rows[i].rig_id != rig_id) continue;
      if (seen.insert(rows[i].cmd_id).second) out.push_back(rows[i].cmd_id);
    }
  });
  return out;
}

std::vector<std::string> RedisStore::unwritten_job_ids() const {
  std::vector<std::string> out;
  std::unordered_set<std::string_view> seen;
  each_unwritten([&](const PendingWrites& w) {
    for (const JobRecord& j : w.jobs())
      if (out.size() < options_.overlay_fetch_max && seen.insert(j.job_id).second) out.push_back(j.job_id);
  });
  return out;
}

void RedisStore::overlay_one(std::optional<CommandRow>& row, std::string_view cmd_id) const {
  each_unwritten([&](const PendingWrites& w) {
    if (const CommandRow* p = w.find_command(cmd_id)) {
      if (!row) row = *p;
      else store_rows::combine(*row, *p);
    }
  });
}

// As SqliteStore::overlay(): the writes not yet durable over `rows` (what Redis
// answered), oldest first; an unwritten command not among them combines with
// its stored record from `stored_extras` (fetched with the read), if Redis had
// one; rows that no longer match go.
void RedisStore::overlay(std::vector<CommandRow>& rows, const std::vector<CommandRow>& stored_extras,
                         const CommandQuery* filter, bool open_only, std::string_view rig_id) const {
  if (unwritten_commands() > 0) {
    std::unordered_map<std::string, std::size_t> at;
    at.reserve(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) at.emplace(rows[i].cmd_id, i);
    std::unordered_map<std::string_view, const CommandRow*> extra;
    for (const CommandRow& r : stored_extras) extra.emplace(r.cmd_id, &r);
    each_unwritten([&](const PendingWrites& w) {
      const CommandRow* unwritten = w.commands();
      for (std::size_t i = 0, n = w.command_count(); i < n; ++i) {
        const CommandRow& p = unwritten[i];
        if (open_only && !rig_id.empty() && p.rig_id != rig_id) continue;
        if (auto it = at.find(p.cmd_id); it != at.end()) {
          store_rows::combine(rows[it->second], p);
          continue;
        }
        if (auto e = extra.find(p.cmd_id); e != extra.end()) {
          CommandRow stored = *e->second;
          store_rows::combine(stored, p);
          rows.push_back(std::move(stored));
        } else {
          rows.push_back(p);
        }
        at.emplace(p.cmd_id, rows.size() - 1);
      }
    });
  }
  const std::string since_key = filter && filter->since_ms ? store_rows::key_of_ms(filter->since_ms) : std::string();
  auto keep = [&](const CommandRow& r) {
    if (open_only) return !is_final_code(r.state) && (rig_id.empty() || r.rig_id == rig_id);
    return filter == nullptr || matches(r, *filter, since_key);
  };
  rows.erase(std::remove_if(rows.begin(), rows.end(), [&](const CommandRow& r) { return !keep(r); }), rows.end());
}

void RedisStore::overlay_jobs(std::vector<JobRecord>& jobs, const std::vector<JobRecord>& stored_extras) const {
  std::unordered_map<std::string, std::size_t> at;
  for (std::size_t i = 0; i < jobs.size(); ++i) at.emplace(jobs[i].job_id, i);
  std::unordered_map<std::string_view, const JobRecord*> extra;
  for (const JobRecord& j : stored_extras) extra.emplace(j.job_id, &j);
  each_unwritten([&](const PendingWrites& w) {
    for (const JobRecord& p : w.jobs()) {
      if (auto it = at.find(p.job_id); it != at.end()) {
        store_rows::combine(jobs[it->second], p);
        continue;
      }
      if (auto e = extra.find(p.job_id); e != extra.end()) {
        JobRecord stored = *e->second;
        store_rows::combine(stored, p);
        jobs.push_back(std::move(stored));
      } else {
        jobs.push_back(p);
      }
      at.emplace(p.job_id, jobs.size() - 1);
    }
  });
}

std::vector<CommandRow> RedisStore::rows_of(const Reply& r) {
  std::vector<CommandRow> out;
  if (r.type != Reply::Type::array) return out;
  out.reserve(r.elements.size());
  for (const Reply& e : r.elements) {
    if (e.type == Reply::Type::nil) continue;
    CommandRow row;
    if (parse_row(e, row)) out.push_back(std::move(row));
    else ++stats_.unreadable_rows;
  }
  return out;
}

std::vector<JobRecord> RedisStore::jobs_of(const Reply& r) {
  std::vector<JobRecord> out;
  if (r.type != Reply::Type::array) return out;
  for (const Reply& e : r.elements) {
    if (e.type == Reply::Type::nil) continue;
    JobRecord j;
    if (parse_job(e, j)) out.push_back(std::move(j));
    else ++stats_.unreadable_rows;
  }
  return out;
}

std::vector<CommandView> RedisStore::to_views(const std::vector<CommandRow>& rows) {
  std::vector<CommandView> out;
  out.reserve(rows.size());
  for (const CommandRow& row : rows) {
    auto v = store_rows::to_view(row);
    if (v) out.push_back(std::move(*v));
    else ++stats_.unreadable_rows;
  }
  return out;
}

std::optional<CommandView> RedisStore::to_view(const std::optional<CommandRow>& row) {
  if (!row) return std::nullopt;
  auto v = store_rows::to_view(*row);
  if (!v) {
    ++stats_.unreadable_rows;
    return std::nullopt;
  }
  return std::move(*v);
}

void RedisStore::find(std::string_view cmd_id, CommandCallback done) {
  try {
    Args args = script_args("get", options_.key_prefix, 1);
    args->emplace_back(cmd_id);
    std::weak_ptr<int> alive = alive_;
    eval(args, true, [this, alive, id = std::string(cmd_id), done](Expected<Reply> r) mutable {
      if (alive.expired()) return;
      std::optional<CommandView> out;
      try {
        if (answered(r)) {
          std::vector<CommandRow> rows = rows_of(*r);
          std::optional<CommandRow> row;
          if (!rows.empty()) row = std::move(rows.front());
          overlay_one(row, id);
          out = to_view(row);
        } else {
          ++stats_.read_failures;
        }
      } catch (const std::exception&) {
        out.reset();
      }
      answer("find", done, std::move(out));
    });
  } catch (const std::exception&) {
    defer([done] { answer("find", done, std::optional<CommandView>{}); });
  }
}

void RedisStore::find_by_key(std::string_view key, CommandCallback done) {
  try {
    if (key.empty()) {
      defer([done] { answer("find_by_key", done, std::optional<CommandView>{}); });
      return;
    }
    Args args = script_args("bykey", options_.key_prefix, 1);
    args->emplace_back(key);
    std::weak_ptr<int> alive = alive_;
    eval(args, true, [this, alive, key = std::string(key), done](Expected<Reply> r) mutable {
      if (alive.expired()) return;
      std::optional<CommandView> out;
      try {
        if (answered(r)) {
          // The stored owner of the key wins over an unwritten claim, and an
          // earlier batch's claim over a later one's (the script keeps the first).
          std::vector<CommandRow> rows = rows_of(*r);
          std::optional<CommandRow> row;
          std::string id;
          if (!rows.empty()) {
            id = rows.front().cmd_id;
            row = std::move(rows.front());
          } else {
            each_unwritten([&](const PendingWrites& w) {
              if (id.empty())
                if (const CommandRow* claim = w.find_command_by_key(key)) id = claim->cmd_id;
            });
          }
          if (!id.empty()) overlay_one(row, id);
          out = to_view(row);
        } else {
          ++stats_.read_failures;
        }
      } catch (const std::exception&) {
        out.reset();
      }
      answer("find_by_key", done, std::move(out));
    });
  } catch (const std::exception&) {
    defer([done] { answer("find_by_key", done, std::optional<CommandView>{}); });
  }
}

void RedisStore::open_commands_of(std::string_view rig_id, CommandsCallback done) {
  try {
    std::vector<std::string> extras = unwritten_ids(true, rig_id);
    Args args = script_args("openof", options_.key_prefix, 2 + extras.size());
    args->emplace_back(rig_id);
    args->push_back(std::to_string(kOpenOfLimit));
    for (std::string& e : extras) args->push_back(std::move(e));
    std::weak_ptr<int> alive = alive_;
    eval(args, true, [this, alive, rig = std::string(rig_id), done](Expected<Reply> r) mutable {
      if (alive.expired()) return;
      std::vector<CommandView> out;
      try {
        const Reply* found = part(r, 0);
        const Reply* stored = part(r, 1);
        if (answered(r) && found && stored) {
          std::vector<CommandRow> rows = rows_of(*found);
          overlay(rows, rows_of(*stored), nullptr, true, rig);
          std::sort(rows.begin(), rows.end(),
                    [](const CommandRow& a, const CommandRow& b) { return a.cmd_id < b.cmd_id; });
          out = to_views(rows);
        } else {
          ++stats_.read_failures;
        }
      } catch (const std::exception&) {
        out.clear();
      }
      answer("open_commands_of", done, std::move(out));
    });
  } catch (const std::exception&) {
    defer([done] { answer("open_commands_of", done, std::vector<CommandView>{}); });
  }
}

void RedisStore::list_commands(const CommandQuery& q, CommandsCallback done) {
  try {
    const std::size_t limit = std::min(q.limit, kMaxListLimit);
    if (limit == 0) {
      defer([done] { answer("list_commands", done, std::vector<CommandView>{}); });
      return;
    }
    std::vector<std::string> extras = unwritten_ids(false, {});
    Args args = script_args("list", options_.key_prefix, 8 + extras.size());
    args->push_back(q.rig_id);
    args->push_back(q.state ? std::to_string(store_codec::state_code(*q.state)) : std::string());
    args->push_back(q.job_id);
    args->push_back(q.since_ms ? store_rows::key_of_ms(q.since_ms) : std::string());
    args->push_back(std::to_string(q.since_ms));
    args->push_back(q.before_cmd_id);
    // An unwritten write can take a stored row out of the answer: as many more
    // as there are unwritten rows, so the page is still full after.
    args->push_back(std::to_string(limit + unwritten_commands()));
    args->push_back(std::to_string(options_.list_scan_budget));
    for (std::string& e : extras) args->push_back(std::move(e));
    std::weak_ptr<int> alive = alive_;
    eval(args, true, [this, alive, q, limit, done](Expected<Reply> r) mutable {
      if (alive.expired()) return;
      std::vector<CommandView> out;
      try {
        const Reply* found = part(r, 0);
        const Reply* stored = part(r, 1);
        if (answered(r) && found && stored) {
          std::vector<CommandRow> rows = rows_of(*found);
          overlay(rows, rows_of(*stored), &q, false, {});
          std::sort(rows.begin(), rows.end(),
                    [](const CommandRow& a, const CommandRow& b) { return a.cmd_id > b.cmd_id; });
          if (rows.size() > limit) rows.resize(limit);
          out = to_views(rows);
        } else {
          ++stats_.read_failures;
        }
      } catch (const std::exception&) {
        out.clear();
      }
      answer("list_commands", done, std::move(out));
    });
  } catch (const std::exception&) {
    defer([done] { answer("list_commands", done, std::vector<CommandView>{}); });
  }
}

void RedisStore::find_job(std::string_view job_id, JobCallback done) {
  try {
    Args args = script_args("getjobs", options_.key_prefix, 2);
    args->emplace_back("0");
    args->emplace_back(job_id);
    std::weak_ptr<int> alive = alive_;
    eval(args, true, [this, alive, id = std::string(job_id), done](Expected<Reply> r) mutable {
      if (alive.expired()) return;
      std::optional<JobRecord> out;
      try {
        if (answered(r)) {
          std::vector<JobRecord> jobs = jobs_of(*r);
          if (!jobs.empty()) out = std::move(jobs.front());
          each_unwritten([&](const PendingWrites& w) {
            if (const JobRecord* p = w.find_job(id)) {
              if (out) store_rows::combine(*out, *p);
              else out = *p;
            }
          });
        } else {
          ++stats_.read_failures;
        }
      } catch (const std::exception&) {
        out.reset();
      }
      answer("find_job", done, std::move(out));
    });
  } catch (const std::exception&) {
    defer([done] { answer("find_job", done, std::optional<JobRecord>{}); });
  }
}

void RedisStore::list_jobs(const JobQuery& q, JobsCallback done) {
  try {
    const std::size_t limit = std::min(q.limit, kMaxListLimit);
    if (limit == 0) {
      defer([done] { answer("list_jobs", done, std::vector<JobRecord>{}); });
      return;
    }
    std::vector<std::string> extras = unwritten_job_ids();
    std::size_t unwritten = 0;
    each_unwritten([&](const PendingWrites& w) { unwritten += w.jobs().size(); });
    Args args = script_args("listjobs", options_.key_prefix, 6 + extras.size());
    args->push_back(q.finished ? (*q.finished ? "1" : "0") : "");
    args->push_back(std::to_string(q.since_ms));
    args->push_back(q.before_job_id);
    args->push_back(std::to_string(limit + unwritten));
    args->push_back(q.head_only ? "1" : "0");
    args->push_back(std::to_string(options_.list_scan_budget));
    for (std::string& e : extras) args->push_back(std::move(e));
    std::weak_ptr<int> alive = alive_;
    eval(args, true, [this, alive, q, limit, done](Expected<Reply> r) mutable {
      if (alive.expired()) return;
      std::vector<JobRecord> out;
      try {
        const Reply* found = part(r, 0);
        const Reply* stored = part(r, 1);
        if (answered(r) && found && stored) {
          out = jobs_of(*found);
          overlay_jobs(out, jobs_of(*stored));
          out.erase(std::remove_if(out.begin(), out.end(), [&](const JobRecord& j) { return !matches(j, q); }),
                    out.end());
          std::sort(out.begin(), out.end(),
                    [](const JobRecord& a, const JobRecord& b) { return a.job_id > b.job_id; });
          if (out.size() > limit) out.resize(limit);
          if (q.head_only) {  // the unwritten ones laid over the heads came whole
            for (JobRecord& j : out)
              if (const std::size_t nl = j.body.find('\n'); nl != std::string::npos) j.body.resize(nl);
          }
        } else {
          ++stats_.read_failures;
        }
      } catch (const std::exception&) {
        out.clear();
      }
      answer("list_jobs", done, std::move(out));
    });
  } catch (const std::exception&) {
    defer([done] { answer("list_jobs", done, std::vector<JobRecord>{}); });
  }
}

// ---- upkeep ----

std::size_t RedisStore::prune(const RetentionPolicy& policy, std::uint64_t now_ms) {
  const std::size_t gone = pruned_;
  pruned_ = 0;
  // One at a time: a prune that has not answered yet is not joined by another.
  if (prunes_in_flight_ == 0) prune_then(policy, now_ms, {});
  return gone;
}

void RedisStore::prune_then(const RetentionPolicy& policy, std::uint64_t now_ms,
                            std::function<void(Expected<std::size_t>)> done) {
  try {
    const bool aged = policy.max_age_ms > 0 && now_ms > policy.max_age_ms;
    Args args = script_args("prune", options_.key_prefix, 4);
    args->push_back(aged ? store_rows::key_of_ms(now_ms - policy.max_age_ms) : std::string());
    args->push_back(aged ? std::to_string(now_ms - policy.max_age_ms) : std::string());
    args->push_back(std::to_string(policy.max_commands));
    args->push_back(std::to_string(std::max<std::size_t>(options_.prune_max_per_call, 1)));
    ++prunes_in_flight_;
    std::weak_ptr<int> alive = alive_;
    eval(args, true, [this, alive, done = std::move(done)](Expected<Reply> r) mutable {
      if (alive.expired()) return;
      --prunes_in_flight_;
      Expected<std::size_t> out = make_error(Errc::io, "prune: no answer");
      if (!r) {
        out = r.error();
      } else if (r->is_error()) {
        out = make_error(Errc::io, "redis store script: " + r->str);
      } else if (r->type != Reply::Type::array || r->elements.size() != 2 ||
                 r->elements[0].type != Reply::Type::integer || r->elements[1].type != Reply::Type::integer) {
        out = make_error(Errc::malformed, "redis store script: an unexpected answer to prune");
      } else {
        note_writes(r->elements[1].integer);
        const auto gone = static_cast<std::size_t>(std::max(0LL, r->elements[0].integer));
        pruned_ += gone;
        out = gone;
      }
      if (!out) ++stats_.prune_failures;
      answer("prune", done, std::move(out));
    });
  } catch (const std::exception& e) {
    Error err = make_error(Errc::io, std::string("prune not sent: ") + e.what());
    defer([done = std::move(done), err] { answer("prune", done, Expected<std::size_t>{err}); });
  }
}

}  // namespace fleetlink::broker::redis
