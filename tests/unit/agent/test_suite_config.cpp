// The suites file: the good shape, and every way it can be wrong, each error
// naming the file and the key.
#include <doctest/doctest.h>

#include "suite_config.hpp"
#include "test_process_support.hpp"

using namespace fleetlink;
using namespace fleetlink::agent;

namespace {

std::string error_of(const std::string& json) {
  auto r = parse_suites(json, "suites.json");
  REQUIRE_FALSE(r.has_value());
  return r.error().detail;
}

}  // namespace

TEST_CASE("suites file: a full suite") {
  auto r = parse_suites(R"({"suites": {"7": {"argv": ["/usr/bin/run-regression", "--suite", "7"],
      "cwd": "/srv/rig", "env": {"K": "V"}, "timeout_s": 3600, "kill_grace_s": 10,
      "user": "root"}}})",
                        "suites.json");
  REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().detail));
  REQUIRE(r->size() == 1);
  const SuiteSpec& s = r->at("7");
  CHECK(s.id == "7");
  CHECK(s.argv == std::vector<std::string>{"/usr/bin/run-regression", "--suite", "7"});
  CHECK(s.cwd == "/srv/rig");
  CHECK(s.env == StringMap{{"K", "V"}});
  CHECK(s.timeout == std::chrono::seconds(3600));
  CHECK(s.kill_grace == std::chrono::seconds(10));
  CHECK(s.user == "root");
}

