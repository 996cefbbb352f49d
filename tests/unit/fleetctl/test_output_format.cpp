// fleetctl output formatting is pure: the fleetctl_format library, without libcurl.
#include "output_format.hpp"

// fleetctl's human-readable output: ages, tables, rig and command views.
#include <doctest/doctest.h>



using nlohmann::json;

TEST_CASE("fleetctl: ages") {
  CHECK(fleetctl::format_age(std::nullopt) == "-");
  CHECK(fleetctl::format_age(999) == "0s");
  CHECK(fleetctl::format_age(47'000) == "47s");
  CHECK(fleetctl::format_age(192'000) == "3m12s");
  CHECK(fleetctl::format_age(7'500'000) == "2h05m");
  CHECK(fleetctl::format_age(90'000'000) == "1d01h");
}

TEST_CASE("fleetctl: tables align columns and trim trailing blanks") {
  const std::string t = fleetctl::render_table({"A", "LONGER"}, {{"xxxx", "1"}, {"y", ""}});
  CHECK(t == "A     LONGER\nxxxx  1\ny\n");
}

TEST_CASE("fleetctl: rigs table from GET /v1/rigs, sorted by rig, offline ones with their last-seen age") {
  const json body = json::parse(R"({"rigs":[
    {"rig_id":"rig-b","state":"unresponsive","connected":true,"boot_id":"b1","agent_version":"0.1.0",
     "last_ack_seq":41,"last_ack_age_ms":47000,"outbox_depth":128,"outbox_capacity":128,"unacked":128},
    {"rig_id":"rig-c","state":"offline","connected":false,"boot_id":"c1","agent_version":"0.1.0",
     "last_ack_seq":0,"last_ack_age_ms":null,"outbox_depth":2,"outbox_capacity":128,"unacked":0,
     "last_seen_age_ms":7500000},
    {"rig_id":"rig-a","state":"connected","connected":true,"boot_id":"a1","agent_version":"0.1.0",
     "last_ack_seq":0,"last_ack_age_ms":null,"outbox_depth":0,"outbox_capacity":128,"unacked":0}]})");
  const std::string t = fleetctl::rigs_table(body);
  CHECK(t ==
        "RIG    STATE         BOOT_ID  VERSION  LAST_ACK  AGE  OUTBOX   UNACKED  LAST_SEEN\n"
        "rig-a  connected     a1       0.1.0    0         -    0/128    0        now\n"
        "rig-b  unresponsive  b1       0.1.0    41        47s  128/128  128      now\n"
        "rig-c  offline       c1       0.1.0    0         -    2/128    0        2h05m ago\n");
  CHECK(fleetctl::rigs_table(json::object()).rfind("RIG", 0) == 0);  // tolerant of odd input
}

TEST_CASE("fleetctl: rig detail lists unacked commands") {
  const json rig = json::parse(R"({"rig_id":"rig-a","state":"connected","boot_id":"a1",
    "agent_version":"0.1.0","peer":"127.0.0.1:5","connected_at":"t0","last_ack_seq":3,
    "last_ack_at":"t1","last_ack_age_ms":2000,"outbox_depth":1,"outbox_capacity":8,
    "labels":{"lab":"b2"},"kinds":["dmesg"],"unacked":1,
    "unacked_commands":[{"cmd_id":"c1","seq":4,"kind":"dmesg","age_ms":5000,"sent":true}]})");
  const std::string d = fleetctl::rig_detail(rig);
  CHECK(d.find("last_ack:       seq 3 at t1 (2s ago)") != std::string::npos);
  CHECK(d.find("labels:         lab=b2") != std::string::npos);
  CHECK(d.find("CMD_ID  SEQ  KIND   AGE  SENT\nc1      4    dmesg  5s   yes\n") != std::string::npos);
}

TEST_CASE("fleetctl: command summary and event lines") {
  const json cmd = json::parse(R"({"cmd_id":"c1","rig_id":"rig-a","kind":"dmesg",
    "args":{"lines":"5"},"seq":2,"state":"done","enqueued_at":"t0","acked_at":"t1",
    "finished_at":"t2","duplicate":false,"nack":null,
    "result":{"status":"failed","exit_code":3,"signal":0,"output":"x","truncated":true,
              "dropped_bytes":10,"detail":"boom","started_at":"t1","finished_at":"t2"}})");
  const std::string s = fleetctl::command_summary(cmd);
  CHECK(s.find("args:         lines=5") != std::string::npos);
  CHECK(s.find("status:       failed") != std::string::npos);
  CHECK(s.find("detail:       boom") != std::string::npos);
  CHECK(s.find("truncated:    yes (10 bytes dropped)") != std::string::npos);
  const json ev = json::parse(
      R"({"type":"command_acked","rig_id":"rig-a","at":"t","cmd_id":"c1","detail":""})");
  CHECK(fleetctl::event_line(ev) == "t command_acked rig=rig-a cmd=c1");
}

