// Executable plugins: the stdin request, the result line, exit codes, crashes,
// timeouts and cancel.
#include <doctest/doctest.h>
#include <signal.h>

#include <thread>

#include "exec_plugin.hpp"
#include "test_process_support.hpp"

using namespace fleetlink;
using namespace fleetlink::agent;
using namespace std::chrono_literals;
using fleetlink::agent::testing::RecordingReporter;
using fleetlink::agent::testing::ScratchDir;

namespace {

std::optional<Outcome> run_plugin(const std::string& script, StringMap args = {},
                                  ExecPluginOptions options = {},
                                  std::shared_ptr<RecordingReporter> rep = nullptr) {
  ScratchDir dir;
  auto path = dir.write("fleetlink-test", "#!/bin/sh\n" + script, true);
  ExecPlugin plugin("test", path, options);
  if (!rep) rep = std::make_shared<RecordingReporter>();
  plugin.start(CommandContext{"cmd-1", "test", std::move(args)}, rep);
  return rep->wait();
}

std::string filtered(const std::vector<std::string>& pieces, ResultLineFilter** out = nullptr) {
  static std::string sink;
  sink.clear();
  static std::optional<ResultLineFilter> f;
  f.emplace([](std::string_view b) { sink.append(b); });
  for (const auto& p : pieces) f->feed(p);
  f->finish();
  if (out) *out = &*f;
  return sink;
}

}  // namespace

TEST_CASE("exec plugin request: one JSON line with protocol, cmd_id, kind, args") {
  CHECK(exec_plugin_request(CommandContext{"id-1", "hello", {{"b", "2"}, {"a", "x\"y"}}}) ==
        R"({"args":{"a":"x\"y","b":"2"},"cmd_id":"id-1","kind":"hello","protocol":1})" "\n");
}

TEST_CASE("exec plugin request: invalid UTF-8 in args becomes U+FFFD, never an exception") {
  std::string req = exec_plugin_request(CommandContext{"id", "k", {{"a", "x\xff"}}});
  CHECK(req == "{\"args\":{\"a\":\"x\xef\xbf\xbd\"},\"cmd_id\":\"id\",\"kind\":\"k\",\"protocol\":1}\n");
}

TEST_CASE("result line parsing") {
  CHECK_FALSE(parse_result_line("hello").has_value());
  CHECK_FALSE(parse_result_line(" {\"fleetlink_result\":{}}").has_value());
  auto ok = parse_result_line(R"({"fleetlink_result": {"status": "failed", "exit_code": 3, "detail": "d", "extra": 1}})");
  REQUIRE(ok.has_value());
  REQUIRE(ok->has_value());
  CHECK(ok->value().status == msg::Status::failed);
  CHECK(ok->value().exit_code == 3);
  CHECK(ok->value().detail == "d");
  auto empty = parse_result_line(R"({"fleetlink_result":{}})");
  REQUIRE(empty.has_value());
  CHECK(empty->has_value());
  for (const char* bad : {R"({"fleetlink_result": 1})", R"({"fleetlink_result": {"status": "maybe"}})",
                          R"({"fleetlink_result": {"exit_code": "3"}})",
                          R"({"fleetlink_result": {}, "more": 1})", R"({"fleetlink_result": {)"}) {
    auto r = parse_result_line(bad);
    REQUIRE_MESSAGE(r.has_value(), bad);
    CHECK_FALSE_MESSAGE(r->has_value(), bad);
  }
}

TEST_CASE("result line filter: result lines leave the output, other bytes pass unchanged") {
  ResultLineFilter* f = nullptr;
  CHECK(filtered({"a\nb\n"}, &f) == "a\nb\n");
  CHECK_FALSE(f->result().has_value());

  CHECK(filtered({"out\n{\"fleetlink_result\":{\"status\":\"failed\"}}\n"}, &f) == "out\n");
  REQUIRE(f->result().has_value());
  CHECK(f->result()->status == msg::Status::failed);

  // Split at every position across feeds.
  const std::string text = "x\n{\"fleetlink_result\":{\"exit_code\":7}}\ny";
  for (std::size_t i = 0; i <= text.size(); ++i) {
    CHECK(filtered({text.substr(0, i), text.substr(i)}, &f) == "x\ny");
    REQUIRE(f->result().has_value());
    CHECK(f->result()->exit_code == 7);
  }
  // The last line without a newline; the last result line wins.
  CHECK(filtered({"{\"fleetlink_result\":{\"exit_code\":1}}\n{\"fleetlink_result\":{\"exit_code\":2}}"}, &f) == "");
  CHECK(f->result()->exit_code == 2);
  // Not at line start: plain output.
  CHECK(filtered({"say {\"fleetlink_result\":{}}\n"}, &f) == "say {\"fleetlink_result\":{}}\n");
  CHECK_FALSE(f->result().has_value());
  // Malformed: kept as output, reported as a problem.
  CHECK(filtered({"{\"fleetlink_result\":{\"status\":\"meh\"}}\n"}, &f) ==
        "{\"fleetlink_result\":{\"status\":\"meh\"}}\n");
  CHECK(f->problem().find("malformed fleetlink_result line") != std::string::npos);
  // Too long to be a result line: plain output.
  std::string longline = "{\"fleetlink_result\":{\"detail\":\"" + std::string(5000, 'd') + "\"}}\n";
  CHECK(filtered({longline}, &f) == longline);
  CHECK_FALSE(f->result().has_value());
  // Prefix-looking lines that turn out different.
  CHECK(filtered({"{\"fleet", "x\": 1}\n{\n"}, &f) == "{\"fleetx\": 1}\n{\n");
}

