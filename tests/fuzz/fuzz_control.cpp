// libFuzzer target for the control API's request bodies: the real router and
// handlers (control is pure) over the real FleetCore with a memory store, a job
// table and two rigs (rig-0414 connected, rig-0415 known and offline). What the
// fuzzer gives becomes one request: the command request of POST
// /v1/rigs/{rig}/commands, a job body (POST /v1/jobs, POST /v1/commands), a
// drain, a cancel, query strings of the listings and of /v1/events, or one line
// of the control stream (/v1/stream: parsed, and a send enqueued as the stream does).
//
// Input: one byte choosing the request, then the query string up to the first
// '\n', then the body. Besides "no crash, no sanitizer report", it checks that
// every answer is a status the API documents (never 5xx but 503) with a JSON body
// that parses, and that a stream line is either a send or an error with a reason.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "../unit/broker/fleet/fleet_core_fixture.hpp"
#include "control/jobs.hpp"
#include "control/options.hpp"
#include "control/routes.hpp"
#include "control/stream_protocol.hpp"
#include "observe/metrics.hpp"

namespace {

using fleetlink::broker::HttpRequest;
using fleetlink::broker::HttpResponse;
using fleetlink::broker::testing::CoreFixture;
using fleetlink::broker::testing::MemoryStore;

struct Target {
  const char* method;
  const char* path;  // nullptr: a line of the control stream
};

constexpr Target kTargets[] = {
    {"POST", "/v1/rigs/rig-0414/commands"},
    {"POST", "/v1/rigs/rig-0415/commands"},
    {"POST", "/v1/commands"},
    {"POST", "/v1/jobs"},
    {"POST", "/v1/admin/drain"},
    {"POST", "/v1/commands/01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6e/cancel"},
    {"GET", "/v1/commands"},
    {"GET", "/v1/jobs"},
    {"GET", "/v1/events"},
    {"GET", "/v1/rigs"},
    {"POST", "/v1/rigs/rig-0414/reconnect"},
    {nullptr, nullptr},
};
constexpr std::size_t kTargetCount = sizeof(kTargets) / sizeof(kTargets[0]);

void check_answer(const HttpResponse& r) {
  if (r.status >= 500 && r.status != 503) std::abort();
  if (r.status < 200) std::abort();
  if (!r.event_stream && r.content_type == "application/json" && !r.body.empty() &&
      !nlohmann::json::accept(r.body))
    std::abort();
}

// The vectors' cmd_id is a UUIDv7 of this time: the broker takes ids near its clock.
constexpr std::uint64_t kWallMs = 1732704493098ULL + 1000;
constexpr std::string_view kHeldCmdId = "01936d3c-5e2a-7b3c-8d4e-1f2a3b4c5d6e";

// What every input starts from, made once: the store of a broker that was sent
// rig-0414's command before rig-0414 ever said HELLO (held until it does), and
// to which rig-0415 was connected once. Each input gets a fresh FleetCore that
// loads a copy of it, as the broker does when it starts, so nothing one input
// does reaches the next: core, store, registry, transport, clock, job table and
// metrics are all new. (Made per input through enqueue and a second rig's HELLO
// and close, this world cost more than the request itself.)
const MemoryStore::Shared& start_store() {
  static const MemoryStore::Shared shared = [] {
    CoreFixture f({}, {}, kWallMs);
    auto held = CoreFixture::request("rig-0414", "dmesg", {{"lines", "50"}});
    held.cmd_id = std::string(kHeldCmdId);
    held.hold = true;  // rig-0414 not seen yet: held until its HELLO
    (void)f.enqueue_ok(std::move(held));
    fleetlink::broker::RigSession& gone = f.live_rig("rig-0415", "01936d3c-5e2a-7b3c-8d4e-000000000415");
    f.core->on_closed(gone);
    if (!f.recorded(f.core->persist())) std::abort();
    return *f.store->shared();
  }();
  return shared;
}

// rig-0414's HELLO, encoded once (fixed boot_id: an input replays the same way in any process).
const fleetlink::Bytes& live_hello() {
  static const fleetlink::Bytes frame =
      fleetlink::encode(CoreFixture::hello_for("rig-0414", "01936d3c-5e2a-7b3c-8d4e-000000000414"));
  return frame;
}

// An input's world: rig-0414 connected (its held command sent), rig-0415 known and offline.
struct World {
  CoreFixture f{{}, std::make_shared<MemoryStore::Shared>(start_store()), kWallMs};
  World() {
    fleetlink::broker::RigSession& s = f.connect();
    f.send_bytes(s, live_hello());
    const std::optional<fleetlink::broker::Outgoing> w = f.core->next_frame(s);
    if (!w || w->kind != fleetlink::broker::OutboundKind::welcome) std::abort();
  }
};

}  // namespace

