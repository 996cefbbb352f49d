// fleetlink-store-bench: what the SQLite command store costs the broker, in µs.
//
// The write workload is the broker's: in each turn of the loop, half the rows
// are new commands (recorded queued, then sent, in the same turn: one row
// after coalescing) and half finish commands of the previous turn with a small
// RESULT, so every command is written twice; one commit per turn. Rigs are
// drawn at random from --rigs. Each figure is the median of --rounds rounds,
// each on a fresh store in --dir (a real disk, not tmpfs, for the WAL's sake).
//
//   put+submit/row   the loop's time per row written (encoding, buffering, handing the
//                    batch to the writer thread): what a command's record costs the loop
//   writer cpu/row   the writer thread's CPU per row (the SQL and the WAL appends: off
//                    the loop, but the broker's CPU)
//   ckpt cpu/row     the checkpoint thread's CPU per row (off the loop, but the broker's CPU)
//   fan-out          --fanout commands open at once, one per rig (a target-set POST):
//                    then ACKed, then finished, in commits of the last --batch rows
//   commit of 1 row  a turn that wrote one new command, until the writer says it is durable
//   find, open_commands_of, foreign_writes: per call, on the store the batch rounds left
// STORE_BENCH_GROUP=N caps a transaction at about N rows (SqliteOptions::max_group_rows):
// the bench's loop never waits, so the writer otherwise groups up to 10,000 rows, far
// more than a broker's turns give it (about 100 rows at 20,000 commands a second).
// A round runs long enough (--turns) for the checkpoint thread to go round:
// its WAL is then reused, as in a broker that runs for hours.
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "fleetlink/uuid.hpp"
#include "store/sqlite_store.hpp"

using namespace fleetlink;
using namespace fleetlink::broker;
using Clock = std::chrono::steady_clock;

