#include "agent.hpp"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "common/log.hpp"
#include "dmesg_executor.hpp"
#include "fleetlink/artifacts.hpp"
#include "fleetlink/codec.hpp"
#include "fleetlink/uuid.hpp"
#include "fleetlink/version.hpp"
#include "orphan_groups.hpp"
#include "plugin_loader.hpp"
#include "reboot_executor.hpp"
#include "suite_config.hpp"
#include "suite_executor.hpp"

namespace fleetlink::agent {

namespace fs = std::filesystem;

std::uint64_t now_unix_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

// ------------------------------------------------------------------ Link / Reporter

// Reporters may outlive the agent (an executor thread finishing during shutdown):
// they reach it only through this, under its lock, and the agent clears it first.
struct Agent::Link {
  std::mutex mu;
  Agent* agent = nullptr;
  ClientSession* session = nullptr;

  bool send(const Message& m) {
    std::lock_guard lk(mu);
    return session != nullptr && session->send(m);
  }
  void finished(std::string cmd_id, Outcome outcome, std::uint64_t started_ms,
                std::uint64_t stream_dropped, std::uint64_t stream_end, std::vector<Attachment> files = {}) {
    std::lock_guard lk(mu);
    if (!session) return;
    Agent* a = agent;
    session->post([a, id = std::move(cmd_id), o = std::move(outcome), started_ms, stream_dropped, stream_end,
                   f = std::move(files)]() mutable {
      a->command_finished(id, std::move(o), started_ms, stream_dropped, stream_end, std::move(f));
    });
  }
  // From the uploader's thread: the command's artifacts are stored (or given up).
  void uploaded(std::string cmd_id, UploadReport report) {
    std::lock_guard lk(mu);
    if (!session) return;
    Agent* a = agent;
    session->post([a, id = std::move(cmd_id), r = std::move(report)]() mutable { a->artifacts_uploaded(id, std::move(r)); });
  }
  std::string broker_url() {
    std::lock_guard lk(mu);
    return session ? session->current_url() : std::string();
  }
};

namespace {

class CommandReporter final : public Reporter {
 public:
  CommandReporter(std::shared_ptr<Agent::Link> link, std::string cmd_id, std::uint64_t started_ms)
      : link_(std::move(link)), cmd_id_(std::move(cmd_id)), started_ms_(started_ms) {}