TEST_CASE("suites file: artifacts globs and the output log") {
  auto t = parse_suites(R"({"suites": {"7": {"argv": ["a"], "artifacts": ["out/*.xml", "core*"], "output_artifact": false},
                                        "8": {"argv": ["b"]}}})",
                        "suites.json", {false});
  REQUIRE(t);
  CHECK(t->at("7").artifacts == std::vector<std::string>{"out/*.xml", "core*"});
  CHECK_FALSE(t->at("7").output_artifact);
  CHECK(t->at("8").artifacts.empty());
  CHECK(t->at("8").output_artifact);
}

TEST_CASE("suites file: defaults and several suites") {
  auto r = parse_suites(R"({"suites": {"a": {"argv": ["x"]}, "b-2.x_y": {"argv": ["y", ""]}}})",
                        "f");
  REQUIRE(r.has_value());
  CHECK(r->size() == 2);
  CHECK(r->at("a").timeout == std::chrono::seconds(3600));
  CHECK(r->at("a").kill_grace == std::chrono::seconds(10));
  CHECK(r->at("a").cwd.empty());
  CHECK(r->at("a").user.empty());
  CHECK(parse_suites(R"({"suites": {}})", "f").has_value());
}

TEST_CASE("suites file: errors name the file and the key") {
  CHECK(error_of(R"({"suites": {"7": {"argv": []}}})") ==
        "suites.json: suites.7.argv: must be a non-empty array of strings");
  CHECK(error_of(R"({"suites": {"7": {"argv": "run"}}})") ==
        "suites.json: suites.7.argv: must be a non-empty array of strings");
  CHECK(error_of(R"({"suites": {"7": {"argv": ["a", 1]}}})") ==
        "suites.json: suites.7.argv: must be a non-empty array of strings");
  CHECK(error_of(R"({"suites": {"7": {"argv": [""]}}})") ==
        "suites.json: suites.7.argv: must be a non-empty array of strings");
  CHECK(error_of(R"({"suites": {"7": {"cwd": "/x"}}})") ==
        "suites.json: suites.7.argv: missing (a non-empty array of strings)");
  CHECK(error_of(R"({"suites": {"7": {"argv": ["a"], "cwd": "rel/dir"}}})") ==
        "suites.json: suites.7.cwd: must be an absolute path");
  CHECK(error_of(R"({"suites": {"7": {"argv": ["a"], "cwd": 3}}})") ==
        "suites.json: suites.7.cwd: must be an absolute path");
  CHECK(error_of(R"({"suites": {"7": {"argv": ["a"], "env": ["K=V"]}}})") ==
        "suites.json: suites.7.env: must be an object of string values");
  CHECK(error_of(R"({"suites": {"7": {"argv": ["a"], "env": {"K": 1}}}})") ==
        "suites.json: suites.7.env.K: must be a string");
  CHECK(error_of(R"({"suites": {"7": {"argv": ["a"], "env": {"A=B": "x"}}}})") ==
        "suites.json: suites.7.env.A=B: not a valid environment variable name");
  CHECK(error_of(R"({"suites": {"7": {"argv": ["a"], "timeout_s": -1}}})") ==
        "suites.json: suites.7.timeout_s: must be an integer number of seconds between 0 and 604800");
  CHECK(error_of(R"({"suites": {"7": {"argv": ["a"], "timeout_s": "60"}}})") ==
        "suites.json: suites.7.timeout_s: must be an integer number of seconds between 0 and 604800");
  CHECK(error_of(R"({"suites": {"7": {"argv": ["a"], "timeout_s": 1.5}}})") ==
        "suites.json: suites.7.timeout_s: must be an integer number of seconds between 0 and 604800");
  CHECK(error_of(R"({"suites": {"7": {"argv": ["a"], "kill_grace_s": 99999999}}})") ==
        "suites.json: suites.7.kill_grace_s: must be an integer number of seconds between 0 and 604800");
  CHECK(error_of(R"({"suites": {"7": {"argv": ["a"], "user": ""}}})") ==
        "suites.json: suites.7.user: must be a non-empty user name");
  CHECK(error_of(R"({"suites": {"7": {"argv": ["a"], "user": "fleetlink-no-such-user"}}})") ==
        "suites.json: suites.7.user: unknown user 'fleetlink-no-such-user'");
  CHECK(error_of(R"({"suites": {"7": {"argv": ["a"], "timeout": 5}}})") ==
        "suites.json: suites.7.timeout: unknown key (known: argv, cwd, env, timeout_s, kill_grace_s, user, artifacts, "
        "output_artifact)");
  CHECK(error_of(R"({"suites": {"7": {"argv": ["a"], "artifacts": "out/*.xml"}}})") ==
        "suites.json: suites.7.artifacts: must be an array of glob patterns");
  CHECK(error_of(R"({"suites": {"7": {"argv": ["a"], "artifacts": ["ok", ""]}}})") ==
        "suites.json: suites.7.artifacts: must be an array of non-empty glob patterns");
  CHECK(error_of(R"({"suites": {"7": {"argv": ["a"], "output_artifact": "yes"}}})") ==
        "suites.json: suites.7.output_artifact: must be true or false");
  CHECK(error_of(R"({"suites": {"7": ["a"]}})") ==
        "suites.json: suites.7: must be an object with at least \"argv\"");
  CHECK(error_of(R"({"suites": {"a b": {"argv": ["a"]}}})") ==
        "suites.json: suites.a b: suite id must be 1-128 characters of A-Z a-z 0-9 . _ -");
  CHECK(error_of(R"({"suites": []})") == "suites.json: suites: must be an object of suite id -> suite");
  CHECK(error_of(R"({})") == "suites.json: suites: missing (an object of suite id -> suite)");
  CHECK(error_of(R"({"suites": {}, "extra": 1})") ==
        "suites.json: extra: unknown key (expected only \"suites\")");
  CHECK(error_of(R"([1])") == "suites.json: must be a JSON object with a \"suites\" object");
}

TEST_CASE("suites file: unknown users are allowed when not checked") {
  SuiteLoadOptions opts;
  opts.check_users = false;
  CHECK(parse_suites(R"({"suites": {"7": {"argv": ["a"], "user": "fleetlink-no-such-user"}}})", "f",
                     opts)
            .has_value());
}

TEST_CASE("suites file: every error is reported, one per line") {
  auto e = error_of(R"({"suites": {"1": {"argv": []}, "2": {"argv": ["a"], "cwd": "x"}}})");
  CHECK(e ==
        "suites.json: suites.1.argv: must be a non-empty array of strings\n"
        "suites.json: suites.2.cwd: must be an absolute path");
}

TEST_CASE("suites file: invalid JSON and unreadable files") {
  auto e = error_of(R"({"suites": {)");
  CHECK(e.rfind("suites.json: invalid JSON: ", 0) == 0);
  auto missing = load_suites_file("/nonexistent/suites.json");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().detail.rfind("/nonexistent/suites.json: cannot open", 0) == 0);

  fleetlink::agent::testing::ScratchDir dir;
  auto path = dir.write("suites.json", R"({"suites": {"x": {"argv": ["/bin/true"]}}})");
  auto ok = load_suites_file(path);
  REQUIRE(ok.has_value());
  CHECK(ok->count("x") == 1);
  auto bad = dir.write("bad.json", R"({"suites": {"x": {"argv": 5}}})");
  auto err = load_suites_file(bad);
  REQUIRE_FALSE(err.has_value());
  CHECK(err.error().detail == bad + ": suites.x.argv: must be a non-empty array of strings");
}
