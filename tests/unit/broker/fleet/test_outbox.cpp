#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "fleet/command_table.hpp"
#include "fleet/outbox.hpp"

using namespace fleetlink::broker;

TEST_CASE("outbox: seq assigned at enqueue from 1, one per command") {
  Outbox box;
  std::uint64_t seq = 0;
  CHECK_FALSE(box.enqueue("a", 1000, 4, &seq));
  CHECK(seq == 1);
  CHECK_FALSE(box.enqueue("b", 1000, 4, &seq));
  CHECK(seq == 2);
  CHECK(box.next_seq() == 3);
  CHECK(box.size() == 2);
  CHECK(box.unsent() == 2);
}

TEST_CASE("outbox: writes in order, ack settles, unacked stays visible") {
  Outbox box;
  std::uint64_t seq = 0;
  for (int i = 0; i < 3; ++i) box.enqueue("c" + std::to_string(i), 1000, 8, &seq);
  const OutboxEntry* e = box.next_unsent();
  REQUIRE(e);
  CHECK(e->seq == 1);
  box.mark_sent(1, 1100);
  CHECK(box.next_unsent()->seq == 2);
  CHECK(box.unsent() == 2);
  auto acked = box.settle(1, "c0");
  REQUIRE(acked);
  CHECK(acked->sent_ms == 1100);
  box.record_ack(1, 1200);
  CHECK(box.last_ack_seq() == 1);
  CHECK(box.last_ack_at_ms().value() == 1200);
  CHECK(box.size() == 2);
  // Wrong cmd_id for a seq is not an ACK of it.
  CHECK_FALSE(box.settle(2, "nope"));
  CHECK(box.settle_cmd("c2"));
  CHECK(box.size() == 1);
  CHECK(box.next_unsent()->seq == 2);
}

TEST_CASE("outbox: full gives the exact operator message, nothing queued silently") {
  Outbox box;
  std::uint64_t seq = 0;
  for (int i = 0; i < 128; ++i) REQUIRE_FALSE(box.enqueue("c" + std::to_string(i), 1'000'000, 128, &seq));
  auto full = box.enqueue("late", 1'047'900, 128, &seq);
  REQUIRE(full);
  CHECK(full->detail == "outbox full (128/128), oldest queued cmd age 47s");
  CHECK(box.size() == 128);
  CHECK(box.next_seq() == 129);  // a refused command takes no seq
}

TEST_CASE("outbox: on disconnect everything unacked is handed back (lost)") {
  Outbox box;
  std::uint64_t seq = 0;
  box.enqueue("a", 1, 4, &seq);
  box.enqueue("b", 1, 4, &seq);
  box.mark_sent(1, 2);
  auto lost = box.take_all();
  CHECK(lost.size() == 2);
  CHECK(box.size() == 0);
  CHECK(box.next_unsent() == nullptr);
}

TEST_CASE("outbox: an idle outbox holds no buffer") {
  Outbox box;
  std::uint64_t seq = 0;
  box.enqueue("a", 1, 4, &seq);
  box.settle(1, "a");
  CHECK(box.entries().capacity() == 0);
}

TEST_CASE("command table: bounded, evicts oldest finished, keeps in-flight") {
  CommandTable t(3);
  auto add = [&](const std::string& id, CommandState s) {
    CommandView v;
    v.cmd_id = id;
    v.state = s;
    t.insert(v);
  };
  add("inflight", CommandState::sent);
  add("done1", CommandState::succeeded);
  add("done2", CommandState::succeeded);
  add("done3", CommandState::failed);
  CHECK(t.size() == 3);
  CHECK(t.find("inflight"));
  CHECK_FALSE(t.find("done1"));
  CHECK(t.find("done3"));
}

TEST_CASE("command table: evicts in finish order, never a command in flight") {
  CommandTable t(2);
  auto add = [&](const std::string& id) {
    CommandView v;
    v.cmd_id = id;
    v.state = CommandState::sent;
    t.insert(v);
  };
  add("a");
  add("b");
  add("c");
  add("d");
  CHECK(t.size() == 4);  // all in flight: over capacity, nothing evictable
  t.finish(*t.find("c"), CommandState::succeeded);
  t.finish(*t.find("a"), CommandState::failed);
  CHECK(t.find("c")->state == CommandState::succeeded);  // finish never evicts
  add("e");  // 5 > 2: c then a go (finish order); b, d, e are in flight
  CHECK_FALSE(t.find("c"));
  CHECK_FALSE(t.find("a"));
  CHECK(t.find("b"));
  CHECK(t.find("d"));
  CHECK(t.find("e"));
}

