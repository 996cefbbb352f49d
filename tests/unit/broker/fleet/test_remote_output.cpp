// Output heard from other brokers, laid over a command's stored record (pure).
#include <doctest/doctest.h>

#include "fleet/remote_output.hpp"

using namespace fleetlink::broker;

namespace {

FleetEvent chunk(std::string cmd, std::uint64_t offset, std::string data) {
  return FleetEvent{EventType::command_output, "rig-1", std::move(cmd), std::move(data), 1, offset};
}

CommandView record(std::string cmd, std::string streamed, std::uint64_t next) {
  CommandView v;
  v.cmd_id = std::move(cmd);
  v.streamed_output = std::move(streamed);
  v.stream_next_offset = next;
  v.streamed_bytes = next;
  return v;
}

}  // namespace

TEST_CASE("remote output: what was heard reaches further than the stored record, joined where they meet") {
  RemoteOutputs heard;
  heard.add(chunk("c1", 0, "one\n"));
  heard.add(chunk("c1", 4, "two\n"));
  heard.add(chunk("c1", 4, "two\n"));  // sent again: once
  heard.add(chunk("c1", 6, "o\nthree\n"));
  CommandView v = record("c1", "one\n", 4);  // the owner wrote its record after the first chunk
  heard.overlay(v);
  CHECK(v.streamed_output == "one\ntwo\nthree\n");
  CHECK(v.stream_next_offset == 14);
  CHECK(v.streamed_bytes == 14);
  // A record that is further along (its RESULT is in) is left alone.
  CommandView done = record("c1", "one\ntwo\nthree\nfour\n", 19);
  heard.overlay(done);
  CHECK(done.streamed_output == "one\ntwo\nthree\nfour\n");
  // Another command: nothing heard, nothing changed.
  CommandView other = record("c2", "x", 1);
  heard.overlay(other);
  CHECK(other.streamed_output == "x");
}

TEST_CASE("remote output: heard after a gap, the tail starts again there; bounded per command and in count") {
  RemoteOutputs heard(2, 8);
  heard.add(chunk("c1", 100, "abc"));
  CommandView v = record("c1", "", 0);
  heard.overlay(v);
  CHECK(v.streamed_output == "abc");
  CHECK(v.stream_next_offset == 103);
  heard.add(chunk("c1", 103, "defghijk"));  // over 8 bytes: the last 8 kept
  CommandView w = record("c1", "", 0);
  heard.overlay(w);
  CHECK(w.streamed_output == "defghijk");
  CHECK(w.stream_next_offset == 111);
  heard.add(chunk("c2", 0, "x"));
  heard.add(chunk("c3", 0, "y"));  // a third command: the first heard is forgotten
  CHECK(heard.size() == 2);
  CommandView gone = record("c1", "", 0);
  heard.overlay(gone);
  CHECK(gone.streamed_output.empty());
  heard.forget("c2");
  CHECK(heard.size() == 1);
  // Other event types are not output.
  heard.add(FleetEvent{EventType::command_done, "rig-1", "c9", "succeeded", 1, 0});
  CHECK(heard.size() == 1);
}

TEST_CASE("remote output: a stored record that counts bytes without their tail gets the tail heard") {
  RemoteOutputs heard;
  heard.add(chunk("c1", 0, "step 1\n"));
  CommandView v = record("c1", "", 7);  // the owner's record: 7 bytes streamed, the tail not stored
  heard.overlay(v);
  CHECK(v.streamed_output == "step 1\n");
  CHECK(v.stream_next_offset == 7);
  CHECK(v.streamed_bytes == 7);
}