// Once, before the first input: the world made from the start store is the one
// the harness made per input before (the command enqueued, rig-0414's HELLO, rig-0415's
// HELLO and close, on one live core), as the API sees it: the same rigs in the same
// states and outboxes, and the same command.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  World loaded;
  CoreFixture built({}, {}, kWallMs);
  auto held = CoreFixture::request("rig-0414", "dmesg", {{"lines", "50"}});
  held.cmd_id = std::string(kHeldCmdId);
  held.hold = true;
  (void)built.enqueue_ok(std::move(held));
  (void)built.live_rig("rig-0414", "01936d3c-5e2a-7b3c-8d4e-000000000414");
  built.core->on_closed(built.live_rig("rig-0415", "01936d3c-5e2a-7b3c-8d4e-000000000415"));

  const auto a = loaded.f.core->rigs();
  const auto b = built.core->rigs();
  if (a.size() != 2 || a.size() != b.size()) std::abort();
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].rig_id != b[i].rig_id || a[i].state != b[i].state || a[i].connected != b[i].connected ||
        a[i].boot_id != b[i].boot_id || a[i].outbox_depth != b[i].outbox_depth || a[i].unsent != b[i].unsent ||
        a[i].held != b[i].held || a[i].kinds != b[i].kinds || a[i].labels != b[i].labels)
      std::abort();
  const auto ca = loaded.f.core->command(kHeldCmdId);
  const auto cb = built.core->command(kHeldCmdId);
  if (!ca || !cb || ca->state != cb->state || ca->rig_id != cb->rig_id || ca->kind != cb->kind ||
      ca->args != cb->args)
    std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const Target& target = kTargets[data[0] % kTargetCount];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::size_t nl = rest.find('\n');
  const std::string_view query = nl == std::string_view::npos ? std::string_view{} : rest.substr(0, nl);
  const std::string_view body = nl == std::string_view::npos ? rest : rest.substr(nl + 1);

  if (target.method == nullptr) {
    fleetlink::broker::stream::Request line = fleetlink::broker::stream::parse_line(body);
    if (auto* send = std::get_if<fleetlink::broker::stream::SendRequest>(&line)) {
      if (send->ref.size() > fleetlink::broker::stream::kMaxRefBytes) std::abort();
      World w;  // only a send reaches the fleet
      (void)w.f.core->enqueue(std::move(send->request));
      (void)w.f.core->persist();
    } else {
      const auto& error = std::get<fleetlink::broker::stream::LineError>(line);
      if (error.error.empty() || error.detail.empty()) std::abort();
      if (!nlohmann::json::accept(fleetlink::broker::stream::error_line(error))) std::abort();
    }
    return 0;
  }

  World w;
  CoreFixture& f = w.f;
  fleetlink::broker::BrokerMetrics metrics;
  fleetlink::broker::JobTable jobs(f.store.get());
  jobs.set_clock([&f] { return f.clock.wall_ms(); });
  fleetlink::broker::ControlApiOptions options;
  options.store = f.store.get();
  options.jobs = &jobs;

  HttpRequest request;
  request.method = target.method;
  request.path = target.path;
  request.query = std::string(query);
  request.body = std::string(body);
  request.peer = "127.0.0.1";
  HttpResponse r = fleetlink::broker::handle_control_request(request, *f.core, metrics, options, f.clock.wall_ms());
  check_answer(r);
  if (r.after_record != 0) {
    f.core->when_recorded(r.after_record, [&](const fleetlink::Expected<void>& kept) {
      if (!kept && r.if_unrecorded) check_answer(r.if_unrecorded(kept.error()));
    });
  }
  if (r.after_sent) r.after_sent(*f.core);
  return 0;
}
