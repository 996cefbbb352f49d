// The store's records against a real file: writes and the rank guard, results,
// idempotency keys, every read (with this store's pending writes laid over the
// file), rigs, jobs, load and prune.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>

#include "store/record_codec.hpp"
#include "store_test_support.hpp"

using namespace store_test;

namespace {

constexpr std::uint64_t kT0 = 1'733'000'000'000;

CommandView finished(const std::string& id, const std::string& rig, CommandState s, const std::string& output) {
  CommandView v = command(id, rig, s);
  v.result = result_of(id, output);
  v.streamed_output = "tail:" + output;
  v.detail = "done";
  return v;
}

}  // namespace

TEST_CASE("commands: nothing is written before commit(); after it, every field is there") {
  TempDir tmp;
  const std::string id = id_at(kT0);
  {
    auto store = open_store(tmp.str());
    CHECK_FALSE(store->pending());
    CHECK(store->commit());  // nothing to do is a success too
    CommandView v = finished(id, "rig-1", CommandState::failed, "boom");
    v.idempotency_key = "k1";
    v.job_id = "job-1";
    v.args = {{"a", "1"}, {"b", "2"}};
    v.acked_boot_id = "boot-1";
    v.running_at_ms = kT0 + 5;
    v.cancel_requested_at_ms = kT0 + 6;
    v.duplicate = true;
    v.nack = msg::Nack{3, id, msg::NackReason::busy, "busy", 0};
    v.streamed_bytes = 10;
    v.stream_next_offset = 10;
    store->put_command(v, true);
    CHECK(store->pending());
    {
      RawDb raw(tmp.db());
      CHECK(raw.integer("SELECT count(*) FROM commands") == 0);
    }
    REQUIRE(store->commit());
    CHECK_FALSE(store->pending());
    CHECK(store->stats().commits == 1);
    CHECK(store->stats().rows_written == 1);
  }
  auto store = open_store(tmp.str());
  auto v = find(*store, id);
  REQUIRE(v);
  CHECK(v->recorded);
  CHECK(v->state == CommandState::failed);
  CHECK(v->rig_id == "rig-1");
  CHECK(v->idempotency_key == "k1");
  CHECK(v->job_id == "job-1");
  CHECK(v->args.size() == 2);
  CHECK(v->acked_boot_id == "boot-1");
  CHECK(v->running_at_ms == kT0 + 5);
  CHECK(v->cancel_requested_at_ms == kT0 + 6);
  CHECK(v->duplicate);
  REQUIRE(v->result);
  CHECK(v->result->cmd_id == id);
  CHECK(std::string(v->result->output.begin(), v->result->output.end()) == "boom");
  REQUIRE(v->nack);
  CHECK(v->nack->reason == msg::NackReason::busy);
  CHECK(v->streamed_output == "tail:boom");
  CHECK(v->streamed_bytes == 10);
  CHECK_FALSE(find(*store, id_at(kT0 + 1)));
}

TEST_CASE("commands: the rank guard: never back to an earlier state, nothing changes a finished one") {
  TempDir tmp;
  auto store = open_store(tmp.str());
  const std::string id = id_at(kT0);
  auto write = [&](CommandView v, bool with_result = false) {
    store->put_command(v, with_result);
    REQUIRE(store->commit());
  };
  write(command(id, "r", CommandState::acked));
  write(command(id, "r", CommandState::sent));
  CHECK(find(*store, id)->state == CommandState::acked);
  write(command(id, "r", CommandState::queued));
  CHECK(find(*store, id)->state == CommandState::acked);
  write(command(id, "r", CommandState::acked));  // the same step again is taken
  CHECK(find(*store, id)->state == CommandState::acked);
  write(command(id, "r", CommandState::running));
  CHECK(find(*store, id)->state == CommandState::running);

  CommandView done = finished(id, "r", CommandState::succeeded, "first");
  done.detail = "the first word";
  write(done, true);
  CommandView other = finished(id, "r", CommandState::timed_out, "second");
  other.detail = "too late";
  write(other, true);
  write(command(id, "r", CommandState::running));
  auto v = find(*store, id);
  REQUIRE(v);
  CHECK(v->state == CommandState::succeeded);
  CHECK(v->detail == "the first word");
  CHECK(std::string(v->result->output.begin(), v->result->output.end()) == "first");
}

