// Prometheus text exposition of BrokerMetrics.
#include <doctest/doctest.h>

#include <sstream>

#include "common/build_info.hpp"
#include "fleetlink/version.hpp"
#include "observe/broker_observer.hpp"
#include "observe/metrics.hpp"

using fleetlink::broker::BrokerMetrics;
using fleetlink::broker::BrokerObserver;
using fleetlink::broker::Histogram;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l == line) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("metrics: histogram buckets are upper-inclusive with +Inf last") {
  Histogram h({1, 5, 10});
  h.observe(0.5);
  h.observe(1);    // le=1
  h.observe(7);
  h.observe(100);  // +Inf
  REQUIRE(h.counts().size() == 4);
  CHECK(h.counts() == std::vector<std::uint64_t>{2, 0, 1, 1});
  CHECK(h.count() == 4);
  CHECK(h.sum() == doctest::Approx(108.5));
}

TEST_CASE("metrics: render has HELP/TYPE, prefixed names, labelled hellos and closes") {
  BrokerMetrics m;
  m.connections_open = 3;
  m.hellos["accepted"] = 5;
  m.hellos["identity_mismatch"] = 1;
  m.closes[4409] = 2;
  m.closes[4002] = 1;
  m.commands_enqueued = 9;
  m.mesh_notes["probe"] = 2;
  m.rigs_taken_over = 4;
  m.outbox_depth.observe(0);
  m.outbox_depth.observe(3);
  m.ack_latency_seconds.observe(0.002);
  const std::string text = m.render_prometheus({{"process_open_fds", 12}});

  CHECK(has_line(text, "# TYPE fleetlink_broker_connections_open gauge"));
  CHECK(has_line(text, "fleetlink_broker_connections_open 3"));
  CHECK(has_line(text, "# TYPE fleetlink_broker_hellos_total counter"));
  CHECK(has_line(text, "fleetlink_broker_hellos_total{outcome=\"accepted\"} 5"));
  CHECK(has_line(text, "fleetlink_broker_hellos_total{outcome=\"malformed\"} 0"));
  CHECK(has_line(text, "fleetlink_broker_closes_total{code=\"4409\",name=\"duplicate_connection\"} 2"));
  CHECK(has_line(text, "fleetlink_broker_commands_enqueued_total 9"));
  CHECK(has_line(text, "fleetlink_broker_mesh_notes_total{kind=\"probe\"} 2"));
  CHECK(has_line(text, "fleetlink_broker_rigs_taken_over_total 4"));
  CHECK(has_line(text, "fleetlink_broker_registry_unavailable_total 0"));
  CHECK(has_line(text, "# TYPE fleetlink_broker_outbox_depth histogram"));
  CHECK(has_line(text, "fleetlink_broker_outbox_depth_bucket{le=\"0\"} 1"));
  CHECK(has_line(text, "fleetlink_broker_outbox_depth_bucket{le=\"4\"} 2"));
  CHECK(has_line(text, "fleetlink_broker_outbox_depth_bucket{le=\"+Inf\"} 2"));
  CHECK(has_line(text, "fleetlink_broker_outbox_depth_sum 3"));
  CHECK(has_line(text, "fleetlink_broker_outbox_depth_count 2"));
  CHECK(has_line(text, "fleetlink_broker_ack_latency_seconds_bucket{le=\"0.0025\"} 1"));
  CHECK(has_line(text, "fleetlink_broker_ack_latency_seconds_count 1"));
  CHECK(has_line(text, "# TYPE fleetlink_broker_process_open_fds gauge"));
  CHECK(has_line(text, "fleetlink_broker_process_open_fds 12"));

  // Every sample line belongs to a metric announced by a TYPE line, all prefixed
  // (but fleetlink_build_info, named for every fleetlink program).
  std::istringstream in(text);
  std::string current;
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("# TYPE ", 0) == 0) {
      current = l.substr(7, l.find(' ', 7) - 7);
      continue;
    }
    if (l.rfind("#", 0) == 0) continue;
    CHECK_MESSAGE((l.rfind("fleetlink_broker_", 0) == 0 || l.rfind("fleetlink_build_info{", 0) == 0), l);
    CHECK_MESSAGE(l.rfind(current, 0) == 0, l);
  }
  CHECK(text.back() == '\n');
}

TEST_CASE("metrics: cumulative buckets never decrease") {
  BrokerMetrics m;
  for (int i = 0; i < 500; ++i) m.ack_latency_seconds.observe(i * 0.01);
  const std::string text = m.render_prometheus();
  std::istringstream in(text);
  long previous = -1;
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("fleetlink_broker_ack_latency_seconds_bucket", 0) != 0) continue;
    const long v = std::stol(l.substr(l.rfind(' ') + 1));
    CHECK(v >= previous);
    previous = v;
  }
  CHECK(previous == 500);
}

TEST_CASE("metrics: fleetlink_build_info names the version and, when the build knew it, the commit") {
  const std::string text = BrokerMetrics{}.render_prometheus();
  CHECK(has_line(text, "# TYPE fleetlink_build_info gauge"));
  // The project version (CMake's project(VERSION)), the one --version prints.
  CHECK(fleetlink::build_info::version() == FLEETLINK_VERSION);
  std::string labels = "program=\"fleetlink-broker\",version=\"" FLEETLINK_VERSION "\"";
  if (!fleetlink::build_info::commit().empty())
    labels += ",commit=\"" + std::string(fleetlink::build_info::commit()) + "\"";
  labels += ",protocol=\"1\"";
  CHECK(has_line(text, "fleetlink_build_info{" + labels + "} 1"));
}

TEST_CASE("metrics: reloads by result, the last good one's time, whether the last one failed, rigs distrusted") {
  BrokerMetrics m;
  BrokerObserver observer(m, BrokerObserver::Limits{});
  observer.loaded(1'800'000'000'500ULL);  // start-up
  std::string text = m.render_prometheus();
  CHECK(has_line(text, "# TYPE fleetlink_broker_reloads_total counter"));
  CHECK(has_line(text, "fleetlink_broker_reloads_total{result=\"ok\"} 0"));
  CHECK(has_line(text, "fleetlink_broker_reloads_total{result=\"failed\"} 0"));
  CHECK(has_line(text, "fleetlink_broker_reload_last_success_timestamp_seconds 1800000000"));
  CHECK(has_line(text, "fleetlink_broker_reload_last_successful 1"));

  observer.reload_failed("SIGHUP", "--key 'k' is not the private key of --cert 'c'");
  text = m.render_prometheus();
  CHECK(has_line(text, "fleetlink_broker_reloads_total{result=\"failed\"} 1"));
  CHECK(has_line(text, "fleetlink_broker_reload_last_successful 0"));
  CHECK(has_line(text, "fleetlink_broker_reload_last_success_timestamp_seconds 1800000000"));  // unchanged

  observer.reload_succeeded("SIGHUP", {"CRLs: ..."}, {}, 1'800'000'060'000ULL);
  text = m.render_prometheus();
  CHECK(has_line(text, "fleetlink_broker_reloads_total{result=\"ok\"} 1"));
  CHECK(has_line(text, "fleetlink_broker_reload_last_successful 1"));
  CHECK(has_line(text, "fleetlink_broker_reload_last_success_timestamp_seconds 1800000060"));
  CHECK(has_line(text, "fleetlink_broker_rigs_distrusted_total 0"));
}