namespace {

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

double process_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct Config {
  std::string dir;
  std::size_t rigs = 20'000;
  std::vector<std::size_t> batches{50, 100};
  std::size_t turns = 4000;
  std::size_t fanout = 20'000;
  int rounds = 5;
  std::size_t reads = 20'000;
  std::size_t output_bytes = 64;
};

class Workload {
 public:
  explicit Workload(const Config& c) : c_(c), rng_(42) {
    for (std::size_t i = 0; i < c.rigs; ++i) rigs_.push_back("rig-" + std::to_string(10'000 + i));
  }

  CommandView fresh(std::uint64_t now) {
    CommandView v;
    v.cmd_id = uuid_v7_at(now).to_string();
    v.rig_id = rigs_[rng_() % rigs_.size()];
    v.kind = "noop";
    v.args = {{"suite", "smoke"}};
    v.state = CommandState::queued;
    v.enqueued_at_ms = now;
    v.deliver_by_ms = now + 300'000;
    v.timeout_s = 60;
    return v;
  }

  static void sent(CommandView& v, std::uint64_t now) {
    v.state = CommandState::sent;
    v.sent_at_ms = now;
    v.attempts = 1;
    v.seq = 7;
  }

  void finish(CommandView& v, std::uint64_t now) {
    v.state = CommandState::succeeded;
    v.acked_at_ms = now;
    v.finished_at_ms = now + 1;
    v.acked_boot_id = "0190f5a2-aaaa-7bbb-8ccc-dddddddddddd";
    msg::Result r;
    r.cmd_id = v.cmd_id;
    r.status = msg::Status::ok;
    r.output.assign(c_.output_bytes, 'o');
    r.started_at_ms = now;
    r.finished_at_ms = now + 1;
    v.result = std::move(r);
  }

  const std::vector<std::string>& rigs() const { return rigs_; }
  std::mt19937_64& rng() { return rng_; }

 private:
  const Config& c_;
  std::mt19937_64 rng_;
  std::vector<std::string> rigs_;
};

struct BatchRound {
  double put_submit_us_per_row = 0;
  double put_us_per_row = 0;
  double submit_us_per_row = 0;
  double cpu_us_per_row = 0;   // the whole process, the writer and checkpoints included
  double writer_cpu_us_per_row = 0;
  double ckpt_cpu_us_per_row = 0;
  double commits_per_turn = 0;  // the writer's transactions: below 1 when it groups turns
};

std::unique_ptr<SqliteStore> open_fresh(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  SqliteOptions o;
  if (const char* m = std::getenv("STORE_BENCH_MMAP")) o.mmap_bytes = std::strtoull(m, nullptr, 10);
  if (const char* g = std::getenv("STORE_BENCH_GROUP")) o.max_group_rows = std::strtoull(g, nullptr, 10);
  auto s = SqliteStore::open(dir, o);
  if (!s) {
    std::fprintf(stderr, "%s\n", s.error().detail.c_str());
    std::exit(1);
  }
  return std::move(*s);
}

BatchRound batch_round(const Config& c, std::size_t batch, const std::string& dir, std::vector<std::string>* ids,
                       std::unique_ptr<SqliteStore>* keep) {
  auto store = open_fresh(dir);
  Workload w(c);
  std::uint64_t now = 1'733'000'000'000;
  std::vector<CommandView> in_flight, next;
  double put_us = 0, submit_us = 0;
  std::size_t rows = 0;
  const auto ckpt0 = store->stats().checkpoint.cpu_ns;
  const auto writer0 = store->stats().writer_cpu_ns;
  const auto commits0 = store->stats().commits;
  const double cpu0 = process_cpu_us();
  std::vector<CommandView> queued;
  double gen_us = 0;  // making the records: the broker's, not the store's
  for (std::size_t t = 0; t < c.turns; ++t) {
    ++now;
    const double g0 = process_cpu_us();
    next.clear();
    queued.clear();
    for (std::size_t i = 0; i < batch / 2; ++i) {
      queued.push_back(w.fresh(now));
      next.push_back(queued.back());
      Workload::sent(next.back(), now);
    }
    for (CommandView& v : in_flight) w.finish(v, now);
    gen_us += process_cpu_us() - g0;
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < queued.size(); ++i) {
      store->put_command(queued[i], false);
      store->put_command(next[i], false);
    }
    for (const CommandView& v : in_flight) store->put_command(v, true);
    rows += queued.size() + in_flight.size();
    const auto t1 = Clock::now();
    store->submit();
    put_us += std::chrono::duration<double, std::micro>(t1 - t0).count();
    submit_us += us_since(t1);
    for (const BatchOutcome& o : store->take_outcomes()) {
      if (!o.result) {
        std::fprintf(stderr, "batch %llu: %s\n", static_cast<unsigned long long>(o.batch), o.result.error().detail.c_str());
        std::exit(1);
      }
    }
    if (ids) {
      for (const CommandView& v : in_flight) ids->push_back(v.cmd_id);
    }
    std::swap(in_flight, next);
  }
  // What the threads have not done yet is still this round's cost.
  if (auto r = store->commit(); !r) {
    std::fprintf(stderr, "commit: %s\n", r.error().detail.c_str());
    std::exit(1);
  }
  store->checkpoint_now();
  const double cpu = process_cpu_us() - cpu0 - gen_us;
  BatchRound r;
  r.put_us_per_row = put_us / static_cast<double>(rows);
  r.submit_us_per_row = submit_us / static_cast<double>(rows);
  r.put_submit_us_per_row = r.put_us_per_row + r.submit_us_per_row;
  r.cpu_us_per_row = cpu / static_cast<double>(rows);
  r.writer_cpu_us_per_row = static_cast<double>(store->stats().writer_cpu_ns - writer0) / 1e3 / static_cast<double>(rows);
  r.commits_per_turn = static_cast<double>(store->stats().commits - commits0) / static_cast<double>(c.turns);
  r.ckpt_cpu_us_per_row =
      static_cast<double>(store->stats().checkpoint.cpu_ns - ckpt0) / 1e3 / static_cast<double>(rows);
  if (ids) {
    for (const CommandView& v : in_flight) ids->push_back(v.cmd_id);  // open ones too
  }
  if (keep) *keep = std::move(store);
  return r;
}

struct FanoutRound {
  double open_us_per_row = 0, ack_us_per_row = 0, finish_us_per_row = 0;
};

FanoutRound fanout_round(const Config& c, std::size_t batch, const std::string& dir) {
  auto store = open_fresh(dir);
  Workload w(c);
  std::uint64_t now = 1'733'000'000'000;
  std::vector<CommandView> cmds;
  cmds.reserve(c.fanout);
  const auto& rigs = w.rigs();
  FanoutRound r;
  for (std::size_t i = 0; i < c.fanout; ++i) {
    CommandView v = w.fresh(now);
    v.rig_id = rigs[i % rigs.size()];
    Workload::sent(v, now);
    cmds.push_back(std::move(v));
  }
  auto t0 = Clock::now();
  for (const CommandView& v : cmds) store->put_command(v, false);
  if (!store->commit()) std::exit(1);
  r.open_us_per_row = us_since(t0) / static_cast<double>(c.fanout);
  std::shuffle(cmds.begin(), cmds.end(), w.rng());  // answers come back in any order
  auto phase = [&](auto&& change, bool with_result) {
    const auto p0 = Clock::now();
    for (std::size_t i = 0; i < cmds.size(); ++i) {
      change(cmds[i]);
      store->put_command(cmds[i], with_result);
      if ((i + 1) % batch == 0 && !store->commit()) std::exit(1);
    }
    if (!store->commit()) std::exit(1);
    return us_since(p0) / static_cast<double>(cmds.size());
  };
  r.ack_us_per_row = phase([&](CommandView& v) { v.state = CommandState::acked; v.acked_at_ms = now + 1; }, false);
  std::shuffle(cmds.begin(), cmds.end(), w.rng());
  r.finish_us_per_row = phase([&](CommandView& v) { w.finish(v, now + 2); }, true);
  return r;
}

double single_commits(const Config& c, const std::string& dir) {
  auto store = open_fresh(dir);
  Workload w(c);
  std::vector<double> each;
  std::uint64_t now = 1'733'000'000'000;
  for (std::size_t i = 0; i < 2000; ++i) {
    CommandView v = w.fresh(++now);
    const auto t0 = Clock::now();
    store->put_command(v, false);
    if (!store->commit()) std::exit(1);
    each.push_back(us_since(t0));
  }
  return median(each);
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"fleetlink-store-bench: µs per row and per read of the SQLite command store"};
  app.add_option("--dir", c.dir, "where the stores are made (default: a new directory under /var/tmp)");
  app.add_option("--rigs", c.rigs, "rigs the commands are spread over");
  app.add_option("--batch", c.batches, "rows per commit (several allowed)");
  app.add_option("--turns", c.turns, "commits per round");
  app.add_option("--rounds", c.rounds, "rounds per figure (the median is reported)");
  app.add_option("--reads", c.reads, "calls per read figure");
  app.add_option("--fanout", c.fanout, "commands open at once in the fan-out figure (0: none)");
  app.add_option("--output", c.output_bytes, "bytes of RESULT output per command");
  CLI11_PARSE(app, argc, argv);
  bool made_dir = false;
  if (c.dir.empty()) {
    char tmpl[] = "/var/tmp/fleetlink-store-bench-XXXXXX";
    if (!::mkdtemp(tmpl)) return 1;
    c.dir = tmpl;
    made_dir = true;
  }
  const std::string store_dir = c.dir + "/state";
  std::printf("fleetlink-store-bench: %zu rigs, %zu turns per round, median of %d rounds, in %s\n", c.rigs,
              c.turns, c.rounds, c.dir.c_str());