TEST_CASE("commands: attempts and step times combine sensibly across writers") {
  TempDir tmp;
  auto store = open_store(tmp.str());
  const std::string id = id_at(kT0);
  CommandView a = command(id, "r", CommandState::sent);
  a.attempts = 2;
  a.sent_at_ms = kT0 + 100;
  store->put_command(a, false);
  REQUIRE(store->commit());
  CommandView b = command(id, "r", CommandState::acked);  // a writer that saw one attempt only
  b.attempts = 1;
  b.sent_at_ms = kT0 + 50;
  b.acked_at_ms = kT0 + 200;
  store->put_command(b, false);
  REQUIRE(store->commit());
  CommandView c = command(id, "r", CommandState::running);
  c.attempts = 1;
  c.sent_at_ms.reset();
  c.acked_at_ms = kT0 + 300;  // a later duplicate ACK: the first acceptance stays
  c.running_at_ms = kT0 + 310;
  store->put_command(c, false);
  REQUIRE(store->commit());
  auto v = find(*store, id);
  REQUIRE(v);
  CHECK(v->attempts == 2);
  CHECK(v->sent_at_ms == kT0 + 100);
  CHECK(v->acked_at_ms == kT0 + 200);
  CHECK(v->running_at_ms == kT0 + 310);
  CHECK(v->enqueued_at_ms == kT0);
}

TEST_CASE("commands: several writes of one command in a turn are one row") {
  TempDir tmp;
  auto store = open_store(tmp.str());
  const std::string id = id_at(kT0);
  store->put_command(command(id, "r", CommandState::queued), false);
  store->put_command(command(id, "r", CommandState::sent), false);
  store->put_command(command(id, "r", CommandState::queued), false);  // stale: ignored
  store->put_command(command(id, "r", CommandState::acked), false);
  // Before the commit the store already answers with the combined record.
  auto pending = find(*store, id);
  REQUIRE(pending);
  CHECK(pending->state == CommandState::acked);
  CHECK_FALSE(pending->recorded);
  REQUIRE(store->commit());
  CHECK(store->stats().rows_written == 1);
  auto v = find(*store, id);
  CHECK(v->state == CommandState::acked);
  CHECK(v->recorded);
}

TEST_CASE("commands: a result is written once, with the final state it came with") {
  TempDir tmp;
  auto store = open_store(tmp.str());
  const std::string a = id_at(kT0), b = id_at(kT0 + 1), c = id_at(kT0 + 2);
  // Final without the result, then the result: both end up stored.
  store->put_command(command(a, "r", CommandState::succeeded), false);
  REQUIRE(store->commit());
  CHECK_FALSE(find(*store, a)->result);
  store->put_command(finished(a, "r", CommandState::succeeded, "late"), true);
  REQUIRE(store->commit());
  REQUIRE(find(*store, a)->result);
  // A result that came with another final state than the stored one is not hung on it.
  store->put_command(command(b, "r", CommandState::timed_out), false);
  REQUIRE(store->commit());
  store->put_command(finished(b, "r", CommandState::succeeded, "lost the race"), true);
  REQUIRE(store->commit());
  auto vb = find(*store, b);
  CHECK(vb->state == CommandState::timed_out);
  CHECK_FALSE(vb->result);
  // with_result on an open state writes no result.
  CommandView open = command(c, "r", CommandState::running);
  open.result = result_of(c, "premature");
  store->put_command(open, true);
  REQUIRE(store->commit());
  CHECK_FALSE(find(*store, c)->result);
  RawDb raw(tmp.db());
  CHECK(raw.integer("SELECT count(*) FROM results") == 1);
}