  bool output(std::string_view bytes) override {
    std::lock_guard lk(mu_);
    if (finished_) return false;
    bool all = true;
    while (!bytes.empty()) {
      const std::size_t n = std::min(bytes.size(), kMaxChunkBytes);
      msg::OutputChunk chunk;
      chunk.cmd_id = cmd_id_;
      chunk.offset = offset_;
      chunk.data.assign(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
      if (!link_->send(Message{std::move(chunk)})) {
        // Not connected, or the outbound queue is full: drop, and say so in the result.
        dropped_ += n;
        all = false;
      }
      offset_ += n;
      bytes.remove_prefix(n);
    }
    return all;
  }

  void finish(Outcome outcome) override {
    std::uint64_t dropped = 0;
    std::uint64_t end = 0;
    std::vector<Attachment> files;
    {
      std::lock_guard lk(mu_);
      if (finished_) return;
      finished_ = true;
      dropped = dropped_;
      end = offset_;
      files = std::move(files_);
    }
    link_->finished(cmd_id_, std::move(outcome), started_ms_, dropped, end, std::move(files));
  }

  bool attach(std::string_view name, std::string_view path) override {
    std::lock_guard lk(mu_);
    if (finished_ || !valid_artifact_name(name) || path.empty() || files_.size() >= kMaxArtifactsPerResult) return false;
    for (const auto& f : files_) {
      if (f.name == name) return false;
    }
    files_.push_back(Attachment{std::string(name), std::string(path), false});
    return true;
  }

 private:
  std::shared_ptr<Agent::Link> link_;
  std::string cmd_id_;
  std::uint64_t started_ms_;
  std::mutex mu_;
  std::uint64_t offset_ = 0;
  std::uint64_t dropped_ = 0;
  bool finished_ = false;
  std::vector<Attachment> files_;
};

// The session reports syslog numbers; notice (5) is logged as info.
log::Level from_syslog(int level) {
  if (level <= 3) return log::Level::error;
  if (level == 4) return log::Level::warn;
  if (level <= 6) return log::Level::info;
  return log::Level::debug;
}

// What a line of the session is about, to limit its repeats: its first two words
// ("connection to", "reconnect in", "broker busy", "closing connection").
std::string session_line_key(std::string_view line) {
  std::size_t end = line.find(' ');
  if (end != std::string_view::npos) end = line.find(' ', end + 1);
  return "session: " + std::string(line.substr(0, std::min(end, line.size())));
}

}  // namespace

// ------------------------------------------------------------------ registry

Expected<std::shared_ptr<ExecutorRegistry>> build_registry(const AgentConfig& cfg,
                                                           std::vector<std::string>* warnings,
                                                           std::shared_ptr<ProcessGroupRecord> groups) {
  auto reg = std::make_shared<ExecutorRegistry>();
  DmesgOptions dopts;
  dopts.default_lines = cfg.dmesg_default_lines;
  dopts.max_lines = cfg.dmesg_max_lines;
  reg->add(std::make_shared<DmesgExecutor>(dopts));
  RebootOptions ropts;
  ropts.command = cfg.reboot_command;
  ropts.delay = std::chrono::milliseconds(cfg.reboot_delay_ms);
  reg->add(std::make_shared<RebootExecutor>(ropts));
  SuiteTable suites;
  if (!cfg.suites.empty()) {
    auto t = load_suites_file(cfg.suites);
    if (!t) return make_error(Errc::invalid_argument, config_origin(cfg, "suites") + ": " + t.error().detail);
    suites = std::move(*t);
  }
  // A suite's full output is kept as an artifact (output.log) in the state directory until uploaded.
  reg->add(std::make_shared<SuiteExecutor>(
      std::move(suites), SuiteExecutor::kDefaultMaxRunning, groups,
      cfg.upload_artifacts ? (std::filesystem::path(cfg.state_dir) / "artifacts").string() : std::string()));
  if (!cfg.plugin_dir.empty()) {
    PluginHostInfo host;
    host.agent_version = kVersion;
    host.rig_id = cfg.rig_id;
    host.config = cfg.plugin_config;
    ExecPluginOptions exec;
    exec.timeout = std::chrono::seconds(cfg.plugin_timeout_s);
    exec.kill_grace = std::chrono::seconds(cfg.plugin_kill_grace_s);
    exec.max_running = cfg.plugin_max_running;
    exec.groups = groups;
    PluginLoader loader(host, {}, exec);
    auto report = loader.load_dir(cfg.plugin_dir, reg->kinds());
    for (auto& p : report.loaded) {
      if (!reg->add(p.executor) && warnings)
        warnings->push_back(config_origin(cfg, "plugin-dir") + ": " + p.file + ": kind '" + p.kind +
                            "' already taken");
    }
    if (warnings)
      for (auto& line : report.refused) warnings->push_back(config_origin(cfg, "plugin-dir") + ": " + line);
  }
  return reg;
}

Expected<KindSet> allowed_kinds(const AgentConfig& cfg, const ExecutorRegistry& registry) {
  const KindSet known = registry.kinds();
  if (cfg.allow.empty()) return known;
  KindSet out;
  for (const auto& k : cfg.allow) {
    if (!known.contains(k)) {
      std::string list;
      for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
      return make_error(Errc::invalid_argument, config_origin(cfg, "allow-kinds") + ": unknown kind '" + k +
                                                    "' (this agent has: " + list + ")");
    }
    out.insert(k);
  }
  return out;
}

msg::Result make_result(const std::string& cmd_id, Outcome o, std::uint64_t started_ms,
                        std::uint64_t finished_ms, std::uint64_t stream_dropped) {
  msg::Result r;
  r.cmd_id = cmd_id;
  r.status = o.status;
  r.exit_code = o.exit_code;
  r.signal = o.signal;
  r.truncated = o.truncated;
  r.dropped_bytes = o.dropped_bytes + stream_dropped;
  if (o.output.size() > kMaxResultOutput) {
    r.dropped_bytes += o.output.size() - kMaxResultOutput;
    o.output.resize(kMaxResultOutput);
    r.truncated = true;
  }
  if (r.dropped_bytes > 0) r.truncated = true;  // some of the output is not anywhere
  r.output.assign(o.output.begin(), o.output.end());
  r.started_at_ms = started_ms;
  r.finished_at_ms = std::max(finished_ms, started_ms);
  r.detail = std::move(o.detail);
  return r;
}

// ------------------------------------------------------------------ Agent

Agent::Agent(AgentConfig cfg) : cfg_(std::move(cfg)), link_(std::make_shared<Link>()) {}

Agent::~Agent() {
  {
    std::lock_guard lk(link_->mu);
    link_->agent = nullptr;
    link_->session = nullptr;
  }
  running_.clear();
  registry_.reset();  // executors wait for their children here
}

Expected<void> Agent::init() {
  boot_id_ = uuid_v7().to_string();
  state_dir_ = cfg_.state_dir;
  std::error_code ec;
  const bool existed = fs::exists(state_dir_, ec);
  fs::create_directories(state_dir_, ec);
  if (ec)
    return make_error(Errc::io, config_origin(cfg_, "state-dir") + ": cannot create '" +
                                    state_dir_.string() + "': " + ec.message());
  // Made here: the agent's alone whatever the umask (the next start refuses a state
  // directory others may write, OPERATIONS.md 4.5).
  if (!existed) fs::permissions(state_dir_, fs::perms::owner_all, ec);

  results_ = std::make_unique<ResultStore>(state_dir_ / "results", cfg_.results_max);
  if (auto ok = results_->load(); !ok) return ok.error();
  spool_ = std::make_unique<Spool>(state_dir_ / "spool", cfg_.spool_max_results);
  if (auto ok = spool_->load(); !ok) return ok.error();

  const fs::path dedup_path = state_dir_ / "dedup-window";
  const auto max_age = std::chrono::hours(cfg_.dedup_max_age_h);
  const std::uint64_t mono = monotonic_ms();
  bool torn = false;
  auto loaded = load_command_record(dedup_path, cfg_.dedup_max, max_age, mono, &torn);
  if (loaded) {
    if (torn)
      FL_WARN("dedup window %s: its last record was cut short (a crash while it was written, before "
              "anything acknowledged it); ignored", dedup_path.c_str());
    ledger_ = std::make_unique<CommandLedger>(std::move(*loaded), dedup_path, boot_id_);
    // Rewritten whole now (format 3, no torn tail, journal times from this
    // process's clock), so the first command only appends. A failure here is not
    // fatal: every command is refused until the directory is writable again.
    if (auto ok = ledger_->save(); !ok)
      FL_ERROR("dedup window %s not rewritten at start (%s): commands are refused until it can be",
               dedup_path.c_str(), ok.error().detail.c_str());
  } else {
    // Keep the evidence, and rebuild what we can from the stored results so a
    // reboot that already ran is still known.
    const fs::path aside = dedup_path.string() + ".corrupt-" + std::to_string(now_unix_ms());
    fs::rename(dedup_path, aside, ec);
    FL_ERROR("dedup window %s unreadable (%s); moved to %s, rebuilt from stored results",
             dedup_path.c_str(), loaded.error().detail.c_str(), aside.c_str());
    DedupWindow rebuilt(cfg_.dedup_max, max_age);
    // They finished (their results are here); which process accepted them is lost.
    for (const auto& id : results_->ids()) {
      rebuilt.insert(id, mono);
      rebuilt.mark_finished(id);
    }
    ledger_ = std::make_unique<CommandLedger>(std::move(rebuilt), dedup_path, boot_id_);
    if (auto ok = ledger_->save(); !ok)
      return make_error(Errc::io, config_origin(cfg_, "state-dir") + ": " + ok.error().detail);
  }
  if (auto ok = stop_orphans(); !ok) return ok.error();
  report_interrupted();

  std::vector<std::string> warnings;
  auto reg = build_registry(cfg_, &warnings, groups_);
  if (!reg) return reg.error();
  registry_ = std::move(*reg);
  for (const auto& w : warnings) FL_WARN("%s", w.c_str());
  auto allowed = allowed_kinds(cfg_, *registry_);
  if (!allowed) return allowed.error();
  admission_ = std::make_unique<CommandAdmission>(registry_->kinds(), *allowed);

  ClientSessionConfig sc;
  sc.broker_urls = cfg_.brokers;
  sc.cert_path = cfg_.cert;
  sc.key_path = cfg_.key;
  sc.ca_path = cfg_.ca;
  sc.allow_plain = cfg_.allow_plain;
  sc.hello.rig_id = cfg_.rig_id;
  sc.hello.agent_version = kVersion;
  sc.hello.boot_id = boot_id_;
  sc.hello.labels = parse_labels(cfg_.labels);
  sc.hello.kinds.assign(allowed->begin(), allowed->end());
  // A HELLO the broker would refuse (4400) would only make the agent reconnect in a loop.
  if (std::string problem = hello_config_problem(cfg_, sc.hello.kinds); !problem.empty())
    return make_error(Errc::invalid_argument, problem);
  sc.backoff.base = std::chrono::milliseconds(cfg_.backoff_base_ms);
  sc.backoff.cap = std::chrono::milliseconds(cfg_.backoff_cap_ms);
  sc.backoff.jitter = cfg_.jitter == "full" ? Jitter::full : Jitter::proportional;
  sc.max_frame_bytes = cfg_.max_frame_bytes;
  sc.strictness = cfg_.strict ? Strictness::strict : Strictness::lenient;
  sc.keepalive_idle = std::chrono::seconds(cfg_.keepalive_idle_s);
  sc.keepalive_timeout = std::chrono::seconds(cfg_.keepalive_timeout_s);
  // A rig that reboots (or whose agent is upgraded) resumes its TLS session.
  sc.tls_session_file = (state_dir_ / "tls-sessions").string();
  if (!cfg_.token_file.empty()) {
    // Read at every connection: whoever renews the token (a timer, a provisioning
    // tool) only rewrites the file; the next connection carries the new one.
    sc.bearer_token = [path = cfg_.token_file]() -> std::string {
      std::ifstream in(path);
      std::stringstream ss;
      if (in) ss << in.rdbuf();
      std::string t = ss.str();
      while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
      while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.erase(t.begin());
      if (t.empty()) FL_WARN("token-file %s: cannot be read or is empty; connecting without a token", path.c_str());
      return t;
    };
  }

  ClientSessionHandlers h;
  h.on_welcome = [this](const msg::Welcome& w) { on_welcome(w); };
  h.on_command = [this](const msg::Command& c) { on_command(c); };
  h.on_malformed_command = [this](const CommandPeek& p, std::string_view why) { on_malformed_command(p, why); };
  h.on_cancel = [this](const msg::Cancel& c) { on_cancel(c); };
  h.on_goaway = [](const msg::Goaway& g) {
    FL_INFO("goaway reason=%s reconnect_after_ms=%" PRIu32, g.reason.c_str(), g.reconnect_after_ms);
  };
  h.on_disconnected = [this](std::uint16_t code, std::string_view reason) {
    on_disconnected(code, reason);
  };
  h.on_unsent = [this](std::vector<Message> unsent) { on_unsent(std::move(unsent)); };
  // A spool bigger than the outbound queue is sent in several rounds.
  h.on_queue_empty = [this] {
    if (welcomed_ && spool_->size() > 0) flush_spool();
  };
  h.on_message = [](const Message& m) { FL_DEBUG("ignoring %s from broker", type_name(m)); };
  h.on_log = [](int level, std::string_view line) {
    const log::Level lv = from_syslog(level);
    if (!log::enabled(lv)) return;
    // A reconnect loop says the same few things at every attempt: limited per kind of line.
    if (lv == log::Level::debug) log::write(lv, line);
    else log::write_limited(session_line_key(line), lv, line);
  };
  session_ = std::make_unique<ClientSession>(std::move(sc), std::move(h));
  if (auto ok = session_->validate(); !ok) return ok.error();
  if (cfg_.upload_artifacts) {
    UploadSettings us;
    us.cert = cfg_.cert;
    us.key = cfg_.key;
    us.ca = cfg_.ca;
    uploader_ = std::make_unique<ArtifactUploader>(std::move(us));
  }
  {
    std::lock_guard lk(link_->mu);
    link_->agent = this;
    link_->session = session_.get();
  }
  std::string kinds;
  for (const auto& k : *allowed) kinds += (kinds.empty() ? "" : ",") + k;
  FL_INFO("fleetlink-agent %s rig=%s boot_id=%s kinds=%s state_dir=%s dedup=%zu spooled=%zu", kVersion,
          cfg_.rig_id.c_str(), boot_id_.c_str(), kinds.c_str(), state_dir_.c_str(), ledger_->window().size(),
          spool_->size());
  return {};
}

int Agent::run() {
  if (!session_) return 1;
  const int rc = session_->run();
  // Accepted in the loop's last turn and never acknowledged: not run, not kept.
  for (const auto& c : accepted_)
    FL_WARN("cmd=%s not acknowledged: the agent stopped before its record was committed", c.cmd_id.c_str());
  accepted_.clear();
  ledger_->discard_staged();
  acked_unstarted_.clear();  // acknowledged, in running_: reported below as stopped
  // Commands still running when the agent stops will never report: say so after
  // the next start (they are in the dedup window, so they do not run again).
  for (const auto& [cmd_id, run] : running_) {
    Outcome o;
    o.status = msg::Status::cancelled;
    o.exit_code = -1;
    o.detail = "the agent stopped before the command finished";
    msg::Result r = make_result(cmd_id, std::move(o), run.started_ms, now_unix_ms(), 0);
    store_result(r);
    ledger_->finished(cmd_id);
    spool(r);
  }
  running_.clear();
  // Compacted at stop: the next start reads a short file with ages up to now.
  if (auto ok = ledger_->save(); !ok) FL_WARN("dedup window not saved at stop: %s", ok.error().detail.c_str());
  return rc;
}

void Agent::store_result(const msg::Result& r) {
  std::vector<std::string> dropped;
  if (auto ok = results_->put(r, &dropped); !ok)
    FL_WARN("result of cmd=%s not stored for replays: %s", r.cmd_id.c_str(), ok.error().detail.c_str());
  if (!dropped.empty()) ledger_->results_dropped(dropped);
}

Expected<void> Agent::stop_orphans() {
  groups_ = std::make_shared<ProcessGroupRecord>(state_dir_ / "process-groups", boot_id_);
  if (auto ok = groups_->open(); !ok)
    return make_error(Errc::io, config_origin(cfg_, "state-dir") + ": " + ok.error().detail);
  const OrphanSweep sweep = stop_orphaned_groups(*groups_);
  for (const auto& p : sweep.problems) FL_WARN("%s", p.c_str());
  for (const auto& g : sweep.stopped) {
    const GroupRecord& r = g.record;
    if (g.left > 0)
      FL_ERROR("cmd=%s: process group %d (%s) of agent boot_id=%s outlived it: %zu process(es) still alive "
               "after SIGKILL; tried again at the next start",
               r.cmd_id.c_str(), static_cast<int>(r.pgid), r.program.c_str(), r.agent_boot_id.c_str(), g.left);
    else
      FL_WARN("cmd=%s: process group %d (%s) of agent boot_id=%s outlived it: %zu process(es) stopped (%s)",
              r.cmd_id.c_str(), static_cast<int>(r.pgid), r.program.c_str(), r.agent_boot_id.c_str(), g.processes,
              g.killed ? "SIGTERM, then SIGKILL after its grace" : "SIGTERM");
  }
  if (sweep.gone > 0)
    FL_INFO("%zu recorded process group(s) of an earlier agent process had ended by themselves", sweep.gone);
  return {};
}

void Agent::report_interrupted() {
  std::set<std::string, std::less<>> spooled;
  for (const auto& [id, r] : spool_->pending()) spooled.insert(r.cmd_id);
  const auto found = interrupted_entries(
      ledger_->window().entries(ledger_->now()), boot_id_,
      [&](std::string_view id) { return spooled.contains(id) || results_->get(id).has_value(); },
      kInterruptedReportWindow);
  if (found.empty()) return;
  const std::uint64_t now = now_unix_ms();
  for (const auto& e : found) {
    const msg::Result r = interrupted_result(e, boot_id_, now);
    FL_WARN("cmd=%s interrupted: accepted by boot_id=%s (monotonic age %" PRIu64
            " ms), which ended before it finished; reporting it failed",
            e.cmd_id.c_str(), e.boot_id.empty() ? "unknown" : e.boot_id.c_str(), e.age_ms);
    // Stored first: a redelivery or a restart from here on answers the same.
    store_result(r);
    ledger_->finished(e.cmd_id);
    spool(r);
  }
  if (auto ok = ledger_->save(); !ok)
    FL_WARN("dedup window not saved after reporting %zu interrupted commands: %s", found.size(),
            ok.error().detail.c_str());
}

void Agent::stop() {
  if (session_) session_->stop();
}

void Agent::on_welcome(const msg::Welcome& w) {
  welcomed_ = true;
  admission_->new_connection();
  log::flush_suppressed();  // what a reconnect loop suppressed, now that it is over
  FL_INFO("welcome broker=%s session=%s url=%s", w.broker_id.c_str(), w.session_id.c_str(),
          session_->current_url().c_str());
  flush_spool();
}

void Agent::on_disconnected(std::uint16_t code, std::string_view reason) {
  const bool was = welcomed_;
  welcomed_ = false;
  if (was || code != 0)
    FL_WARN_LIMITED("disconnected code=" + std::to_string(code), "disconnected code=%u (%.*s) reason=%.*s",
                    static_cast<unsigned>(code),
            static_cast<int>(close_code_name(code).size()), close_code_name(code).data(),
            static_cast<int>(reason.size()), reason.data());
  else
    FL_DEBUG("connect attempt failed: %.*s", static_cast<int>(reason.size()), reason.data());
}

void Agent::on_unsent(std::vector<Message> unsent) {
  // Output chunks still queued when the connection ended were never delivered:
  // they are dropped bytes of their command, not silently gone.
  for (auto& r : unsent_output_.absorb(std::move(unsent))) {
    if (r.truncated) store_result(r);
    spool(r);
  }
  // Commands still running take theirs when their RESULT is made (command_finished);
  // a RESULT already waiting in the spool (the queue was full when it was made) is
  // rewritten with them.
  for (const auto& id : unsent_output_.pending_ids()) {
    if (running_.contains(id)) continue;
    const std::uint64_t n = unsent_output_.take(id);
    bool charged = false;
    for (auto& [spool_id, r] : spool_->pending()) {
      if (r.cmd_id != id) continue;
      add_dropped(r, n);
      spool_->remove(spool_id);
      spool(r);
      store_result(r);
      charged = true;
      break;
    }
    if (!charged)
      FL_WARN("cmd=%s: %" PRIu64 " unsent output bytes, but its result is neither pending nor spooled", id.c_str(), n);
  }
}

void Agent::spool(const msg::Result& r) {
  auto pushed = spool_->push(r);
  if (!pushed) {
    FL_ERROR("cannot spool result cmd=%s: %s", r.cmd_id.c_str(), pushed.error().detail.c_str());
    return;
  }
  if (*pushed) {
    FL_WARN("spool full (%zu): dropped the oldest result cmd=%s", spool_->max(), (**pushed).c_str());
    stream_ends_.erase(**pushed);
  }
  FL_INFO("result spooled cmd=%s status=%s spooled=%zu", r.cmd_id.c_str(), fleetlink::to_string(r.status),
          spool_->size());
}

void Agent::flush_spool() {
  if (spool_->size() == 0) return;
  std::size_t sent = 0;
  for (auto& [id, r] : spool_->pending()) {
    // queue full: on_queue_empty resumes
    if (!send_stream_end(r.cmd_id) || !session_->send(Message{r})) break;
    stream_ends_.erase(r.cmd_id);
    spool_->remove(id);
    ++sent;
    FL_INFO("result sent from spool cmd=%s status=%s", r.cmd_id.c_str(), fleetlink::to_string(r.status));
  }
  FL_INFO("spool flushed sent=%zu left=%zu", sent, spool_->size());
}

// The stream's end, as an empty chunk at offset = the total bytes written, just
// before the RESULT: the broker then sees the bytes lost in transit after the last
// chunk it got (a connection that ended with them written but unread) as a gap.
// Sent again with a RESULT that went through the spool (the broker ignores a
// second one).
bool Agent::send_stream_end(const std::string& cmd_id) {
  auto it = stream_ends_.find(cmd_id);
  if (it == stream_ends_.end()) return true;
  msg::OutputChunk end;
  end.cmd_id = cmd_id;
  end.offset = it->second;
  return session_->send(Message{std::move(end)});
}

void Agent::deliver(const msg::Result& r) {
  if (welcomed_ && send_stream_end(r.cmd_id) && session_->send(Message{r})) {
    stream_ends_.erase(r.cmd_id);
    FL_INFO("result cmd=%s status=%s exit=%d bytes=%zu%s", r.cmd_id.c_str(), fleetlink::to_string(r.status),
            static_cast<int>(r.exit_code), r.output.size(), r.truncated ? " truncated" : "");
    return;
  }
  spool(r);
}

void Agent::on_command(const msg::Command& c) {
  AdmissionDecision d = admission_->decide(c, ledger_->window(), ledger_->now());
  switch (d.action) {
    case Admission::ignore:
      FL_WARN_LIMITED("commands ignored", "command ignored seq=%" PRIu64 " cmd=%s: %s", c.seq, c.cmd_id.c_str(),
                      d.why.c_str());
      return;
    case Admission::nack:
      send_refusal(d, c.seq, c.kind);
      return;
    case Admission::duplicate: {
      // Accepted earlier in this turn: its own ACK (or refusal) goes first.
      const bool staged = std::any_of(accepted_.begin(), accepted_.end(),
                                      [&](const msg::Command& a) { return a.cmd_id == c.cmd_id; });
      acknowledge_accepted();
      if (staged && !ledger_->find(c.cmd_id)) {
        const msg::Nack nack = state_unwritable_nack(c.seq, c.cmd_id, "its record was not committed");
        session_->send(Message{nack});
        FL_ERROR("nack seq=%" PRIu64 " cmd=%s reason=busy: %s", c.seq, c.cmd_id.c_str(), nack.detail.c_str());
        return;
      }
      session_->send(Message{d.ack});
      Recall what = answer_again(c.cmd_id);
      if (what == Recall::never_seen) {
        // Expired between admission and now: it was in the window, so it ran.
        deliver(forgotten_result(DedupWindow::Entry{c.cmd_id, 0, {}, DedupWindow::State::finished}));
        what = Recall::forgotten;
      }
      const char* fate = what == Recall::running       ? "still running: its result follows when it finishes"
                         : what == Recall::stored      ? "replaying its result"
                         : what == Recall::interrupted ? "interrupted: reporting it failed"
                                                       : "result no longer kept: answered duplicate";
      FL_INFO("ack seq=%" PRIu64 " cmd=%s duplicate=true (%s)", c.seq, c.cmd_id.c_str(), fate);
      return;
    }
    case Admission::run:
      start_command(c);
      return;
  }
}

Recall Agent::answer_again(const std::string& cmd_id) {
  const auto entry = ledger_->find(cmd_id);
  const auto stored = results_->get(cmd_id);
  const Recall what = recall(entry, stored.has_value(), running_.contains(cmd_id));
  switch (what) {
    case Recall::running:
    case Recall::never_seen:
      break;
    case Recall::stored:
      deliver(*stored);
      break;
    case Recall::interrupted: {
      // Accepted by a process that is gone (one older than the start-up report
      // looks back, or whose report was since dropped from the result store).
      const msg::Result r = interrupted_result(*entry, boot_id_, now_unix_ms());
      store_result(r);
      ledger_->finished(cmd_id);
      deliver(r);
      break;
    }
    case Recall::forgotten:
      deliver(forgotten_result(*entry));
      break;
  }
  return what;
}

void Agent::send_refusal(const AdmissionDecision& d, std::uint64_t seq, std::string_view kind) {
  session_->send(Message{d.nack});
  FL_WARN_LIMITED("nack reason=" + std::string(fleetlink::to_string(d.nack.reason)) + " kind=" + std::string(kind),
                  "nack seq=%" PRIu64 " cmd=%s kind=%.*s reason=%s: %s", seq, d.nack.cmd_id.c_str(),
          static_cast<int>(kind.size()), kind.data(), fleetlink::to_string(d.nack.reason), d.why.c_str());
  if (d.reconnect) {
    FL_WARN("sequence gap: expected seq %" PRIu64 ", got %" PRIu64 "; reconnecting (close 4412)",
            d.nack.expected_seq, seq);
    session_->reconnect(CloseCode::seq_gap, "seq gap: expected " + std::to_string(d.nack.expected_seq) +
                                                " got " + std::to_string(seq));
  }
}

void Agent::on_malformed_command(const CommandPeek& peek, std::string_view why) {
  // The broker sent a COMMAND this agent cannot read: refused (NACK malformed),
  // never run, and the connection goes on (PROTOCOL.md 3.5).
  const AdmissionDecision d = admission_->decide_malformed(peek, why);
  if (d.action == Admission::ignore) {
    FL_WARN_LIMITED("undecodable commands ignored", "undecodable command ignored seq=%" PRIu64 ": %s",
                    peek.seq.value_or(0), d.why.c_str());
    return;
  }
  send_refusal(d, peek.seq.value_or(0), "?");
}

void Agent::start_command(const msg::Command& c) {
  // Record the cmd_id durably before anything is acknowledged or run: whatever
  // happens next (crash, reboot), this command must never run a second time.
  // Staged now; every command accepted in this loop turn is made durable by one
  // commit (one fdatasync) in acknowledge_accepted(), posted to run right after
  // the turn, and only then acknowledged and started.
  ledger_->stage(c.cmd_id);
  accepted_.push_back(c);
  if (commit_posted_) return;
  commit_posted_ = true;
  session_->post([this] {
    commit_posted_ = false;
    acknowledge_accepted();
  });
}

void Agent::acknowledge_accepted() {
  if (accepted_.empty()) return;
  std::vector<msg::Command> batch;
  batch.swap(accepted_);
  // A command that cannot be recorded does not run at all (a restart would run it
  // again): refused, and the next one tries the disk again.
  const auto committed = ledger_->commit();
  FL_DEBUG("dedup record: %zu accepted command(s) committed together%s", batch.size(), committed ? "" : " (failed)");
  for (const auto& c : batch) {
    if (committed && ledger_->find(c.cmd_id)) {
      run_accepted(c);
      continue;
    }
    const msg::Nack nack = state_unwritable_nack(
        c.seq, c.cmd_id, committed ? std::string("dropped from the window before its commit (dedup-max)")
                                   : committed.error().detail);
    session_->send(Message{nack});
    FL_ERROR("nack seq=%" PRIu64 " cmd=%s kind=%s reason=busy: %s", c.seq, c.cmd_id.c_str(), c.kind.c_str(),
             nack.detail.c_str());
  }
}

void Agent::run_accepted(const msg::Command& c) {
  const std::uint64_t now = now_unix_ms();
  session_->send(Message{msg::Ack{c.seq, c.cmd_id, false}});
  FL_INFO("ack seq=%" PRIu64 " cmd=%s kind=%s", c.seq, c.cmd_id.c_str(), c.kind.c_str());
  running_[c.cmd_id] = Running{registry_->find(c.kind), now};
  // Started in the next turn, once the ACKs are written: an executor's start may
  // take a while on this thread (dmesg reads the kernel log, a plugin's spawn
  // records its process group), and the broker need not wait for that.
  acked_unstarted_.push_back(c);
  if (start_posted_) return;
  start_posted_ = true;
  session_->post([this] {
    start_posted_ = false;
    start_acknowledged();
  });
}

void Agent::start_acknowledged() {
  std::vector<msg::Command> batch;
  batch.swap(acked_unstarted_);
  for (const auto& c : batch) {
    auto it = running_.find(c.cmd_id);
    if (it != running_.end()) start_executor(c, it->second);
  }
}

void Agent::start_executor(const msg::Command& c, const Running& run) {
  Executor* e = run.executor;
  const std::uint64_t now = run.started_ms;
  CommandContext ctx{c.cmd_id, c.kind, c.args};
  auto reporter = std::make_shared<CommandReporter>(link_, c.cmd_id, now);
  try {
    e->start(ctx, reporter);
  } catch (const std::exception& ex) {
    Outcome o;
    o.status = msg::Status::failed;
    o.exit_code = 1;
    o.detail = std::string("executor failed to start: ") + ex.what();
    reporter->finish(std::move(o));
  } catch (...) {
    Outcome o;
    o.status = msg::Status::failed;
    o.exit_code = 1;
    o.detail = "executor failed to start";
    reporter->finish(std::move(o));
  }
}

void Agent::command_finished(const std::string& cmd_id, Outcome outcome, std::uint64_t started_ms,
                             std::uint64_t stream_dropped, std::uint64_t stream_end, std::vector<Attachment> files) {
  if (stream_end > 0) stream_ends_[cmd_id] = stream_end;
  stream_dropped += unsent_output_.take(cmd_id);  // its chunks a lost connection never wrote
  msg::Result r = make_result(cmd_id, std::move(outcome), started_ms, now_unix_ms(), stream_dropped);
  // Files the agent made itself (under <state-dir>/artifacts/) go once uploaded.
  const std::string own = (state_dir_ / "artifacts").string() + "/";
  for (auto& f : files) f.owned = f.path.rfind(own, 0) == 0;
  if (!files.empty() && uploader_) {
    // The RESULT waits for its artifacts: it names only what the broker stored.
    // The command stays running here meanwhile (a CANCEL now changes nothing).
    awaiting_upload_[cmd_id] = std::move(r);
    std::shared_ptr<Link> link = link_;
    uploader_->submit(artifact_base_url(link_->broker_url()), cmd_id, std::move(files),
                      [link, cmd_id](UploadReport report) { link->uploaded(cmd_id, std::move(report)); });
    return;
  }
  complete(std::move(r));
}

void Agent::artifacts_uploaded(const std::string& cmd_id, UploadReport report) {
  auto it = awaiting_upload_.find(cmd_id);
  if (it == awaiting_upload_.end()) return;
  msg::Result r = std::move(it->second);
  awaiting_upload_.erase(it);
  r.artifacts = std::move(report.stored);
  for (const auto& p : report.problems) {
    if (r.detail.size() + p.size() + 2 > kMaxDetailBytes) break;
    r.detail += (r.detail.empty() ? "" : "; ") + p;
  }
  complete(std::move(r));
}

void Agent::complete(msg::Result r) {
  const std::string cmd_id = r.cmd_id;
  running_.erase(cmd_id);
  store_result(r);
  ledger_->finished(cmd_id);
  deliver(r);
}

void Agent::on_cancel(const msg::Cancel& c) {
  acknowledge_accepted();  // a command accepted in this turn runs (and is cancelled) first
  start_acknowledged();
  auto it = running_.find(c.cmd_id);
  if (it == running_.end() || it->second.executor == nullptr) {
    // Not running here: answer with what the record says, so the broker never
    // waits for a RESULT that cannot come (PROTOCOL.md 3.9).
    const Recall what = answer_again(c.cmd_id);
    if (what == Recall::never_seen) {
      // Recorded as finished first: the command itself may still arrive (a
      // CANCEL overtakes a queued COMMAND) and must then not run.
      const msg::Result r = never_received_result(c.cmd_id, now_unix_ms());
      if (auto ok = ledger_->record(c.cmd_id, DedupWindow::State::finished); !ok)
        FL_WARN("cancel cmd=%s: not recorded (%s): delivered later, it would run", c.cmd_id.c_str(),
                ok.error().detail.c_str());
      store_result(r);
      deliver(r);
    }
    FL_INFO("cancel cmd=%s: not running (%s): answered with its result", c.cmd_id.c_str(), to_string(what));
    return;
  }
  FL_INFO("cancel cmd=%s", c.cmd_id.c_str());
  try {
    it->second.executor->cancel(c.cmd_id);
  } catch (...) {
    FL_ERROR("cancel cmd=%s: executor threw", c.cmd_id.c_str());
  }
}

}  // namespace fleetlink::agent