  std::vector<std::string> ids;
  std::unique_ptr<SqliteStore> kept;
  for (std::size_t batch : c.batches) {
    std::vector<double> total, put, submit, cpu, writer, ckpt, commits;
    for (int r = 0; r < c.rounds; ++r) {
      const bool last = batch == c.batches.back() && r == c.rounds - 1;
      BatchRound b = batch_round(c, batch, store_dir, last ? &ids : nullptr, last ? &kept : nullptr);
      total.push_back(b.put_submit_us_per_row);
      put.push_back(b.put_us_per_row);
      submit.push_back(b.submit_us_per_row);
      cpu.push_back(b.cpu_us_per_row);
      writer.push_back(b.writer_cpu_us_per_row);
      ckpt.push_back(b.ckpt_cpu_us_per_row);
      commits.push_back(b.commits_per_turn);
    }
    std::printf("batch %4zu: loop put+submit %.2f us/row (put %.2f, submit %.2f; min %.2f max %.2f)  "
                "process cpu %.2f us/row, of which writer %.2f, checkpoints %.2f; %.2f transactions per turn\n",
                batch, median(total), median(put), median(submit), *std::min_element(total.begin(), total.end()),
                *std::max_element(total.begin(), total.end()), median(cpu), median(writer), median(ckpt),
                median(commits));
  }
  if (c.fanout > 0) {
    std::vector<double> open, ack, finish;
    for (int r = 0; r < c.rounds; ++r) {
      FanoutRound f = fanout_round(c, c.batches.back(), c.dir + "/fanout");
      open.push_back(f.open_us_per_row);
      ack.push_back(f.ack_us_per_row);
      finish.push_back(f.finish_us_per_row);
    }
    std::printf("fan-out of %zu: one commit of all %.2f us/row; then by %zu: ACKs %.2f us/row, results %.2f us/row\n",
                c.fanout, median(open), c.batches.back(), median(ack), median(finish));
  }
  if (!kept) return 0;