TEST_CASE("commands: idempotency keys name one command; a clash keeps the record, not the name") {
  TempDir tmp;
  auto store = open_store(tmp.str());
  const std::string a = id_at(kT0), b = id_at(kT0 + 1);
  CommandView va = command(a, "r", CommandState::queued);
  va.idempotency_key = "nightly-42";
  store->put_command(va, false);
  // Found by its key before the commit ...
  auto pending = find_by_key(*store, "nightly-42");
  REQUIRE(pending);
  CHECK(pending->cmd_id == a);
  REQUIRE(store->commit());
  // ... and after; later steps of the same command keep the key without a clash.
  va.state = CommandState::sent;
  store->put_command(va, false);
  REQUIRE(store->commit());
  CHECK(store->stats().key_conflicts == 0);
  CHECK(find_by_key(*store, "nightly-42")->state == CommandState::sent);
  CHECK_FALSE(find_by_key(*store, ""));
  CHECK_FALSE(find_by_key(*store, "other"));

  // Another command with the same key (another broker took the same POST), in a
  // commit with other rows: all are written, the clashing one without its key.
  CommandView vb = command(b, "r", CommandState::queued);
  vb.idempotency_key = "nightly-42";
  store->put_command(vb, false);
  for (int i = 2; i < 10; ++i) store->put_command(command(id_at(kT0 + static_cast<std::uint64_t>(i)), "r", CommandState::queued), false);
  // The stored owner of the key wins already before the commit.
  CHECK(find_by_key(*store, "nightly-42")->cmd_id == a);
  auto committed = store->commit();
  REQUIRE_MESSAGE(committed, committed.error().detail);
  CHECK(store->stats().key_conflicts == 1);
  CHECK(find_by_key(*store, "nightly-42")->cmd_id == a);
  auto stored_b = find(*store, b);
  REQUIRE(stored_b);
  CHECK(stored_b->idempotency_key.empty());
  RawDb raw(tmp.db());
  CHECK(raw.integer("SELECT count(*) FROM commands") == 10);
}

TEST_CASE("commands: open_commands_of: a rig's open commands, oldest first, pending ones included") {
  TempDir tmp;
  auto store = open_store(tmp.str());
  std::vector<std::string> id;
  for (int i = 0; i < 8; ++i) id.push_back(id_at(kT0 + static_cast<std::uint64_t>(i)));
  // Written newest first, to show the order is the ids'.
  store->put_command(command(id[5], "rig-a", CommandState::sent), false);
  store->put_command(command(id[4], "rig-a", CommandState::succeeded), false);
  store->put_command(command(id[3], "rig-b", CommandState::queued), false);
  store->put_command(command(id[2], "rig-a", CommandState::acked), false);
  store->put_command(command(id[1], "rig-a", CommandState::queued), false);
  REQUIRE(store->commit());
  CHECK(ids(open_of(*store, "rig-a")) == std::vector<std::string>{id[1], id[2], id[5]});
  CHECK(ids(open_of(*store, "rig-b")) == std::vector<std::string>{id[3]});
  CHECK(open_of(*store, "rig-c").empty());
  // Pending: one ends, one is new, one of another rig.
  store->put_command(command(id[2], "rig-a", CommandState::rejected), false);
  store->put_command(command(id[6], "rig-a", CommandState::queued), false);
  store->put_command(command(id[7], "rig-b", CommandState::queued), false);
  store->put_command(command(id[4], "rig-a", CommandState::running), false);  // finished: stays so
  CHECK(ids(open_of(*store, "rig-a")) == std::vector<std::string>{id[1], id[5], id[6]});
  REQUIRE(store->commit());
  CHECK(ids(open_of(*store, "rig-a")) == std::vector<std::string>{id[1], id[5], id[6]});
  CHECK(ids(open_of(*store, "rig-b")) == std::vector<std::string>{id[3], id[7]});
}

