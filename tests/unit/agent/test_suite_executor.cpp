// SuiteExecutor end to end with real child processes and a recording Reporter.
#include <doctest/doctest.h>
#include <signal.h>

#include <thread>

#include "suite_executor.hpp"
#include "test_process_support.hpp"

using namespace fleetlink;
using namespace fleetlink::agent;
using namespace std::chrono_literals;
using fleetlink::agent::testing::RecordingReporter;

namespace {

SuiteTable table() {
  SuiteTable t;
  auto add = [&t](std::string id, std::vector<std::string> argv, int timeout_s = 60,
                  int grace_s = 1) {
    SuiteSpec s;
    s.id = id;
    s.argv = std::move(argv);
    s.timeout = std::chrono::seconds(timeout_s);
    s.kill_grace = std::chrono::seconds(grace_s);
    t.emplace(id, std::move(s));
  };
  add("pass", {"/bin/sh", "-c", "echo running suite; echo \"K=$K\""});
  t.at("pass").env = {{"K", "V"}};
  add("fail", {"/bin/sh", "-c", "echo bad; exit 4"});
  add("crash", {"/bin/sh", "-c", "kill -ABRT $$"});
  add("hang", {"/bin/sh", "-c", "echo started; sleep 100"}, 1, 1);
  add("long", {"/bin/sh", "-c", "echo started; sleep 100"});
  add("missing", {"/nonexistent/run-regression"});
  return t;
}

CommandContext cmd(const std::string& id, const std::string& suite) {
  return CommandContext{id, "suite", {{"suite", suite}}};
}

}  // namespace

TEST_CASE("suite executor: passing suite streams its output and reports ok") {
  SuiteExecutor ex(table());
  CHECK(ex.kind() == "suite");
  auto rep = std::make_shared<RecordingReporter>();
  ex.start(cmd("c1", "pass"), rep);
  auto o = rep->wait();
  REQUIRE(o.has_value());
  CHECK(o->status == msg::Status::ok);
  CHECK(o->exit_code == 0);
  CHECK(o->output == "running suite\nK=V\n");
  CHECK(rep->streamed() == o->output);
  CHECK_FALSE(o->truncated);
  CHECK(o->dropped_bytes == 0);
}

TEST_CASE("suite executor: exit code and signal") {
  SuiteExecutor ex(table());
  auto fail = std::make_shared<RecordingReporter>();
  auto crash = std::make_shared<RecordingReporter>();
  ex.start(cmd("c1", "fail"), fail);
  ex.start(cmd("c2", "crash"), crash);
  auto f = fail->wait();
  auto c = crash->wait();
  REQUIRE(f.has_value());
  REQUIRE(c.has_value());
  CHECK(f->status == msg::Status::failed);
  CHECK(f->exit_code == 4);
  CHECK(f->detail == "suite fail failed with exit code 4");
  CHECK(c->status == msg::Status::failed);
  CHECK(c->signal == SIGABRT);
  CHECK(c->detail == "suite crash killed by SIGABRT");
}

TEST_CASE("suite executor: unknown suite, missing argument, unstartable program") {
  SuiteExecutor ex(table());
  auto r1 = std::make_shared<RecordingReporter>();
  ex.start(cmd("c1", "nine"), r1);
  auto o1 = r1->wait();
  REQUIRE(o1.has_value());
  CHECK(o1->status == msg::Status::failed);
  CHECK(o1->detail.rfind("unknown suite 'nine' (configured: ", 0) == 0);

  auto r2 = std::make_shared<RecordingReporter>();
  ex.start(CommandContext{"c2", "suite", {}}, r2);
  auto o2 = r2->wait();
  REQUIRE(o2.has_value());
  CHECK(o2->detail == "missing argument \"suite\" (the suite id)");

  auto r3 = std::make_shared<RecordingReporter>();
  ex.start(cmd("c3", "missing"), r3);
  auto o3 = r3->wait();
  REQUIRE(o3.has_value());
  CHECK(o3->status == msg::Status::failed);
  CHECK(o3->detail.find("could not start") != std::string::npos);

  SuiteExecutor empty({});
  auto r4 = std::make_shared<RecordingReporter>();
  empty.start(cmd("c4", "7"), r4);
  auto o4 = r4->wait();
  REQUIRE(o4.has_value());
  CHECK(o4->detail == "unknown suite '7': no suites configured (--suites)");
}

TEST_CASE("suite executor: a hanging suite is killed at its timeout") {
  SuiteExecutor ex(table());
  auto rep = std::make_shared<RecordingReporter>();
  auto t0 = std::chrono::steady_clock::now();
  ex.start(cmd("c1", "hang"), rep);
  auto o = rep->wait(10s);
  REQUIRE(o.has_value());
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(o->status == msg::Status::timeout);
  CHECK(o->signal == SIGTERM);
  CHECK(o->output == "started\n");
  CHECK(took >= 900ms);
  CHECK(took < 10s);
  CHECK(rep->finishes() == 1);
}

TEST_CASE("suite executor: cancel stops a running suite") {
  SuiteExecutor ex(table());
  auto rep = std::make_shared<RecordingReporter>();
  ex.start(cmd("c1", "long"), rep);
  std::this_thread::sleep_for(200ms);
  CHECK(ex.running() == 1);
  ex.cancel("c1");
  ex.cancel("not-running");  // harmless
  auto o = rep->wait(5s);
  REQUIRE(o.has_value());
  CHECK(o->status == msg::Status::cancelled);
  CHECK(rep->finishes() == 1);
}

TEST_CASE("suite executor: the same cmd_id twice at once is refused") {
  SuiteExecutor ex(table());
  auto a = std::make_shared<RecordingReporter>();
  auto b = std::make_shared<RecordingReporter>();
  ex.start(cmd("same", "long"), a);
  ex.start(cmd("same", "long"), b);
  auto ob = b->wait(2s);
  REQUIRE(ob.has_value());
  CHECK(ob->status == msg::Status::failed);
  CHECK(ob->detail.find("already running") != std::string::npos);
  ex.cancel("same");
  CHECK(a->wait(5s).has_value());
}

TEST_CASE("suite executor: destroying the executor stops running suites") {
  auto rep = std::make_shared<RecordingReporter>();
  {
    SuiteExecutor ex(table());
    ex.start(cmd("c1", "long"), rep);
    std::this_thread::sleep_for(100ms);
  }
  auto o = rep->wait(1ms);
  REQUIRE(o.has_value());
  CHECK(o->status == msg::Status::cancelled);
}

TEST_CASE("suite executor: runs over the concurrency limit are refused as busy") {
  SuiteExecutor ex(table(), 2);
  auto a = std::make_shared<RecordingReporter>();
  auto b = std::make_shared<RecordingReporter>();
  auto c = std::make_shared<RecordingReporter>();
  ex.start(cmd("a", "long"), a);
  ex.start(cmd("b", "long"), b);
  ex.start(cmd("c", "long"), c);
  auto oc = c->wait(2s);
  REQUIRE(oc.has_value());
  CHECK(oc->status == msg::Status::failed);
  CHECK(oc->detail == "busy: 2 runs already going (at most 2 at once)");
  ex.cancel("a");
  ex.cancel("b");
  CHECK(a->wait(5s).has_value());
  CHECK(b->wait(5s).has_value());
}