  SqliteStore& s = *kept;
  std::mt19937_64 rng(7);
  auto per_call = [&](auto&& call) {
    std::vector<double> rounds;
    for (int r = 0; r < c.rounds; ++r) {
      const auto t0 = Clock::now();
      for (std::size_t i = 0; i < c.reads; ++i) call();
      rounds.push_back(us_since(t0) / static_cast<double>(c.reads));
    }
    return median(rounds);
  };
  std::size_t found = 0;
  const double find_us = per_call([&] {
    s.find(ids[rng() % ids.size()], [&](std::optional<CommandView> v) { found += v.has_value(); });
  });
  const double open_us = per_call([&] {
    s.open_commands_of("rig-" + std::to_string(10'000 + rng() % c.rigs),
                       [&](std::vector<CommandView> v) { found += v.size(); });
  });
  std::uint64_t sum = 0;
  const double fw_us = per_call([&] { sum += s.foreign_writes(); });

  std::vector<double> singles;
  for (int r = 0; r < c.rounds; ++r) singles.push_back(single_commits(c, c.dir + "/single"));

  // The history of one rig walks the table (no index by rig: see sqlite_schema.cpp).
  std::vector<double> history;
  for (int r = 0; r < c.rounds; ++r) {
    CommandQuery q;
    q.rig_id = "rig-" + std::to_string(10'000 + rng() % c.rigs);
    const auto t0 = Clock::now();
    s.list_commands(q, [&](std::vector<CommandView> v) { found += v.size(); });
    history.push_back(us_since(t0));
  }
  std::printf("commit of 1 row: %.1f us\n", median(singles));
  std::printf("find: %.2f us   open_commands_of: %.2f us   foreign_writes: %.2f us   (%zu commands stored)\n",
              find_us, open_us, fw_us, ids.size());
  std::printf("list_commands by rig (walks the table): %.1f ms\n", median(history) / 1000);
  if (found == 0 || sum == 1) std::printf("(nothing found?)\n");
  kept.reset();
  if (made_dir) {
    std::error_code ec;
    std::filesystem::remove_all(c.dir, ec);
  }
  return 0;
}
