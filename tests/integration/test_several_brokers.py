"""Several brokers, one fleet (issue 13): real brokers with --registry redis,
real agents and a real redis-server started here on a loopback port.

The brokers share one state directory (one SQLite command store, as brokers
on one host do) and the Redis registry and mesh. A ground-truth plugin
(`fleetlink-work`) appends "<cmd_id> <pid>" to truth.log when it starts, so
"ran exactly once" is counted from what ran, never assumed.

- a command posted to any broker reaches every rig, wherever it is connected;
  every broker lists the whole fleet; cancel and force-reconnect route;
- a cloned rig identity (same certificate, another machine's agent) on a
  second broker is refused 4409 while the first connection is healthy;
- a broker killed -9: its rigs reconnect to the others at once (nobody listens
  on its channel any more), its pending commands are delivered, results of
  commands acknowledged before the kill arrive, nothing runs twice;
- Redis restarted in the middle of traffic: no rig reconnects, no
  acknowledged command is lost, the entries are written again;
- Redis away: each broker keeps serving its own rigs, refuses the others'
  with 503 registry_unavailable, /readyz says so;
- brokers on one port with SO_REUSEPORT form one fleet.
"""
import asyncio
import collections
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import unittest

from harness import Broker, LabTestCase, free_port, wait_for
from harness import binary as harness_binary
import test_control_stream as control_stream  # its helpers (a module: its tests are not run here)

FINAL = Broker.FINAL


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().splitlines()


