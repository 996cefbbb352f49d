// Output accounting in the command table: streamed bytes, offset gaps, and the
// RESULT's dropped_bytes covering gaps the rig did not count (lost in transit).
#include <doctest/doctest.h>

#include <limits>

#include "fleet/command_table.hpp"
#include "fleet/output_accounting.hpp"

using namespace fleetlink;
using namespace fleetlink::broker;

namespace {
msg::OutputChunk chunk(std::uint64_t offset, std::size_t n, char fill = 'x') {
  msg::OutputChunk c;
  c.cmd_id = "c";
  c.offset = offset;
  c.data.assign(n, static_cast<std::uint8_t>(fill));
  return c;
}
}  // namespace

TEST_CASE("output accounting: contiguous chunks stream every byte, no gap") {
  CommandView v;
  CHECK(account_output(v, chunk(0, 100)) == 0);
  CHECK(account_output(v, chunk(100, 50)) == 0);
  CHECK(v.streamed_bytes == 150);
  CHECK(v.stream_next_offset == 150);
  CHECK(v.stream_gap_bytes == 0);
  CHECK(v.streamed_output.size() == 150);
}

TEST_CASE("output accounting: a chunk past the end shows a gap") {
  CommandView v;
  account_output(v, chunk(0, 100));
  CHECK(account_output(v, chunk(300, 10)) == 200);
  CHECK(v.streamed_bytes == 110);
  CHECK(v.stream_gap_bytes == 200);
  CHECK(v.stream_next_offset == 310);
}

TEST_CASE("output accounting: bytes seen twice are not counted twice") {
  CommandView v;
  account_output(v, chunk(0, 100, 'a'));
  CHECK(account_output(v, chunk(50, 100, 'b')) == 0);  // overlaps 50 bytes
  CHECK(v.streamed_bytes == 150);
  CHECK(v.streamed_output == std::string(100, 'a') + std::string(50, 'b'));
  CHECK(account_output(v, chunk(0, 100)) == 0);  // all old
  CHECK(v.streamed_bytes == 150);
}

TEST_CASE("output accounting: an empty end-of-stream chunk counts the tail gap, once") {
  CommandView v;
  account_output(v, chunk(0, 100));
  CHECK(account_output(v, chunk(1000, 0)) == 900);
  CHECK(account_output(v, chunk(1000, 0)) == 0);  // sent again with a spooled result
  CHECK(v.streamed_bytes == 100);
  CHECK(v.stream_gap_bytes == 900);
}

TEST_CASE("output accounting: the result covers every gap, counting none twice") {
  CommandView v;
  account_output(v, chunk(0, 100));
  account_output(v, chunk(400, 100));   // 300 missing
  account_output(v, chunk(1000, 0));    // end marker: 500 more missing

  SUBCASE("the rig counted them all (dropped on the rig): nothing added") {
    msg::Result r;
    r.dropped_bytes = 800;
    CHECK(reconcile_result(v, r) == 0);
    CHECK(r.dropped_bytes == 800);
    CHECK_FALSE(r.truncated);  // the result's own flag is left as the rig set it
  }
  SUBCASE("some were lost in transit: the difference is added, truncated set") {
    msg::Result r;
    r.dropped_bytes = 600;
    CHECK(reconcile_result(v, r) == 200);
    CHECK(r.dropped_bytes == 800);
    CHECK(r.truncated);
    CHECK(v.streamed_bytes + r.dropped_bytes == 1000);
  }
  SUBCASE("the rig dropped more than the gaps show (tail without end marker): kept") {
    msg::Result r;
    r.dropped_bytes = 5000;
    CHECK(reconcile_result(v, r) == 0);
    CHECK(r.dropped_bytes == 5000);
  }
}

TEST_CASE("output accounting: offsets near the top of uint64 saturate, never wrap") {
  CommandView v;
  account_output(v, chunk(0, 10));
  const std::uint64_t top = std::numeric_limits<std::uint64_t>::max();
  account_output(v, chunk(top - 2, 10));
  CHECK(v.stream_next_offset == top);
  CHECK(v.stream_gap_bytes == top - 10 - 10);
  account_output(v, chunk(top, 0));
  CHECK(v.stream_gap_bytes == top - 10 - 10);
}
