#pragma once
// The agent core: one ClientSession to the broker, command admission (seq,
// allow list, dedup), the executors, and the durable state under --state-dir:
//   dedup-window      cmd_ids accepted, with the accepting boot_id and whether they
//                     finished (an append-only journal, fdatasync'd once per loop
//                     turn before that turn's ACKs: CommandLedger, dedup_journal.hpp)
//   results/          the last RESULTs by cmd_id, replayed for redelivered commands
//   spool/            RESULTs finished while disconnected, sent after the next WELCOME
//   process-groups/   the process group of each running suite and plugin, so the
//                     next start stops what a killed agent left (process_groups.hpp)
// Everything here runs on the session's loop thread; executors report from their
// own threads through a Reporter that marshals into that loop.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "admission.hpp"
#include "artifact_uploader.hpp"
#include "command_ledger.hpp"
#include "config.hpp"
#include "executor_registry.hpp"
#include "process_groups.hpp"
#include "fleetlink/client_session.hpp"
#include "fleetlink/dedup_window.hpp"
#include "result_store.hpp"
#include "unsent_output.hpp"

namespace fleetlink::agent {

std::uint64_t now_unix_ms();

// The executors this configuration provides (built-ins, suites, plugins).
// Errors are configuration errors (a broken suites file...). `groups`: where
// suites and executable plugins record their process groups (none: not recorded).
Expected<std::shared_ptr<ExecutorRegistry>> build_registry(const AgentConfig& cfg,
                                                           std::vector<std::string>* warnings,
                                                           std::shared_ptr<ProcessGroupRecord> groups = nullptr);
// The kinds that may run: --allow (each must be known), or every known kind.
Expected<KindSet> allowed_kinds(const AgentConfig& cfg, const ExecutorRegistry& registry);

// Turns an executor's Outcome into the RESULT frame (caps the output).
msg::Result make_result(const std::string& cmd_id, Outcome outcome, std::uint64_t started_ms,
                        std::uint64_t finished_ms, std::uint64_t stream_dropped);

class Agent {
 public:
  explicit Agent(AgentConfig cfg);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Prepares state and executors; an error here is fatal (bad config/state).
  Expected<void> init();
  int run();
  void stop();  // thread-safe
  const std::string& boot_id() const noexcept { return boot_id_; }

  // Called on the loop thread by reporters.
  // stream_end: the bytes of output the command wrote in all (0: it streamed nothing).
  void command_finished(const std::string& cmd_id, Outcome outcome, std::uint64_t started_ms,
                        std::uint64_t stream_dropped, std::uint64_t stream_end = 0, std::vector<Attachment> files = {});
  // The uploader is done with cmd_id's artifacts: its RESULT goes now, naming what was stored.
  void artifacts_uploaded(const std::string& cmd_id, UploadReport report);

  struct Link;  // what reporters hold: outlives the agent safely

 private:
  void on_welcome(const msg::Welcome& w);
  void on_command(const msg::Command& c);
  void on_malformed_command(const CommandPeek& peek, std::string_view why);
  void send_refusal(const AdmissionDecision& d, std::uint64_t seq, std::string_view kind);
  void on_cancel(const msg::Cancel& c);
  // A cmd_id asked about again (redelivered, or cancelled while not running here):
  // sends what the record says and returns what that was (nothing for running and
  // never_seen: the caller decides).
  Recall answer_again(const std::string& cmd_id);
  // At start: stops what an earlier agent process's children left running.
  Expected<void> stop_orphans();
  // At start: RESULTs for what earlier processes accepted and never finished.
  void report_interrupted();
  // Into the result store; what it drops is told to the ledger.
  void store_result(const msg::Result& r);
  void on_disconnected(std::uint16_t code, std::string_view reason);
  void on_unsent(std::vector<Message> unsent);
  void deliver(const msg::Result& r);
  bool send_stream_end(const std::string& cmd_id);
  void spool(const msg::Result& r);
  void flush_spool();
  // Stages c's record; acknowledge_accepted() commits the turn's commands together.
  void start_command(const msg::Command& c);
  // One commit for every command accepted since the last: then each is ACKed and
  // run, or refused (NACK busy) if the commit failed.
  void acknowledge_accepted();
  // ACK; the executor starts in the next turn (start_acknowledged), after the
  // turn's ACKs are written.
  void run_accepted(const msg::Command& c);
  void start_acknowledged();
  // The RESULT is final: stored for duplicates, the ledger told, sent (or spooled).
  void complete(msg::Result r);

  AgentConfig cfg_;
  std::string boot_id_;
  std::filesystem::path state_dir_;
  std::shared_ptr<ProcessGroupRecord> groups_;
  std::shared_ptr<ExecutorRegistry> registry_;
  std::unique_ptr<CommandAdmission> admission_;
  std::unique_ptr<CommandLedger> ledger_;
  std::unique_ptr<ResultStore> results_;
  std::unique_ptr<Spool> spool_;
  std::unique_ptr<ClientSession> session_;
  std::shared_ptr<Link> link_;
  struct Running {
    Executor* executor = nullptr;
    std::uint64_t started_ms = 0;
  };
  std::map<std::string, Running, std::less<>> running_;
  void start_executor(const msg::Command& c, const Running& run);
  std::vector<msg::Command> acked_unstarted_;  // in running_, executor not started yet
  bool start_posted_ = false;
  std::vector<msg::Command> accepted_;  // staged in the ledger, waiting for this turn's commit
  bool commit_posted_ = false;
  UnsentOutput unsent_output_;  // output bytes a lost connection never wrote, by command
  // Stream totals of finished commands whose RESULT is not sent yet (send_stream_end).
  std::map<std::string, std::uint64_t, std::less<>> stream_ends_;
  bool welcomed_ = false;
  std::unique_ptr<ArtifactUploader> uploader_;  // null: --upload-artifacts false
  // Finished commands whose RESULT waits for their artifacts' upload.
  std::map<std::string, msg::Result, std::less<>> awaiting_upload_;
};

}  // namespace fleetlink::agent