TEST_CASE("exec plugin: receives the request on stdin, output and exit code") {
  auto o = run_plugin("read line; echo \"got $line\"; echo \"env $FLEETLINK_CMD_ID $FLEETLINK_KIND\"",
                      {{"who", "world"}});
  REQUIRE(o.has_value());
  CHECK(o->status == msg::Status::ok);
  CHECK(o->output ==
        "got {\"args\":{\"who\":\"world\"},\"cmd_id\":\"cmd-1\",\"kind\":\"test\",\"protocol\":1}\n"
        "env cmd-1 test\n");
  auto f = run_plugin("echo nope >&2; exit 5");
  REQUIRE(f.has_value());
  CHECK(f->status == msg::Status::failed);
  CHECK(f->exit_code == 5);
  CHECK(f->output == "nope\n");
}

TEST_CASE("exec plugin: a result line overrides status, exit code and detail") {
  auto o = run_plugin(
      "echo working\n"
      "echo '{\"fleetlink_result\": {\"status\": \"failed\", \"exit_code\": 9, \"detail\": \"rig too hot\"}}'\n");
  REQUIRE(o.has_value());
  CHECK(o->status == msg::Status::failed);
  CHECK(o->exit_code == 9);
  CHECK(o->detail == "rig too hot");
  CHECK(o->output == "working\n");

  auto ok = run_plugin("echo '{\"fleetlink_result\": {\"status\": \"ok\"}}'; exit 3");
  REQUIRE(ok.has_value());
  CHECK(ok->status == msg::Status::ok);
  CHECK(ok->exit_code == 3);
}

TEST_CASE("exec plugin: a crashing plugin yields failed with the signal") {
  auto o = run_plugin("echo before; kill -SEGV $$");
  REQUIRE(o.has_value());
  CHECK(o->status == msg::Status::failed);
  CHECK(o->signal == SIGSEGV);
  CHECK(o->detail == "plugin test killed by SIGSEGV");
  CHECK(o->output == "before\n");
}

TEST_CASE("exec plugin: a result line does not rescue a crash") {
  auto o = run_plugin("echo '{\"fleetlink_result\": {\"status\": \"ok\"}}'; kill -KILL $$");
  REQUIRE(o.has_value());
  CHECK(o->status == msg::Status::failed);
  CHECK(o->signal == SIGKILL);
}

TEST_CASE("exec plugin: timeout and cancel") {
  ExecPluginOptions opts;
  opts.timeout = 300ms;
  opts.kill_grace = 200ms;
  auto o = run_plugin("sleep 100", {}, opts);
  REQUIRE(o.has_value());
  CHECK(o->status == msg::Status::timeout);

  ScratchDir dir;
  auto path = dir.write("fleetlink-sleepy", "#!/bin/sh\nsleep 100\n", true);
  ExecPlugin plugin("sleepy", path);
  auto rep = std::make_shared<RecordingReporter>();
  plugin.start(CommandContext{"c9", "sleepy", {}}, rep);
  std::this_thread::sleep_for(200ms);
  plugin.cancel("c9");
  auto c = rep->wait(5s);
  REQUIRE(c.has_value());
  CHECK(c->status == msg::Status::cancelled);
}

TEST_CASE("plugin kind names") {
  CHECK(valid_plugin_kind("hello"));
  CHECK(valid_plugin_kind("a-b_c9"));
  CHECK_FALSE(valid_plugin_kind(""));
  CHECK_FALSE(valid_plugin_kind("-x"));
  CHECK_FALSE(valid_plugin_kind("Hello"));
  CHECK_FALSE(valid_plugin_kind("a b"));
  CHECK_FALSE(valid_plugin_kind(std::string(65, 'a')));
}