class Redis:
    """A redis-server of the test's own, on a free loopback port."""

    def __init__(self, lab, name="redis", port=None, appendonly=False):
        self.lab = lab
        self.name = name
        self.port = port or free_port()
        self.dir = lab.path(f"{name}-data")
        os.makedirs(self.dir, exist_ok=True)
        self.appendonly = appendonly
        self.proc = None
        self.start()

    def start(self):
        exe = shutil.which("redis-server")
        if exe is None:
            raise FileNotFoundError("redis-server is not installed (scripts/install-deps.sh installs it)")
        argv = [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--save", "", "--appendonly", "yes" if self.appendonly else "no",
                "--logfile", os.path.join(self.dir, "redis.log")]
        self.proc = self.lab.process(self.name, argv)
        wait_for(self.ping, 10, what="redis-server answers PING")

    def ping(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def cli(self, *args):
        out = subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip()

    def stop(self):
        self.proc.stop(timeout=10)


class SeveralBrokersTest(LabTestCase):
    def setUp(self):
        super().setUp()
        self.truth = self.lab.path("truth.log")
        self.plugins = self.lab.path("plugins")
        os.makedirs(self.plugins)
        prog = os.path.join(self.plugins, "fleetlink-work")
        with open(prog, "w") as f:
            f.write("#!/bin/sh\n"
                    "read -r req\n"
                    f"echo \"$FLEETLINK_CMD_ID $$\" >> '{self.truth}'\n"
                    "s=$(printf '%s\\n' \"$req\" | sed -n 's/.*\"sleep\":\"\\([0-9.]*\\)\".*/\\1/p')\n"
                    "if [ -n \"$s\" ]; then sleep \"$s\"; fi\n"
                    "echo \"done $FLEETLINK_CMD_ID\"\n")
        os.chmod(prog, 0o755)
        steps = os.path.join(self.plugins, "fleetlink-steps")  # four lines, 0.5 s apart
        with open(steps, "w") as f:
            f.write("#!/bin/sh\nread -r req\nfor i in 1 2 3 4; do echo \"step $i\"; sleep 0.5; done\n")
        os.chmod(steps, 0o755)
        self.state_dir = self.lab.path("shared-state")

    def redis(self, **kw):
        return Redis(self.lab, **kw)

    STORE = "sqlite"  # one SQLite file in a state directory all brokers share (one host)

    def broker(self, name, redis, **kw):
        state_dir = self.state_dir if self.STORE == "sqlite" else self.lab.path(f"{name}-state")
        opts = dict(registry="redis", redis=f"127.0.0.1:{redis.port}", store=self.STORE, state_dir=state_dir,
                    registry_refresh_ms=1000, registry_ttl_ms=5000, mesh_answer_ms=3000,
                    ping_interval_ms=1000, pong_timeout_ms=1000, max_missed_pongs=2,
                    cancel_grace_ms=5000, reconcile_grace_ms=10000,
                    drain_window_ms=500, drain_deadline_ms=5000)
        opts.update(kw)
        b = self.lab.broker(name=name, **opts)
        wait_for(lambda: b.api("GET", "/readyz")[0] == 200, 10, what=f"{name} ready")
        return b

    def agent(self, rig_id, brokers, **kw):
        opts = dict(plugin_dir=self.plugins, plugin_max_running=64)
        opts.update(kw)
        return self.lab.agent(rig_id, brokers, **opts)

    def post(self, broker, rig_id, expect=202, sleep=None, **fields):
        body = {"kind": "work", "args": {"sleep": str(sleep)} if sleep else {}, **fields}
        status, resp = broker.api("POST", f"/v1/rigs/{rig_id}/commands", body)
        self.assertEqual(status, expect, resp)
        return resp

    def connected_at(self, brokers, rig_ids):
        """rig -> the broker it is connected to, as each broker's own list says."""
        where = {}
        for b in brokers:
            for rid, r in b.rigs().items():
                if rid in rig_ids and r.get("broker") == b.name:
                    where[rid] = b.name
        return where

    def wait_states(self, broker, cmd_ids, states=FINAL, timeout=30.0):
        views, pending = {}, list(cmd_ids)

        def check():
            for cid in list(pending):
                status, v = broker.api("GET", f"/v1/commands/{cid}")
                self.assertEqual(status, 200, (cid, v))
                if v["state"] in states:
                    views[cid] = v
                    pending.remove(cid)
            return not pending
        try:
            wait_for(check, timeout, interval=0.1, what=f"{len(cmd_ids)} commands in {states}")
        except AssertionError:
            stuck = {cid: broker.command(cid)["state"] for cid in pending[:10]}
            raise AssertionError(f"{len(pending)} of {len(cmd_ids)} commands not in {states} "
                                 f"after {timeout}s, e.g. {stuck}") from None
        return views

    def assert_succeeded(self, views):
        for cid, v in views.items():
            self.assertEqual(v["state"], "succeeded", v)
            self.assertEqual(v["result"]["output"], f"done {cid}\n", v)

    def ran(self):
        return collections.Counter(line.split()[0] for line in lines(self.truth))

    def assert_ran_once(self, cmd_ids):
        time.sleep(0.3)
        counts = self.ran()
        twice = {c: n for c, n in counts.items() if n != 1}
        self.assertEqual(twice, {}, "commands that ran more than once")
        self.assertEqual(set(counts), set(cmd_ids),
                         f"missing: {sorted(set(cmd_ids) - set(counts))[:5]}, "
                         f"unexpected: {sorted(set(counts) - set(cmd_ids))[:5]}")

    # ------------------------------------------------------------------ one fleet

    def test_three_brokers_thirty_rigs_one_fleet(self):
        redis = self.redis()
        brokers = [self.broker(f"b{i}", redis) for i in range(3)]
        rigs = [f"rig-{i:02d}" for i in range(30)]
        home = {r: brokers[i % 3] for i, r in enumerate(rigs)}
        for r in rigs:
            self.agent(r, [home[r]] + [b for b in brokers if b is not home[r]])
        # Every broker lists the whole fleet, each rig with the broker that holds it.
        for b in brokers:
            wait_for(lambda b=b: set(rigs) <= set(b.rigs()), 15, what=f"{b.name} sees all 30 rigs")
            listed = b.rigs()
            for r in rigs:
                self.assertEqual(listed[r]["broker"], home[r].name, (b.name, listed[r]))
        self.assertEqual(redis.cli("GET", "rig:rig-00").split("|")[1], "b0")
        # A command through each broker reaches every rig.
        sent = {}
        for b in brokers:
            for r in rigs:
                resp = self.post(b, r)
                if home[r] is not b:
                    self.assertEqual(resp.get("broker"), home[r].name, resp)
                    self.assertGreater(resp["seq"], 0, resp)
                sent[resp["cmd_id"]] = b
        self.assertEqual(len(sent), 90)
        # The store is shared: any broker answers for any command.
        views = self.wait_states(brokers[1], list(sent))
        self.assert_succeeded(views)
        self.assert_ran_once(list(sent))
        # /v1/events on one broker shows what happens on another.
        # Force-reconnect and cancel route to the broker holding the rig.
        status, body = brokers[0].api("POST", "/v1/rigs/rig-01/reconnect")
        self.assertEqual((status, body.get("closed")), (200, True), body)
        long_id = self.post(brokers[2], "rig-04", sleep=30)["cmd_id"]  # rig-04 is on b1
        wait_for(lambda: long_id in self.ran(), 10, what="the long command started")
        status, body = brokers[0].api("POST", f"/v1/commands/{long_id}/cancel")
        self.assertEqual(status, 202, body)
        v = self.wait_states(brokers[2], [long_id], timeout=15)[long_id]
        self.assertIn(v["state"], ("cancelled", "interrupted", "failed"), v)
        # ?wait=done through another broker: followed by the relayed events.
        status, body = brokers[0].api("POST", "/v1/rigs/rig-02/commands?wait=done&timeout_ms=10000",
                                      {"kind": "work"})
        self.assertEqual((status, body["state"]), (202, "succeeded"), body)
        # A retry under the same idempotency key, through another broker: the same command.
        first = self.post(brokers[0], "rig-05", idempotency_key="deploy-42")
        status, again = brokers[1].api("POST", "/v1/rigs/rig-05/commands",
                                       {"kind": "work", "idempotency_key": "deploy-42"})
        self.assertEqual((status, again["cmd_id"]), (200, first["cmd_id"]), again)
        self.wait_states(brokers[2], [first["cmd_id"], body["cmd_id"]])
        self.assertEqual(self.ran()[first["cmd_id"]], 1)
        # An unknown rig is still 404 (nobody holds it), through any broker.
        status, body = brokers[2].api("POST", "/v1/rigs/rig-none/commands", {"kind": "work"})
        self.assertEqual(status, 404, body)

    def test_control_stream_and_events_through_another_broker(self):
        redis = self.redis()
        a, b = self.broker("sa", redis), self.broker("sb", redis)
        rigs = ["rig-s0", "rig-s1", "rig-s2"]
        for r in rigs:
            self.agent(r, [b])
        wait_for(lambda: set(rigs) <= set(a.rigs()), 15, what="sa sees sb's rigs")
        # /v1/events on sa, while sb runs the commands.
        conn = http.client.HTTPConnection(a.control_host, a.control_port, timeout=20)
        conn.request("GET", "/v1/events?types=command_done")
        events = conn.getresponse()
        self.assertEqual(events.status, 200)
        frame = "\n".join(control_stream.send(f"r{i}", r, "work") for i, r in enumerate(rigs)) + "\n"

        def finished(lines):
            return all(any(l["op"] == "done" for l in control_stream.by_ref(lines, f"r{i}")) for i in range(len(rigs)))

        lines = asyncio.run(control_stream.exchange(a, [frame], finished))
        ids = set()
        for i, r in enumerate(rigs):
            ops = [l["op"] for l in control_stream.by_ref(lines, f"r{i}")]
            self.assertEqual(ops, ["queued", "acked", "done"], lines)
            queued = control_stream.by_ref(lines, f"r{i}")[0]
            self.assertEqual(queued["rig_id"], r)
            self.assertGreater(queued["seq"], 0)
            self.assertEqual(control_stream.by_ref(lines, f"r{i}")[2]["detail"], "succeeded")
            ids.add(queued["cmd_id"])
        seen = set()
        deadline = time.monotonic() + 10
        while seen != ids and time.monotonic() < deadline:
            line = events.fp.readline().decode()
            if line.startswith("data:"):
                seen.add(json.loads(line[5:])["cmd_id"])
        conn.close()
        self.assertEqual(seen & ids, ids, "sa's event stream missed sb's command_done events")
        self.assert_ran_once(ids)

    # ------------------------------------------------------------------ jobs

    def start_job(self, broker, **body):
        status, resp = broker.api("POST", "/v1/jobs", {"kind": "work", **body})
        self.assertEqual(status, 202, resp)
        return resp

    def wait_job(self, broker, job_id, timeout=30.0):
        seen = {}

        def check():
            status, j = broker.api("GET", f"/v1/jobs/{job_id}")
            self.assertEqual(status, 200, j)
            seen["job"] = j
            return j["state"] != "running"
        try:
            wait_for(check, timeout, interval=0.2, what=f"job {job_id} finished")
        except AssertionError:
            raise AssertionError(f"job still running after {timeout}s: {seen.get('job')}") from None
        return seen["job"]

    def test_job_through_one_broker_reaches_rigs_on_every_broker(self):
        redis = self.redis()
        brokers = [self.broker(f"j{i}", redis) for i in range(3)]
        rigs = [f"rig-j{i:02d}" for i in range(9)]
        for i, r in enumerate(rigs):
            self.agent(r, [brokers[i % 3]])
        wait_for(lambda: set(rigs) <= set(brokers[0].rigs()), 15, what="j0 sees the whole fleet")
        # Selected from the whole fleet, sent to each rig through the broker holding it.
        job = self.start_job(brokers[0], args={"sleep": "0.2"}, targets={"glob": "rig-j*"}, max_concurrency=4)
        self.assertEqual(job["counts"]["total"], 9, job)
        final = self.wait_job(brokers[1], job["job_id"])  # and followed from any broker
        self.assertEqual(final["state"], "done", final)
        self.assertEqual(final["counts"]["ok"], 9, final)
        self.assertEqual({r["rig_id"] for r in final["rigs"]}, set(rigs))
        cmd_ids = [r["cmd_id"] for r in final["rigs"]]
        views = self.wait_states(brokers[2], cmd_ids)
        self.assert_succeeded(views)
        self.assertEqual({v["job_id"] for v in views.values()}, {job["job_id"]})
        self.assert_ran_once(cmd_ids)
        # Listed by every broker; driven by the one that started it only.
        for b in brokers:
            status, page = b.api("GET", "/v1/jobs")
            self.assertEqual(status, 200, page)
            self.assertIn(job["job_id"], [j["job_id"] for j in page["jobs"]], b.name)
        self.assertEqual(redis.cli("GET", f"jobhold:{job['job_id']}"), "job|j0")
        for b in brokers[1:]:
            self.assertNotIn(f"job {job['job_id']} taken over", b.log())

    def test_job_whose_broker_is_killed_is_taken_over_and_finished_nothing_twice(self):
        redis = self.redis()
        brokers = [self.broker(f"t{i}", redis, registry_ttl_ms=60000) for i in range(3)]
        victim, others = brokers[0], brokers[1:]
        rigs = [f"rig-t{i:02d}" for i in range(8)]
        for i, r in enumerate(rigs):
            home = brokers[i % 3]
            self.agent(r, [home] + [b for b in brokers if b is not home])
        wait_for(lambda: set(rigs) <= set(victim.rigs()), 15, what="t0 sees the whole fleet")
        # Two rigs at a time, a second each: the job outlives its broker.
        job = self.start_job(victim, args={"sleep": "1"}, targets={"glob": "rig-t*"}, max_concurrency=2)
        job_id = job["job_id"]
        wait_for(lambda: len(self.ran()) >= 1, 10, what="the job's first commands running")
        victim.kill()
        t0 = time.monotonic()
        final = self.wait_job(others[0], job_id, timeout=45)
        took = time.monotonic() - t0
        self.assertEqual(final["state"], "done", final)
        self.assertEqual(final["counts"]["ok"], 8, final)
        # Taken over when the next look found its holder's channel empty, not at the hold's 60 s TTL.
        self.assertLess(took, 30, "the job waited for its hold to expire")
        adopters = [b for b in others if f"job {job_id} taken over" in b.log()]
        self.assertEqual(len(adopters), 1, "exactly one broker takes the job over")
        self.assertEqual(redis.cli("GET", f"jobhold:{job_id}"), f"job|{adopters[0].name}")
        cmd_ids = [r["cmd_id"] for r in final["rigs"]]
        self.assert_succeeded(self.wait_states(others[1], cmd_ids))
        self.assert_ran_once(cmd_ids)

    def test_live_output_of_a_command_on_another_broker(self):
        redis = self.redis()
        a, b = self.broker("oa", redis), self.broker("ob", redis)
        self.agent("rig-o", [b])
        wait_for(lambda: "rig-o" in a.rigs(), 15, what="oa sees ob's rig")
        cmd_id = self.post(a, "rig-o", kind="steps")["cmd_id"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
        t0, lines = time.monotonic(), []
        with subprocess.Popen([harness_binary("fleetctl"), "--control", a.control_url, "logs", "-f", cmd_id],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as p:
            for line in p.stdout:
                lines.append((time.monotonic() - t0, line.rstrip("\n")))
            err = p.stderr.read()
            rc = p.wait(timeout=30)
        self.assertEqual(rc, 0, err)
        self.assertEqual([t for _, t in lines], ["step 1", "step 2", "step 3", "step 4"], err)
        self.assertGreater(lines[-1][0] - lines[0][0], 1.0, f"not live through broker oa: {lines}")
        self.assertIn("succeeded, exit code 0", err)

    # ------------------------------------------------------------------ fencing

    def test_cloned_rig_identity_on_another_broker_is_refused_4409(self):
        redis = self.redis()
        a, b = self.broker("fa", redis), self.broker("fb", redis)
        self.agent("rig-clone", [a])
        a.wait_rigs(["rig-clone"])
        boot = a.rigs()["rig-clone"]["boot_id"]
        # The same certificate on a second machine (another agent process: a newer
        # boot_id would take over; the same one, as a copied state directory gives, is a clone).
        clone = self.agent("rig-clone", [b], name="agent-clone",
                           state_dir=self.lab.path("state-rig-clone"))
        clone.wait_log(r"4409", timeout=15)
        time.sleep(2.5)  # two refresh ticks: still one live session, still on a
        self.assertEqual(a.rigs()["rig-clone"]["boot_id"], boot)
        self.assertNotIn("rig-clone", {r for r, v in b.rigs().items() if v.get("broker") == "fb"})
        self.assertRegex(b.log(), r"rig=rig-clone .*4409|rig is live on broker fa")


    # ------------------------------------------------------------------ a broker dies

    def test_broker_kill_9_rigs_move_pending_delivered_nothing_twice(self):
        redis = self.redis()
        # A TTL far beyond the bound below: the rigs must be taken over, not wait for expiry.
        brokers = [self.broker(f"k{i}", redis, registry_ttl_ms=60000) for i in range(3)]
        victim, others = brokers[0], brokers[1:]
        rigs = [f"rig-k{i:02d}" for i in range(12)]
        home = {r: brokers[i % 3] for i, r in enumerate(rigs)}
        for r in rigs:
            self.agent(r, [home[r]] + [b for b in brokers if b is not home[r]])
        wait_for(lambda: set(rigs) <= set(others[0].rigs()), 15, what="the fleet seen from k1")
        victims = [r for r in rigs if home[r] is victim]
        # Long ones, acknowledged and running when the broker dies (posted
        # through another broker too): their RESULTs come after the kill.
        long_ids = [self.post(victim, r, sleep=3)["cmd_id"] for r in victims]
        long_ids += [self.post(others[0], r, sleep=3)["cmd_id"] for r in victims]
        wait_for(lambda: set(long_ids) <= set(self.ran()), 15, what="the long commands started")
        # Many short ones, some still in flight at the kill: each was answered 202, so recorded.
        short_ids = [self.post(victim, r, sleep=0.05)["cmd_id"] for _ in range(15) for r in victims]
        victim.kill()
        t0 = time.monotonic()
        # Its rigs are held by the others at once: nobody listens on its channel.
        wait_for(lambda: set(victims) <= set(self.connected_at(others, victims)), 20,
                 what="the dead broker's rigs on the others")
        moved_in = time.monotonic() - t0
        self.assertLess(moved_in, 10, "the rigs waited for the registry TTL instead of taking over")
        taken = 0
        for b in others:
            status, text = b.api("GET", "/metrics")
            m = re.search(r"^fleetlink_broker_rigs_taken_over_total (\d+)$", text, re.M)
            self.assertIsNotNone(m, text[:500])
            taken += int(m.group(1))
        self.assertGreaterEqual(taken, 1, "no rig was taken over from the dead broker")
        all_ids = long_ids + short_ids
        views = self.wait_states(others[1], all_ids, timeout=40)
        self.assert_succeeded(views)
        self.assert_ran_once(all_ids)
        # Commands for the moved rigs through any surviving broker.
        after = [self.post(b, r)["cmd_id"] for b in others for r in victims]
        self.assert_succeeded(self.wait_states(others[0], after))
        for b in others:
            self.assertNotRegex(b.log(), r"result for cmd=\S+ ignored: (?!late: )")

    # ------------------------------------------------------------------ Redis trouble

    def test_redis_away_local_rigs_served_others_503_then_reregistered_without_reconnects(self):
        redis = self.redis()
        a, b = self.broker("ra", redis), self.broker("rb", redis)
        self.agent("rig-ra", [a])
        self.agent("rig-rb", [b])
        wait_for(lambda: {"rig-ra", "rig-rb"} <= set(a.rigs()), 15, what="both rigs seen from ra")
        hellos_before = a.log().count("hello rig=rig-ra"), b.log().count("hello rig=rig-rb")
        redis.stop()
        wait_for(lambda: a.api("GET", "/readyz")[0] == 503, 10, what="ra not ready")
        status, body = a.api("GET", "/readyz")
        self.assertIn("registry_unavailable", " ".join(body["because"]), body)
        # Its own rig: served. Another broker's: a clear 503.
        mine = self.post(a, "rig-ra")["cmd_id"]
        self.assert_succeeded(self.wait_states(a, [mine]))
        status, body = a.api("POST", "/v1/rigs/rig-rb/commands", {"kind": "work"})
        self.assertEqual(status, 503, body)
        self.assertEqual(body["error"], "registry_unavailable", body)
        # Redis back on its port, empty (no persistence): every live rig's entry is written again.
        redis.start()
        wait_for(lambda: "|ra" in redis.cli("GET", "rig:rig-ra"), 15, what="rig-ra re-registered")
        wait_for(lambda: "|rb" in redis.cli("GET", "rig:rig-rb"), 15, what="rig-rb re-registered")
        wait_for(lambda: a.api("GET", "/readyz")[0] == 200, 10, what="ra ready again")
        routed = self.post(a, "rig-rb")
        self.assertEqual(routed.get("broker"), "rb", routed)
        self.assert_succeeded(self.wait_states(a, [mine, routed["cmd_id"]]))
        # Nobody reconnected.
        self.assertEqual((a.log().count("hello rig=rig-ra"), b.log().count("hello rig=rig-rb")), hellos_before)
        self.assert_ran_once([mine, routed["cmd_id"]])

    def test_redis_restart_with_aof_mid_traffic_loses_no_acknowledged_command(self):
        redis = self.redis(appendonly=True)
        # Keepalive looser than the other tests': what is checked is that Redis going
        # away closes nobody, not how fast a loaded machine answers pings.
        relaxed = dict(ping_interval_ms=3000, pong_timeout_ms=3000, max_missed_pongs=3)
        a, b = self.broker("ta", redis, **relaxed), self.broker("tb", redis, **relaxed)
        rigs = ["rig-t0", "rig-t1", "rig-t2", "rig-t3"]
        for i, r in enumerate(rigs):
            self.agent(r, [a if i % 2 == 0 else b])
        wait_for(lambda: set(rigs) <= set(a.rigs()) and set(rigs) <= set(b.rigs()), 15, what="the fleet")
        accepted, refused = [], 0
        deadline = time.monotonic() + 6
        restarted = False
        i = 0
        while time.monotonic() < deadline:
            if not restarted and time.monotonic() > deadline - 4:
                redis.stop()
                redis.start()
                restarted = True
            broker = a if i % 2 == 0 else b
            status, body = broker.api("POST", f"/v1/rigs/{rigs[i % 4]}/commands", {"kind": "work"})
            if status == 202:
                accepted.append(body["cmd_id"])
            else:
                self.assertIn(status, (503, 504), body)  # refused, never half-taken
                refused += 1
            i += 1
        self.assertGreater(len(accepted), 50)
        self.assert_succeeded(self.wait_states(a, accepted, timeout=40))
        self.assert_ran_once(accepted)
        for r in rigs:
            self.assertEqual((a.log() + b.log()).count(f"hello rig={r} "), 1, f"{r} reconnected")

    # ------------------------------------------------------------------ one port

    def test_brokers_on_one_port_with_so_reuseport_form_one_fleet(self):
        redis = self.redis()
        a = self.broker("pa", redis)
        b = self.broker("pb", redis, listen_port=a.listen_port)
        rigs = [f"rig-p{i}" for i in range(16)]
        for r in rigs:
            self.agent(r, [a])  # one URL: the kernel spreads the connections
        wait_for(lambda: set(rigs) <= set(a.rigs()) and set(rigs) <= set(b.rigs()), 20, what="one fleet")
        where = self.connected_at([a, b], rigs)
        self.assertEqual(set(where), set(rigs))
        self.assertTrue({"pa", "pb"} <= set(where.values()), f"the kernel sent every rig to one broker: {where}")
        ids = [self.post(a, r)["cmd_id"] for r in rigs] + [self.post(b, r)["cmd_id"] for r in rigs]
        self.assert_succeeded(self.wait_states(b, ids))
        self.assert_ran_once(ids)


class SeveralBrokersRedisStoreTest(SeveralBrokersTest):
    """The same, with the command store on Redis (--store redis) and a state
    directory per broker, as brokers on separate hosts have."""

    STORE = "redis"

    def test_redis_away_local_rigs_served_others_503_then_reregistered_without_reconnects(self):
        # The store is Redis too: while it is away nothing new can be recorded,
        # so nothing new is promised (503 store_unavailable); rigs stay connected,
        # and when it is back their entries are written again and work goes on.
        redis = self.redis()
        a, b = self.broker("ra", redis), self.broker("rb", redis)
        self.agent("rig-ra", [a])
        self.agent("rig-rb", [b])
        wait_for(lambda: {"rig-ra", "rig-rb"} <= set(a.rigs()), 15, what="both rigs seen from ra")
        hellos_before = a.log().count("hello rig=rig-ra"), b.log().count("hello rig=rig-rb")
        redis.stop()
        wait_for(lambda: a.api("GET", "/readyz")[0] == 503, 10, what="ra not ready")
        status, body = a.api("POST", "/v1/rigs/rig-ra/commands", {"kind": "work"})
        self.assertEqual((status, body["error"]), (503, "store_unavailable"), body)
        status, body = a.api("POST", "/v1/rigs/rig-rb/commands", {"kind": "work"})
        self.assertEqual((status, body["error"]), (503, "registry_unavailable"), body)
        redis.start()
        wait_for(lambda: "|ra" in redis.cli("GET", "rig:rig-ra"), 15, what="rig-ra re-registered")
        wait_for(lambda: "|rb" in redis.cli("GET", "rig:rig-rb"), 15, what="rig-rb re-registered")
        wait_for(lambda: a.api("GET", "/readyz")[0] == 200, 10, what="ra ready again")
        mine = self.post(a, "rig-ra")["cmd_id"]
        routed = self.post(a, "rig-rb")
        self.assertEqual(routed.get("broker"), "rb", routed)
        self.assert_succeeded(self.wait_states(b, [mine, routed["cmd_id"]]))
        self.assertEqual((a.log().count("hello rig=rig-ra"), b.log().count("hello rig=rig-rb")), hellos_before)
        self.assert_ran_once([mine, routed["cmd_id"]])


if __name__ == "__main__":
    unittest.main()