TEST_CASE("fleetctl: jobs table, job summary and its rigs") {
  const json list = json::parse(R"({"jobs":[
    {"job_id":"j2","kind":"suite","state":"running","created_at":"t2",
     "counts":{"total":4,"pending":1,"dispatched":2,"ok":1,"failed":0,"refused":0,"skipped":0,"silent":0}},
    {"job_id":"j1","kind":"dmesg","state":"expired","created_at":"t1",
     "counts":{"total":3,"pending":0,"dispatched":0,"ok":1,"failed":0,"refused":0,"skipped":1,"silent":1}}],
    "next_before":null})");
  CHECK(fleetctl::jobs_table(list) ==
        "JOB_ID  STATE    KIND   CREATED  RIGS  RUNNING  OK  FAILED  REFUSED  SKIPPED  SILENT\n"
        "j2      running  suite  t2       4     3        1   0       0        0        0\n"
        "j1      expired  dmesg  t1       3     0        1   0       0        1        1\n");
  const json job = json::parse(R"({"job_id":"j1","kind":"suite","args":{"suite":"7"},"state":"expired",
    "created_at":"t1","deadline_s":60,"deadline_at":"t9","finished_at":"t9","max_concurrency":2,
    "max_concurrency_given":"50%","max_errors":null,"max_errors_given":null,
    "counts":{"total":3,"pending":0,"dispatched":0,"ok":1,"failed":0,"refused":0,"skipped":1,"silent":1},
    "rigs":[{"rig_id":"rig-a","outcome":"ok","cmd_id":"c1","state":"succeeded","error":null,"detail":null,
             "exit_code":0,"output_first_line":"all good"},
            {"rig_id":"rig-b","outcome":"silent","cmd_id":"c2","state":"sent","error":"never_acknowledged",
             "detail":"no ACK"},
            {"rig_id":"rig-c","outcome":"skipped","cmd_id":null,"state":null,"error":null,"detail":"not sent"}]})");
  const std::string s = fleetctl::job_summary(job);
  CHECK(s.find("job:          j1\n") != std::string::npos);
  CHECK(s.find("command:      suite suite=7\n") != std::string::npos);
  CHECK(s.find("state:        expired\n") != std::string::npos);
  CHECK(s.find("deadline_at:  t9 (60 s)\n") != std::string::npos);
  CHECK(s.find("concurrency:  2 (50%)\n") != std::string::npos);
  CHECK(s.find("max_errors:   none (never stops)\n") != std::string::npos);
  CHECK(s.find("rigs:         3 rigs, 1 ok, 1 skipped, 1 silent\n") != std::string::npos);
  // FIRST_LINE: the output's first line, or without output the detail's.
  CHECK(fleetctl::job_rigs_table(job) ==
        "RIG    CMD_ID  OUTCOME  STATE      ERROR               EXIT  FIRST_LINE\n"
        "rig-a  c1      ok       succeeded  -                   0     all good\n"
        "rig-b  c2      silent   sent       never_acknowledged  -     no ACK\n"
        "rig-c  -       skipped  -          -                   -     not sent\n");
  CHECK_FALSE(fleetctl::job_all_ok(job));
  const json fine = json::parse(R"({"state":"done","counts":{"total":2,"ok":2}})");
  CHECK(fleetctl::job_all_ok(fine));
  const json early = json::parse(R"({"state":"running","counts":{"total":2,"ok":2}})");
  CHECK_FALSE(fleetctl::job_all_ok(early));
  CHECK(fleetctl::jobs_table(json::object()).rfind("JOB_ID", 0) == 0);
}

TEST_CASE("fleetctl: a failed rig shows its exit code and the first line of its output, else of its detail") {
  const json job = json::parse(R"({"rigs":[
    {"rig_id":"r1","outcome":"failed","cmd_id":"c1","state":"failed","error":"failed","detail":"exit code 3",
     "exit_code":3,"output_first_line":"disk full"},
    {"rig_id":"r2","outcome":"failed","cmd_id":"c2","state":"cancelled","error":"cancelled",
     "detail":"cancelled by the operator\nsecond line","exit_code":null,"output_first_line":null}]})");
  CHECK(fleetctl::job_rigs_table(job) ==
        "RIG  CMD_ID  OUTCOME  STATE      ERROR      EXIT  FIRST_LINE\n"
        "r1   c1      failed   failed     failed     3     disk full\n"
        "r2   c2      failed   cancelled  cancelled  -     cancelled by the operator\n");
}

TEST_CASE("fleetctl: a job's progress line, and a cancelled one's while its commands end") {
  json job = json::parse(R"({"job_id":"j","state":"running","cancelled_at":null,
    "counts":{"total":40,"pending":26,"dispatched":10,"ok":3,"failed":1,"refused":0,"skipped":0,"silent":0}})");
  CHECK(fleetctl::job_progress_line(job) == "running: done 3, failed 1, running 10, pending 26, silent 0 (of 40)");
  job["cancelled_at"] = "t";
  job["counts"]["skipped"] = 26;
  job["counts"]["pending"] = 0;
  job["counts"]["refused"] = 2;
  CHECK(fleetctl::job_progress_line(job) ==
        "cancelling: done 3, failed 1, refused 2, running 10, pending 0, silent 0, skipped 26 (of 40)");
  job["state"] = "cancelled";
  CHECK(fleetctl::job_progress_line(job).rfind("cancelled: done 3", 0) == 0);
}

TEST_CASE("fleetctl: a dry run's selection: the count, the limits, every rig with its state") {
  const json body = json::parse(R"({"dry_run":true,"kind":"suite","count":2,"max_concurrency":1,
    "max_errors":null,"deadline_s":70,
    "rigs":[{"rig_id":"rig-1","state":"connected"},{"rig_id":"rig-9","state":"unknown"}]})");
  CHECK(fleetctl::job_dry_run_text(body) ==
        "dry run: suite would go to 2 rigs (concurrency 1, max_errors none, deadline 70 s); nothing was sent\n"
        "RIG    STATE\n"
        "rig-1  connected\n"
        "rig-9  unknown\n");
}