TEST_CASE("command table: each rig's open commands in order, and the idempotency keys") {
  CommandTable t(10);
  auto add = [&](const std::string& id, const std::string& rig, const std::string& key = {}) {
    CommandView v;
    v.cmd_id = id;
    v.rig_id = rig;
    v.idempotency_key = key;
    return t.insert(v);
  };
  add("a", "rig-1", "k-a");
  add("b", "rig-2");
  add("c", "rig-1");
  REQUIRE(t.open_of("rig-1").size() == 2);
  CHECK(t.open_of("rig-1")[0]->cmd_id == "a");
  CHECK(t.open_of("rig-1")[1]->cmd_id == "c");
  CHECK(t.open_of("rig-3").empty());
  CHECK(t.open_count() == 3);
  CHECK(t.find_by_key("k-a") == t.find("a"));
  t.finish(*t.find("a"), CommandState::succeeded);
  REQUIRE(t.open_of("rig-1").size() == 1);
  CHECK(t.open_of("rig-1")[0]->cmd_id == "c");
  CHECK(t.find_by_key("k-a") == t.find("a"));  // finished, still known by its key until evicted
  t.erase("c");
  CHECK(t.open_of("rig-1").empty());
  CHECK(t.open_count() == 1);
}

TEST_CASE("command table: an id inserted again replaces its entry and its indexes") {
  CommandTable t(10);
  CommandView v;
  v.cmd_id = "a";
  v.rig_id = "rig-1";
  v.idempotency_key = "k-1";
  v.attempts = 1;
  t.insert(v);
  v.rig_id = "rig-2";  // read again from the store, say, with what another broker wrote since
  v.idempotency_key = "k-2";
  v.attempts = 2;
  CommandView* placed = t.insert(v);
  REQUIRE(placed != nullptr);
  CHECK(placed == t.find("a"));
  CHECK(placed->attempts == 2);
  CHECK(t.size() == 1);
  CHECK(t.open_count() == 1);
  CHECK(t.open_of("rig-1").empty());
  REQUIRE(t.open_of("rig-2").size() == 1);
  CHECK(t.open_of("rig-2")[0] == placed);
  CHECK(t.find_by_key("k-1") == nullptr);
  CHECK(t.find_by_key("k-2") == placed);
}

TEST_CASE("command table: a fleet-wide fan-out stays linear and bounded") {
  // More commands in flight than the capacity, then all finish: the table shrinks
  // back to its capacity and its bookkeeping queues stay bounded.
  constexpr std::size_t kCap = 100;
  CommandTable t(kCap);
  for (int round = 0; round < 5; ++round) {
    std::vector<std::string> ids;
    for (int i = 0; i < 5000; ++i) {
      CommandView v;
      v.cmd_id = "r" + std::to_string(round) + "-" + std::to_string(i);
      v.state = CommandState::sent;
      ids.push_back(v.cmd_id);
      t.insert(v);
    }
    CHECK(t.size() >= 5000);
    for (const std::string& id : ids) t.finish(*t.find(id), CommandState::succeeded);
  }
  CommandView last;
  last.cmd_id = "last";
  t.insert(last);
  CHECK(t.size() == kCap);
  CHECK(t.find("last"));
}

TEST_CASE("command table: ids up to 40 bytes are kept inline; longer ones are not stored") {
  CommandTable t(10);
  CommandView v;
  v.cmd_id = "01a00000-0000-7000-8000-000000000001";  // a UUIDv7, as the broker makes them
  v.state = CommandState::sent;
  CommandView* placed = t.insert(v);
  REQUIRE(placed != nullptr);
  CHECK(t.find(v.cmd_id) == placed);
  CHECK(t.find("01a00000-0000-7000-8000-00000000000") == nullptr);  // a prefix is another id
  CommandView too_long;
  too_long.cmd_id = std::string(41, 'x');
  CHECK(t.insert(too_long) == nullptr);
  CHECK(t.find(std::string(41, 'x')) == nullptr);
  CHECK(t.size() == 1);
}

TEST_CASE("command table: the open-rig walk visits only rigs with open commands") {
  CommandTable t(10);
  auto add = [&](const std::string& id, const std::string& rig) {
    CommandView v;
    v.cmd_id = id;
    v.rig_id = rig;
    v.state = CommandState::sent;
    return t.insert(v);
  };
  auto visited = [&] {
    std::map<std::string, std::size_t> seen;
    t.for_each_open_rig([&](std::string_view rig, const std::vector<CommandView*>& open) {
      CHECK_FALSE(open.empty());
      CHECK(seen.emplace(std::string(rig), open.size()).second);  // each rig once
    });
    return seen;
  };
  add("a", "rig-1");
  add("b", "rig-2");
  add("c", "rig-3");
  add("d", "rig-1");
  CHECK(visited() == std::map<std::string, std::size_t>{{"rig-1", 2}, {"rig-2", 1}, {"rig-3", 1}});
  t.finish(*t.find("b"), CommandState::succeeded);  // rig-2 empties: no longer visited
  CHECK(visited() == std::map<std::string, std::size_t>{{"rig-1", 2}, {"rig-3", 1}});
  t.finish(*t.find("a"), CommandState::succeeded);
  t.erase("c");
  CHECK(visited() == std::map<std::string, std::size_t>{{"rig-1", 1}});
  add("e", "rig-2");  // its emptied list fills again: visited again
  add("f", "rig-3");
  t.finish(*t.find("d"), CommandState::failed);
  CHECK(visited() == std::map<std::string, std::size_t>{{"rig-2", 1}, {"rig-3", 1}});
  t.finish(*t.find("e"), CommandState::succeeded);
  t.finish(*t.find("f"), CommandState::succeeded);
  CHECK(visited().empty());
  CHECK(t.open_count() == 0);
}