TEST_CASE("commands: list_commands: newest first, every filter, paging by before") {
  TempDir tmp;
  auto store = open_store(tmp.str());
  std::vector<std::string> id;
  for (int i = 0; i < 30; ++i) {
    const std::uint64_t t = kT0 + static_cast<std::uint64_t>(i) * 1000;
    id.push_back(id_at(t));
    CommandView v = command(id.back(), i % 3 == 0 ? "rig-a" : "rig-b",
                            i % 2 == 0 ? CommandState::succeeded : CommandState::queued, t);
    if (i % 5 == 0) v.job_id = "job-5";
    if (i % 2 == 0) v.result = result_of(id.back(), "out");
    store->put_command(v, true);
  }
  REQUIRE(store->commit());

  CommandQuery all;
  auto got = list(*store, all);
  REQUIRE(got.size() == 30);
  CHECK(got.front().cmd_id == id[29]);
  CHECK(got.back().cmd_id == id[0]);
  CHECK(got.back().result);  // the record, result included

  CommandQuery rig;
  rig.rig_id = "rig-a";
  got = list(*store, rig);
  CHECK(got.size() == 10);
  CHECK(std::all_of(got.begin(), got.end(), [](const CommandView& v) { return v.rig_id == "rig-a"; }));

  CommandQuery state;
  state.state = CommandState::queued;
  CHECK(list(*store, state).size() == 15);
  state.rig_id = "rig-a";  // i % 3 == 0 and odd: 3, 9, 15, 21, 27
  CHECK(ids(list(*store, state)) == std::vector<std::string>{id[27], id[21], id[15], id[9], id[3]});

  CommandQuery job;
  job.job_id = "job-5";
  CHECK(ids(list(*store, job)) == std::vector<std::string>{id[25], id[20], id[15], id[10], id[5], id[0]});

  CommandQuery since;
  since.since_ms = kT0 + 25'000;
  CHECK(ids(list(*store, since)) == std::vector<std::string>{id[29], id[28], id[27], id[26], id[25]});
  since.since_ms = kT0 + 25'001;
  CHECK(list(*store, since).size() == 4);

  // Paging: pages of 7 by `before` cover everything once, in order.
  CommandQuery page;
  page.limit = 7;
  std::vector<std::string> seen;
  for (;;) {
    auto p = list(*store, page);
    if (p.empty()) break;
    CHECK(p.size() <= 7);
    for (auto& v : p) seen.push_back(v.cmd_id);
    page.before_cmd_id = p.back().cmd_id;
  }
  std::vector<std::string> expect(id.rbegin(), id.rend());
  CHECK(seen == expect);

  CommandQuery none;
  none.limit = 0;
  CHECK(list(*store, none).empty());

  // Pending writes are in the answer: one leaves the queued ones, one joins.
  store->put_command(command(id[29], "rig-b", CommandState::failed), false);
  const std::string fresh = id_at(kT0 + 31'000);
  store->put_command(command(fresh, "rig-b", CommandState::queued, kT0 + 31'000), false);
  CommandQuery queued;
  queued.state = CommandState::queued;
  queued.limit = 3;
  CHECK(ids(list(*store, queued)) == std::vector<std::string>{fresh, id[27], id[25]});
}

TEST_CASE("rigs: the inventory keeps the latest sighting and the first one") {
  TempDir tmp;
  auto store = open_store(tmp.str());
  RigRecord r;
  r.rig_id = "rig-1";
  r.boot_id = "boot-2";
  r.agent_version = "1.1";
  r.labels = {{"site", "lab"}};
  r.kinds = {"noop"};
  r.broker_id = "b";
  r.first_seen_ms = 500;
  r.last_seen_ms = 2000;
  store->put_rig(r);
  REQUIRE(store->commit());
  RigRecord stale = r;
  stale.boot_id = "boot-1";
  stale.first_seen_ms = 100;
  stale.last_seen_ms = 1000;  // a lagging broker's older sighting
  store->put_rig(stale);
  RigRecord other = r;
  other.rig_id = "rig-0";
  store->put_rig(other);
  REQUIRE(store->commit());
  auto snap = store->load();
  REQUIRE(snap);
  REQUIRE(snap->rigs.size() == 2);
  CHECK(snap->rigs[0].rig_id == "rig-0");
  const RigRecord& got = snap->rigs[1];
  CHECK(got.boot_id == "boot-2");
  CHECK(got.last_seen_ms == 2000);
  CHECK(got.first_seen_ms == 100);
  CHECK(got.labels == r.labels);
  CHECK(got.kinds == r.kinds);
}

TEST_CASE("jobs: find, list with filters and paging; a finished job stays finished") {
  TempDir tmp;
  auto store = open_store(tmp.str());
  for (int i = 0; i < 10; ++i) {
    JobRecord j;
    j.job_id = id_at(kT0 + static_cast<std::uint64_t>(i) * 10);
    j.created_at_ms = kT0 + static_cast<std::uint64_t>(i) * 10;
    j.finished = i < 4;
    j.body = "{\"n\":" + std::to_string(i) + "}";
    store->put_job(j);
  }
  REQUIRE(store->commit());
  const std::string j0 = id_at(kT0), j9 = id_at(kT0 + 90);
  auto got = find_job(*store, j0);
  REQUIRE(got);
  CHECK(got->finished);
  CHECK(got->body == "{\"n\":0}");
  CHECK_FALSE(find_job(*store, "nope"));

  JobRecord reopened = *got;
  reopened.finished = false;
  reopened.body = "{\"n\":\"stale\"}";
  store->put_job(reopened);
  CHECK(find_job(*store, j0)->body == "{\"n\":0}");  // pending, combined as the commit will
  REQUIRE(store->commit());
  CHECK(find_job(*store, j0)->finished);
  CHECK(find_job(*store, j0)->body == "{\"n\":0}");

  JobQuery all;
  auto jobs = list_jobs(*store, all);
  REQUIRE(jobs.size() == 10);
  CHECK(jobs.front().job_id == j9);
  JobQuery open;
  open.finished = false;
  CHECK(list_jobs(*store, open).size() == 6);
  JobQuery done;
  done.finished = true;
  CHECK(list_jobs(*store, done).size() == 4);
  JobQuery since;
  since.since_ms = kT0 + 50;
  CHECK(list_jobs(*store, since).size() == 5);
  JobQuery page;
  page.limit = 3;
  page.before_job_id = j9;
  jobs = list_jobs(*store, page);
  REQUIRE(jobs.size() == 3);
  CHECK(jobs.front().job_id == id_at(kT0 + 80));

  auto snap = store->load();
  REQUIRE(snap);
  CHECK(snap->open_jobs.size() == 6);
  CHECK(std::none_of(snap->open_jobs.begin(), snap->open_jobs.end(), [](const JobRecord& j) { return j.finished; }));
}

TEST_CASE("jobs: a list may read the bodies' heads only, the unwritten ones too") {
  TempDir tmp;
  auto store = open_store(tmp.str());
  const std::string rigs(100'000, 'x');
  store->put_job(JobRecord{id_at(kT0), kT0, true, "{\"n\":0}\n[" + rigs + "]"});
  store->put_job(JobRecord{id_at(kT0 + 1), kT0 + 1, false, "{\"n\":1}"});  // no second line
  REQUIRE(store->commit());
  store->put_job(JobRecord{id_at(kT0 + 2), kT0 + 2, false, "{\"n\":2}\n[" + rigs + "]"});  // not yet submitted
  JobQuery q;
  q.head_only = true;
  auto heads = list_jobs(*store, q);
  REQUIRE(heads.size() == 3);
  CHECK(heads[0].body == "{\"n\":2}");
  CHECK(heads[1].body == "{\"n\":1}");
  CHECK(heads[2].body == "{\"n\":0}");
  q.head_only = false;
  auto whole = list_jobs(*store, q);
  REQUIRE(whole.size() == 3);
  CHECK(whole[2].body.size() == 8 + 100'002);
  CHECK(find_job(*store, id_at(kT0))->body.size() == 8 + 100'002);
}

TEST_CASE("load: every open command oldest first, every rig, every unfinished job") {
  TempDir tmp;
  std::vector<std::string> id;
  {
    auto store = open_store(tmp.str());
    for (int i = 0; i < 20; ++i) {
      id.push_back(id_at(kT0 + static_cast<std::uint64_t>(i)));
      store->put_command(command(id.back(), "rig-" + std::to_string(i % 4),
                                 i % 4 == 0 ? CommandState::succeeded : CommandState::acked),
                         false);
    }
    RigRecord r;
    r.rig_id = "rig-1";
    store->put_rig(r);
    REQUIRE(store->commit());
  }
  auto store = open_store(tmp.str());
  auto snap = store->load();
  REQUIRE(snap);
  REQUIRE(snap->open_commands.size() == 15);
  CHECK(std::is_sorted(snap->open_commands.begin(), snap->open_commands.end(),
                       [](const CommandView& a, const CommandView& b) { return a.cmd_id < b.cmd_id; }));
  CHECK(snap->open_commands.front().cmd_id == id[1]);
  CHECK(snap->rigs.size() == 1);
}

TEST_CASE("unreadable rows: load refuses an open one; find and lists leave it out, with a warning") {
  TempDir tmp;
  const std::string open_id = id_at(kT0), done_id = id_at(kT0 + 1), good_id = id_at(kT0 + 2);
  {
    auto store = open_store(tmp.str());
    store->put_command(command(open_id, "r", CommandState::acked), false);
    store->put_command(finished(done_id, "r", CommandState::succeeded, "x"), true);
    store->put_command(command(good_id, "r", CommandState::succeeded), false);
    REQUIRE(store->commit());
  }
  {
    RawDb raw(tmp.db());
    // A newer layout, and garbage.
    REQUIRE(raw.exec("UPDATE commands SET body = x'09' || substr(body, 2) WHERE cmd_id = '" + open_id + "'") ==
            SQLITE_OK);
    REQUIRE(raw.exec("UPDATE results SET body = x'01ffffffffff' WHERE cmd_id = '" + done_id + "'") == SQLITE_OK);
  }
  auto store = open_store(tmp.str());
  auto snap = store->load();
  REQUIRE_FALSE(snap);
  CHECK(snap.error().detail.find(open_id) != std::string::npos);
  CHECK(snap.error().detail.find("newer") != std::string::npos);
  CHECK_FALSE(find(*store, open_id));
  CHECK_FALSE(find(*store, done_id));
  CHECK(find(*store, good_id));
  CHECK(ids(list(*store, CommandQuery{})) == std::vector<std::string>{good_id});
  CHECK(store->stats().unreadable_rows >= 4);
  // A rig record nobody can read stops load() too, naming the rig.
  {
    RawDb raw(tmp.db());
    REQUIRE(raw.exec("INSERT INTO rigs VALUES ('rig-x', 1, 2, x'01ff')") == SQLITE_OK);
    REQUIRE(raw.exec("DELETE FROM commands WHERE cmd_id = '" + open_id + "'") == SQLITE_OK);
  }
  auto again = store->load();
  REQUIRE_FALSE(again);
  CHECK(again.error().detail.find("rig-x") != std::string::npos);
  // A state code from the future is refused the same way.
  {
    RawDb raw(tmp.db());
    REQUIRE(raw.exec("UPDATE commands SET state = 42 WHERE cmd_id = '" + good_id + "'") == SQLITE_OK);
  }
  CHECK_FALSE(find(*store, good_id));
}

TEST_CASE("prune: old finished commands (with their results), the oldest beyond the count, old finished jobs") {
  TempDir tmp;
  SqliteOptions o = quick_options();
  o.prune_chunk = 7;  // many small transactions
  auto store = open_store(tmp.str(), o);
  const std::uint64_t day = 24ULL * 3600 * 1000;
  const std::uint64_t now = kT0 + 100 * day;
  std::vector<std::string> old_done, old_open, young_done;
  for (int i = 0; i < 40; ++i) {
    const std::uint64_t t = kT0 + static_cast<std::uint64_t>(i) * 1000;  // 100 days old
    old_done.push_back(id_at(t));
    store->put_command(finished(old_done.back(), "r", CommandState::succeeded, "o"), true);
  }
  for (int i = 0; i < 3; ++i) {
    old_open.push_back(id_at(kT0 + 500'000 + static_cast<std::uint64_t>(i)));
    store->put_command(command(old_open.back(), "r", CommandState::acked), false);
  }
  for (int i = 0; i < 20; ++i) {
    const std::uint64_t t = now - day + static_cast<std::uint64_t>(i);  // a day old
    young_done.push_back(id_at(t));
    store->put_command(finished(young_done.back(), "r", CommandState::failed, "y"), true);
  }
  JobRecord old_job{id_at(kT0), kT0, true, "{}"};
  JobRecord old_open_job{id_at(kT0 + 1), kT0 + 1, false, "{}"};
  JobRecord young_job{id_at(now - day), now - day, true, "{}"};
  store->put_job(old_job);
  store->put_job(old_open_job);
  store->put_job(young_job);
  REQUIRE(store->commit());

  RetentionPolicy policy;
  policy.max_age_ms = 30 * day;
  policy.max_commands = 1'000'000;
  CHECK(store->prune_now(policy, now) == 41);  // 40 commands, 1 job
  CHECK_FALSE(find(*store, old_done.front()));
  CHECK_FALSE(find(*store, old_done.back()));
  for (const auto& id : old_open) CHECK(find(*store, id));  // never an open one
  CHECK(find(*store, young_done.front()));
  CHECK_FALSE(find_job(*store, old_job.job_id));
  CHECK(find_job(*store, old_open_job.job_id));
  CHECK(find_job(*store, young_job.job_id));
  {
    RawDb raw(tmp.db());
    CHECK(raw.integer("SELECT count(*) FROM results") == 20);
  }

  // By count: 23 commands, keep 10: the 13 oldest finished go (never the open ones).
  policy.max_commands = 10;
  CHECK(store->prune_now(policy, now) == 13);
  RawDb raw(tmp.db());
  CHECK(raw.integer("SELECT count(*) FROM commands") == 10);
  CHECK(raw.integer("SELECT count(*) FROM results") == 7);
  for (const auto& id : old_open) CHECK(find(*store, id));
  CHECK(find(*store, young_done.back()));
  CHECK_FALSE(find(*store, young_done[12]));
  CHECK(find(*store, young_done[13]));
  // Nothing left to do.
  CHECK(store->prune_now(policy, now) == 0);
}

TEST_CASE("prune: at most prune_max_per_call rows per call") {
  TempDir tmp;
  SqliteOptions o = quick_options();
  o.prune_chunk = 10;
  o.prune_max_per_call = 25;
  auto store = open_store(tmp.str(), o);
  for (int i = 0; i < 60; ++i)
    store->put_command(command(id_at(kT0 + static_cast<std::uint64_t>(i)), "r", CommandState::succeeded), false);
  REQUIRE(store->commit());
  RetentionPolicy policy;
  policy.max_age_ms = 1000;
  const std::uint64_t now = kT0 + 1'000'000;
  CHECK(store->prune_now(policy, now) == 25);
  CHECK(store->prune_now(policy, now) == 25);
  CHECK(store->prune_now(policy, now) == 10);
  CHECK(store->prune_now(policy, now) == 0);
}

TEST_CASE("prune: prune() queues the work for the writer thread and reports it at the next call") {
  TempDir tmp;
  auto store = open_store(tmp.str(), quick_options());
  for (int i = 0; i < 30; ++i)
    store->put_command(command(id_at(kT0 + static_cast<std::uint64_t>(i)), "r", CommandState::succeeded), false);
  REQUIRE(store->commit());
  RetentionPolicy policy;
  policy.max_age_ms = 1000;
  const std::uint64_t now = kT0 + 1'000'000;
  std::size_t reported = store->prune(policy, now);  // 0, or 30 if the writer was quicker than this thread
  for (int i = 0; i < 200 && reported < 30; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    reported += store->prune(policy, now);
  }
  CHECK(reported == 30);
  RawDb raw(tmp.db());
  CHECK(raw.integer("SELECT count(*) FROM commands") == 0);
}

// The in-memory combining (several writes in one turn, and reads over pending
// writes) must leave what the SQL upsert leaves when each write is committed on
// its own: random histories, written both ways, compared field by field.
TEST_CASE("commands: coalesced writes equal one commit per write (random histories)") {
  TempDir one_by_one_dir, coalesced_dir;
  auto one_by_one = open_store(one_by_one_dir.str());
  auto coalesced = open_store(coalesced_dir.str());
  std::mt19937 rng(7);
  auto maybe = [&](std::uint64_t base) -> std::optional<std::uint64_t> {
    if (rng() % 3 == 0) return std::nullopt;
    return base + rng() % 1000;
  };
  std::vector<std::string> all;
  for (int c = 0; c < 300; ++c) {
    const std::string id = id_at(kT0 + static_cast<std::uint64_t>(c));
    all.push_back(id);
    const int writes = 1 + static_cast<int>(rng() % 6);
    for (int w = 0; w < writes; ++w) {
      const auto state = static_cast<CommandState>(rng() % kCommandStateCount);
      CommandView v = command(id, "rig-" + std::to_string(rng() % 5), state, kT0 + rng() % 10);
      v.attempts = rng() % 4;
      v.sent_at_ms = maybe(kT0);
      v.acked_at_ms = maybe(kT0);
      v.running_at_ms = maybe(kT0);
      v.finished_at_ms = is_final(state) ? maybe(kT0) : std::nullopt;
      v.detail = "w" + std::to_string(w);
      v.idempotency_key = rng() % 4 == 0 ? "key-" + id : "";
      const bool with_result = rng() % 2 == 0;
      if (with_result) v.result = result_of(id, "out" + std::to_string(w));
      one_by_one->put_command(v, with_result);
      REQUIRE(one_by_one->commit());
      coalesced->put_command(v, with_result);
    }
    if (c % 50 == 49) REQUIRE(coalesced->commit());
    // Reads over pending writes agree too (checked before the commit for some).
    if (c % 50 != 49 && c % 7 == 0) {
      auto a = find(*one_by_one, id), b = find(*coalesced, id);
      REQUIRE(a);
      REQUIRE(b);
      CHECK(a->state == b->state);
      CHECK(a->detail == b->detail);
      CHECK(a->attempts == b->attempts);
    }
  }
  REQUIRE(coalesced->commit());
  for (const std::string& id : all) {
    auto a = find(*one_by_one, id), b = find(*coalesced, id);
    REQUIRE(a);
    REQUIRE(b);
    CHECK(a->state == b->state);
    CHECK(a->rig_id == b->rig_id);
    CHECK(a->idempotency_key == b->idempotency_key);
    CHECK(a->enqueued_at_ms == b->enqueued_at_ms);
    CHECK(a->attempts == b->attempts);
    CHECK(a->sent_at_ms == b->sent_at_ms);
    CHECK(a->acked_at_ms == b->acked_at_ms);
    CHECK(a->running_at_ms == b->running_at_ms);
    CHECK(a->finished_at_ms == b->finished_at_ms);
    CHECK(a->detail == b->detail);
    CHECK(a->result.has_value() == b->result.has_value());
    if (a->result && b->result) CHECK(a->result->output == b->result->output);
  }
}

TEST_CASE("unreadable rows: random bytes in every blob of the file never crash a read") {
  QuietLog quiet;
  TempDir tmp;
  auto store = open_store(tmp.str());
  std::vector<std::string> id;
  for (int i = 0; i < 20; ++i) {
    id.push_back(id_at(kT0 + static_cast<std::uint64_t>(i)));
    store->put_command(finished(id.back(), "r", i % 2 ? CommandState::succeeded : CommandState::acked, "out"),
                       i % 2 == 1);
  }
  RigRecord rig;
  rig.rig_id = "r";
  store->put_rig(rig);
  REQUIRE(store->commit());
  std::mt19937_64 rng(99);
  RawDb raw(tmp.db());
  auto hex = [&](std::size_t n, std::uint8_t first) {
    static const char* digits = "0123456789abcdef";
    std::string h = "x'";
    for (std::size_t i = 0; i < n; ++i) {
      const auto b = i == 0 ? first : static_cast<std::uint8_t>(rng());
      h += digits[b >> 4];
      h += digits[b & 15];
    }
    return h + "'";
  };
  for (int round = 0; round < 200; ++round) {
    const std::string& victim = id[rng() % id.size()];
    const std::uint8_t version = rng() % 2 ? 1 : static_cast<std::uint8_t>(rng());
    const char* table = rng() % 2 ? "commands" : "results";
    REQUIRE(raw.exec(std::string("UPDATE ") + table + " SET body = " + hex(rng() % 40, version) +
                     " WHERE cmd_id = '" + victim + "'") == SQLITE_OK);
    if (round % 10 == 0)
      REQUIRE(raw.exec("UPDATE rigs SET body = " + hex(rng() % 20, version)) == SQLITE_OK);
    find(*store, victim);
    list(*store, CommandQuery{});
    open_of(*store, "r");
    auto snap = store->load();  // an Error or a snapshot, nothing else
    (void)snap;
  }
  CHECK(store->stats().unreadable_rows > 0);
}
