"""The command record end to end (issue 12, point 8): real brokers with their
SQLite store, real agents, and a ground truth written by what actually runs.

Every command here is an executable plugin (`fleetlink-work`) that appends its
cmd_id to truth.log when it starts and to ends.log when it ends, a suite that
appends to suites.log, or a reboot whose recorder appends to reboots.log. "Ran
exactly once" is counted from those files, never assumed. For each scenario:
every command ends in the state the contract (../shared/DESIGN.md, "Delivery and
the command record"; docs/PROTOCOL.md section 6) names, its result is present
and as expected, and it ran exactly once.

- the broker killed -9 mid-stream (130 commands to four agents, some long) and
  restarted on the same store and ports;
- SIGTERM drain with long commands, to a second broker sharing the state
  directory and the port (SO_REUSEPORT), and to the restarted broker;
- an agent frozen (SIGSTOP) with commands written to it, closed 4002, thawed;
- an agent killed -9 mid-command and restarted on its state directory;
- reboot confirmed by a new boot_id, and timed out without one;
- offline hold (delivered on WELCOME), a delivery deadline passing offline, a
  cancel of a held command;
- idempotent POST (idempotency_key, client cmd_id; across a restart; conflict);
- a full state directory on the agent (a real tmpfs): rejected, nothing runs;
- cancel of a running suite, and the execution deadline (timed_out, the suite
  stopped by the CANCEL).
"""
import collections
import errno
import json
import os
import re
import signal
import subprocess
import time
import unittest
import uuid

from harness import Broker, LabTestCase, wait_for

FINAL = Broker.FINAL


def uuid7():
    """A lower-case UUIDv7, as a client naming its own command would make one."""
    b = bytearray(int(time.time() * 1000).to_bytes(6, "big") + os.urandom(10))
    b[6] = 0x70 | (b[6] & 0x0F)
    b[8] = 0x80 | (b[8] & 0x3F)
    return str(uuid.UUID(bytes=bytes(b)))


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().splitlines()


def pid_gone(pid):
    """True once pid no longer exists (or is a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


class CommandRecordTest(LabTestCase):
    # ------------------------------------------------------------------ set-up helpers

    def setUp(self):
        super().setUp()
        self.truth = self.lab.path("truth.log")    # plugin: "<cmd_id> <pid>" at start
        self.ends = self.lab.path("ends.log")      # plugin: "<cmd_id>" when it ends
        self.suites_log = self.lab.path("suites.log")
        self.reboots = self.lab.path("reboots.log")
        self.plugins = self.lab.path("plugins")
        os.makedirs(self.plugins)
        prog = os.path.join(self.plugins, "fleetlink-work")
        with open(prog, "w") as f:
            # args {"sleep": "<s>"} makes it long. One short append per event (atomic).
            f.write("#!/bin/sh\n"
                    "read -r req\n"
                    f"echo \"$FLEETLINK_CMD_ID $$\" >> '{self.truth}'\n"
                    "s=$(printf '%s\\n' \"$req\" | sed -n 's/.*\"sleep\":\"\\([0-9.]*\\)\".*/\\1/p')\n"
                    "if [ -n \"$s\" ]; then sleep \"$s\"; fi\n"
                    f"echo \"$FLEETLINK_CMD_ID\" >> '{self.ends}'\n"
                    "echo \"done $FLEETLINK_CMD_ID\"\n")
        os.chmod(prog, 0o755)
        self.suites = self.lab.path("suites.json")
        suites = {}
        for sid in ("long-cancel", "long-timeout"):
            suites[sid] = {
                "argv": ["/bin/sh", "-c",
                         f"echo \"start {sid} $$\" >> '{self.suites_log}'; "
                         f"trap 'echo \"term {sid}\" >> \"{self.suites_log}\"; exit 143' TERM; "
                         "sleep 60 & wait"],
                "timeout_s": 120, "kill_grace_s": 2}
        with open(self.suites, "w") as f:
            json.dump({"suites": suites}, f)

    def broker(self, name="broker", **kw):
        opts = dict(cancel_grace_ms=5000, reconcile_grace_ms=10000,
                    drain_window_ms=500, drain_deadline_ms=5000)
        opts.update(kw)
        return self.lab.broker(name=name, **opts)

    def restart(self, old, name, **kw):
        """A broker on old's state directory and ports (old has exited)."""
        return self.broker(name=name, broker_id=old.name, state_dir=old.state_dir,
                           listen_port=old.listen_port, control_port=old.control_port, **kw)

    def agent(self, rig_id, broker, name=None, state_dir=None, **kw):
        opts = dict(plugin_dir=self.plugins, plugin_max_running=256, suites=self.suites,
                    reboot_command=f"echo {rig_id} >> '{self.reboots}'", reboot_delay_ms=100)
        opts.update(kw)
        return self.lab.agent(rig_id, broker, name=name, state_dir=state_dir, **opts)

    # ------------------------------------------------------------------ checks

    def post(self, broker, rig_id, kind="work", args=None, expect=202, **fields):
        body = {"kind": kind, "args": {k: str(v) for k, v in (args or {}).items()}, **fields}
        status, resp = broker.api("POST", f"/v1/rigs/{rig_id}/commands", body)
        self.assertEqual(status, expect, resp)
        return resp

    def work(self, broker, rig_id, sleep=None, **fields):
        """POST a ground-truth command; its cmd_id."""
        return self.post(broker, rig_id, args={"sleep": sleep} if sleep else {}, **fields)["cmd_id"]

    def wait_states(self, broker, cmd_ids, states=FINAL, timeout=30.0):
        """Every command in one of states; {cmd_id: view}."""
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
            self.assertIsNotNone(v["result"], v)
            self.assertEqual(v["result"]["status"], "ok", v)
            self.assertEqual(v["result"]["output"], f"done {cid}\n", v)

    def ran(self):
        """cmd_id -> how many times the plugin started for it."""
        return collections.Counter(line.split()[0] for line in lines(self.truth))

    def assert_ran_once(self, ran_once, never=()):
        """Each of ran_once started exactly once, none of never started, nothing else ran."""
        time.sleep(0.3)  # a second run would have appended by now
        counts = self.ran()
        twice = {c: n for c, n in counts.items() if n != 1}
        self.assertEqual(twice, {}, "commands that ran more than once")
        self.assertEqual(set(counts), set(ran_once),
                         f"missing: {sorted(set(ran_once) - set(counts))[:5]}, "
                         f"unexpected: {sorted(set(counts) - set(ran_once))[:5]}")
        for cid in never:
            self.assertNotIn(cid, counts)

    def no_result_refused(self, broker):
        """No RESULT was dropped (a late one, e.g. a replay answering a redelivery, is kept: fine)."""
        dropped = [l for l in broker.log().splitlines()
                   if re.search(r"result for cmd=\S+ ignored: (?!late: )", l)]
        self.assertEqual(dropped, [], "RESULTs the broker dropped")

    # ------------------------------------------------------------------ 1. kill -9

    def test_broker_kill_9_mid_stream_restart_keeps_every_command_and_runs_each_once(self):
        b1 = self.broker(name="k1")
        rigs = [f"rig-k{i}" for i in range(4)]
        agents = {r: self.agent(r, b1) for r in rigs}
        b1.wait_rigs(rigs)
        # Long ones first, running when the broker dies; they finish while it is
        # down, so their RESULTs are spooled by the agents.
        long_ids = [self.work(b1, r, sleep=4) for r in rigs for _ in range(5)]
        wait_for(lambda: set(long_ids) <= set(self.ran()), 15, what="the long commands started")
        short_ids = [self.work(b1, r, sleep=0.1) for _ in range(28) for r in rigs]
        b1.kill()  # every one of them was answered 202, so recorded
        ended = set(lines(self.ends))
        self.assertFalse(ended & set(long_ids), "the long commands were still running at the kill")
        all_ids = long_ids + short_ids
        self.assertGreaterEqual(len(all_ids), 100)
        in_flight = len(set(short_ids) - ended)
        wait_for(lambda: set(long_ids) <= set(lines(self.ends)), 15, what="the long commands ended")

        b2 = self.restart(b1, "k2")
        # No 404 for an earlier command, before a rig is even back.
        for cid in all_ids:
            status, v = b2.api("GET", f"/v1/commands/{cid}")
            self.assertEqual(status, 200, (cid, v))
        views = self.wait_states(b2, all_ids, timeout=45)
        self.assert_succeeded(views)
        self.assert_ran_once(all_ids)
        # The RESULTs finished while no broker was up came from the agents' spools
        # and were taken by the new broker process.
        for r in rigs:
            self.assertRegex(agents[r].log(), r"result sent from spool cmd=")
        for cid in long_ids:  # taken by the new broker process
            self.assertRegex(b2.log(), rf"result rig=rig-k\d cmd={cid} status=ok")
        self.no_result_refused(b2)
        print(f"\nkill -9 with {len(all_ids)} commands, {in_flight} short ones not finished at the kill")

    # ------------------------------------------------------------------ 2. drain

    def long_commands_acked(self, broker, rigs, per_rig=2, sleep=3):
        ids = [self.work(broker, r, sleep=sleep) for r in rigs for _ in range(per_rig)]
        self.wait_states(broker, ids, ("acked", "running"), timeout=15)
        wait_for(lambda: set(ids) <= set(self.ran()), 10, what="the long commands started")
        return ids

    def test_sigterm_drain_hands_long_commands_to_a_second_broker_on_the_same_store_and_port(self):
        a = self.broker(name="da")
        rigs = [f"rig-d{i}" for i in range(3)]
        for r in rigs:
            self.agent(r, a)
        a.wait_rigs(rigs)
        done_before = [self.work(a, r) for r in rigs]
        self.assert_succeeded(self.wait_states(a, done_before))
        ids = self.long_commands_acked(a, rigs)
        # B shares A's state directory and listening port (SO_REUSEPORT); the rigs
        # reconnect to the same URL and land on B once A stops accepting.
        b = self.broker(name="db", state_dir=a.state_dir, listen_port=a.listen_port)
        a.signal(signal.SIGTERM)
        self.assertEqual(a.proc.wait(10), 0, a.log()[-2000:])
        ended = set(lines(self.ends))
        self.assertFalse(ended & set(ids), "the long commands finished after the drain")
        b.wait_rigs(rigs, timeout=15)
        views = self.wait_states(b, ids, timeout=20)
        self.assert_succeeded(views)
        self.assert_succeeded({c: b.command(c) for c in done_before})
        self.assert_ran_once(ids + done_before)
        self.no_result_refused(b)
        # A later command through B runs too.
        later = self.work(b, rigs[0])
        self.assert_succeeded(self.wait_states(b, [later]))

    def test_sigterm_drain_then_restart_on_the_same_store_keeps_every_result(self):
        a = self.broker(name="dr")
        rigs = [f"rig-r{i}" for i in range(3)]
        for r in rigs:
            self.agent(r, a)
        a.wait_rigs(rigs)
        ids = self.long_commands_acked(a, rigs)
        a.signal(signal.SIGTERM)
        self.assertEqual(a.proc.wait(10), 0, a.log()[-2000:])
        self.assertFalse(set(lines(self.ends)) & set(ids), "the long commands finished after the drain")
        time.sleep(0.5)
        b = self.restart(a, "dr2")
        views = self.wait_states(b, ids, timeout=20)
        self.assert_succeeded(views)
        self.assert_ran_once(ids)
        self.no_result_refused(b)

    # ------------------------------------------------------------------ 3. SIGSTOP

    def test_frozen_agent_closed_4002_then_thawed_gets_its_commands_again_and_runs_each_once(self):
        b = self.broker(ping_interval_ms=200, pong_timeout_ms=300, max_missed_pongs=2)
        a = self.agent("rig-f", b)
        b.wait_rigs(["rig-f"])
        running = [self.work(b, "rig-f", sleep=2.5) for _ in range(2)]
        self.wait_states(b, running, ("acked", "running"))
        a.signal(signal.SIGSTOP)
        try:
            queued = [self.work(b, "rig-f", sleep=0.1) for _ in range(12)]
            # Its delivery deadline passes while the rig is frozen with it in its socket buffer.
            late = self.work(b, "rig-f", deliver_within_s=1)
            t_late = time.monotonic()
            b.wait_rig_gone("rig-f", timeout=10)
            time.sleep(max(0.0, t_late + 1.3 - time.monotonic()))
            self.assertRegex(b.log(), r"rig=rig-f.*4002")
            for cid in queued:  # written to the frozen socket, waiting for the next connection
                self.assertEqual(b.command(cid)["state"], "sent")
            for cid in running:
                self.assertIn(b.command(cid)["state"], ("acked", "running"))
        finally:
            a.signal(signal.SIGCONT)
        b.wait_rigs(["rig-f"], timeout=15)
        # The rig had `late` in its socket buffer and ran it when thawed: the broker,
        # its delivery deadline past, asked (CANCEL) instead of sending it again, and
        # the rig's RESULT decides. Never "undeliverable" for a command that ran.
        v = self.wait_states(b, [late], timeout=20)[late]
        self.assertIn(late, self.ran())
        self.assertEqual(v["state"], "succeeded", v)
        self.assertEqual(v["attempts"], 1, v)
        views = self.wait_states(b, running + queued, timeout=20)
        self.assert_succeeded(views)
        self.assert_succeeded({late: v})
        self.assert_ran_once(running + queued + [late])
        self.no_result_refused(b)
        dups = sum(1 for v in views.values() if v["duplicate"])
        print(f"\nSIGSTOP: {dups} of {len(views)} answered as duplicates after the thaw")

    # ------------------------------------------------------------------ 4. agent kill -9

    def test_agent_kill_9_mid_command_ends_interrupted_and_never_runs_again(self):
        b = self.broker(reconcile_grace_ms=20000)  # the agent's own report, not the grace, decides
        a = self.agent("rig-x", b)
        b.wait_rigs(["rig-x"])
        cid = self.work(b, "rig-x", sleep=30)
        old_boot = self.wait_states(b, [cid], ("acked", "running"))[cid]["acked_boot_id"]
        self.assertEqual(old_boot, b.rigs()["rig-x"]["boot_id"])
        wait_for(lambda: cid in self.ran(), 10, what="the plugin started")
        # Two more written to it while it is frozen, so they die unread in its socket
        # buffer: one whose delivery deadline passes before the rig is back (the
        # broker asks the rig with a CANCEL: "never received", undeliverable), one
        # sent again on the next connection.
        a.signal(signal.SIGSTOP)
        unread_expired = self.work(b, "rig-x", deliver_within_s=1)
        unread = self.work(b, "rig-x")
        t_unread = time.monotonic()
        self.wait_states(b, [unread_expired, unread], ("sent",))
        a.kill()
        # PR_SET_PDEATHSIG ends the plugin's shell with the agent; its sleep would be
        # stopped by the next start (test_agent_crash_cleanup.py). Here the test ends
        # it at once, so the restart below has nothing to stop.
        pid = int(next(l for l in lines(self.truth) if l.startswith(cid)).split()[1])
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.assertIn(b.command(cid)["state"], ("acked", "running"))
        time.sleep(max(0.0, t_unread + 1.3 - time.monotonic()))
        a2 = self.agent("rig-x", b, name="agent-rig-x-2", state_dir=a.state_dir)
        v = self.wait_states(b, [cid], timeout=10)[cid]
        self.assertEqual(v["state"], "interrupted", v)
        self.assertIsNotNone(v["result"], "the agent's interrupted RESULT is kept")
        self.assertEqual(v["result"]["status"], "failed")
        self.assertEqual(v["result"]["detail"], f"interrupted: accepted by an earlier agent process "
                                                f"(boot_id {old_boot}) that ended before it finished")
        self.assertNotEqual(b.rigs()["rig-x"]["boot_id"], old_boot)
        a2.wait_log(rf"cmd={cid} interrupted: accepted by boot_id={old_boot}")
        # Posting it again by its cmd_id returns it, it does not run again.
        again = self.post(b, "rig-x", args={"sleep": 30}, cmd_id=cid, expect=200)
        self.assertTrue(again["existing"])
        self.assertEqual(again["state"], "interrupted")
        v = self.wait_states(b, [unread_expired], timeout=10)[unread_expired]
        self.assertEqual(v["state"], "undeliverable", v)
        self.assertIn("never received", v["detail"])
        self.assert_succeeded(self.wait_states(b, [unread]))
        later = self.work(b, "rig-x")
        self.assert_succeeded(self.wait_states(b, [later]))
        self.assert_ran_once([cid, unread, later], never=[unread_expired])
        self.no_result_refused(b)

    # ------------------------------------------------------------------ 5. reboot

    def test_reboot_succeeds_on_a_new_boot_id_and_times_out_without_one(self):
        b = self.broker()
        a = self.agent("rig-b1", b)
        self.agent("rig-b2", b)
        b.wait_rigs(["rig-b1", "rig-b2"])
        confirmed = self.post(b, "rig-b1", "reboot", timeout_s=30)["cmd_id"]
        never = self.post(b, "rig-b2", "reboot", timeout_s=3)["cmd_id"]
        t0 = time.monotonic()
        for cid in (confirmed, never):
            v = self.wait_states(b, [cid], ("running",))[cid]
            self.assertEqual(v["result"]["status"], "scheduled", v)  # scheduled is not done
        wait_for(lambda: sorted(lines(self.reboots)) == ["rig-b1", "rig-b2"], 10,
                 what="both reboot commands ran")
        old_boot = b.rigs()["rig-b1"]["boot_id"]
        a.stop()  # "the rig rebooted": the agent comes back with a new boot_id
        self.agent("rig-b1", b, name="agent-rig-b1-2", state_dir=a.state_dir)
        v = self.wait_states(b, [confirmed], timeout=10)[confirmed]
        self.assertEqual(v["state"], "succeeded", v)
        new_boot = b.rigs()["rig-b1"]["boot_id"]
        self.assertNotEqual(new_boot, old_boot)
        self.assertIn(new_boot, v["detail"])
        v = self.wait_states(b, [never], timeout=10)[never]
        self.assertEqual(v["state"], "timed_out", v)
        self.assertGreaterEqual(time.monotonic() - t0, 2.5)
        self.assertIn("new boot_id", v["detail"])
        self.assertEqual(v["result"]["status"], "scheduled")
        time.sleep(0.5)
        self.assertEqual(sorted(lines(self.reboots)), ["rig-b1", "rig-b2"], "each reboot ran once")
        self.no_result_refused(b)

    # ------------------------------------------------------------------ 6. offline hold, cancel

    def test_offline_rig_holds_commands_until_welcome_expires_late_ones_and_cancels_at_once(self):
        b = self.broker()
        a = self.agent("rig-o", b)
        b.wait_rigs(["rig-o"])
        first = self.work(b, "rig-o")
        self.assert_succeeded(self.wait_states(b, [first]))
        a.stop()
        b.wait_rig_gone("rig-o")
        self.assertEqual(b.rigs(connected_only=False)["rig-o"]["state"], "offline")
        held = []
        for _ in range(3):
            r = self.post(b, "rig-o", args={})
            self.assertTrue(r["held"], r)
            self.assertIsNone(r["seq"], r)
            self.assertEqual(r["state"], "queued")
            held.append(r["cmd_id"])
        expired = self.work(b, "rig-o", deliver_within_s=1)
        cancelled = self.work(b, "rig-o")
        status, body = b.api("POST", f"/v1/commands/{cancelled}/cancel")
        self.assertEqual((status, body["state"], body["cancel_sent"]), (200, "cancelled", False), body)
        v = self.wait_states(b, [expired], timeout=10)[expired]
        self.assertEqual(v["state"], "undeliverable", v)
        self.assertIn("deliver_within_s", v["detail"])
        for cid in held:
            self.assertEqual(b.command(cid)["state"], "queued")
        time.sleep(1.0)  # offline a few seconds in all
        self.agent("rig-o", b, name="agent-rig-o-2", state_dir=a.state_dir)
        views = self.wait_states(b, held, timeout=15)
        self.assert_succeeded(views)
        self.assertEqual(b.command(expired)["state"], "undeliverable")
        self.assertEqual(b.command(cancelled)["state"], "cancelled")
        self.assertIsNone(b.command(cancelled)["result"])
        self.assert_ran_once([first] + held, never=[expired, cancelled])

    # ------------------------------------------------------------------ 7. idempotent POST

    def test_repeated_post_returns_the_same_command_which_runs_once(self):
        b = self.broker(name="ip")
        self.agent("rig-i", b)
        b.wait_rigs(["rig-i"])
        body = {"kind": "work", "args": {"sleep": "0.5"}, "idempotency_key": "nightly-2026-12-01"}
        s1, r1 = b.api("POST", "/v1/rigs/rig-i/commands", body)
        s2, r2 = b.api("POST", "/v1/rigs/rig-i/commands", body)
        self.assertEqual((s1, r1["existing"]), (202, False), r1)
        self.assertEqual((s2, r2["existing"]), (200, True), r2)
        self.assertEqual(r1["cmd_id"], r2["cmd_id"])
        keyed = r1["cmd_id"]
        # Same key, another body: a conflict, nothing new.
        s3, r3 = b.api("POST", "/v1/rigs/rig-i/commands", dict(body, args={"sleep": "9"}))
        self.assertEqual(s3, 409, r3)
        self.assertEqual(r3["error"], "conflict")
        # The client's own cmd_id.
        named = uuid7()
        s4, r4 = b.api("POST", "/v1/rigs/rig-i/commands", {"kind": "work", "cmd_id": named})
        s5, r5 = b.api("POST", "/v1/rigs/rig-i/commands", {"kind": "work", "cmd_id": named})
        self.assertEqual((s4, r4["cmd_id"], r4["existing"]), (202, named, False), r4)
        self.assertEqual((s5, r5["cmd_id"], r5["existing"]), (200, named, True), r5)
        s6, r6 = b.api("POST", "/v1/rigs/rig-i/commands", {"kind": "work", "cmd_id": named, "args": {"x": "1"}})
        self.assertEqual(s6, 409, r6)
        views = self.wait_states(b, [keyed, named])
        self.assert_succeeded(views)
        # After it finished, and after a restart of the broker: still that one.
        b.stop()
        b2 = self.restart(b, "ip2")
        s7, r7 = b2.api("POST", "/v1/rigs/rig-i/commands", body)
        self.assertEqual((s7, r7["cmd_id"], r7["existing"], r7["state"]), (200, keyed, True, "succeeded"), r7)
        s8, r8 = b2.api("POST", "/v1/rigs/rig-i/commands", {"kind": "work", "cmd_id": named})
        self.assertEqual((s8, r8["cmd_id"], r8["existing"]), (200, named, True), r8)
        time.sleep(1.0)
        self.assert_ran_once([keyed, named])
        listed = [c for c in b2.api("GET", "/v1/commands?rig=rig-i")[1]["commands"]]
        self.assertEqual(sorted(c["cmd_id"] for c in listed), sorted([keyed, named]))

    # ------------------------------------------------------------------ 8. full state directory

    def _mount_tmpfs(self, path, size="256k"):
        os.makedirs(path, exist_ok=True)
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", path],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            self.fail(f"cannot mount a {size} tmpfs at {path} (this test needs root with CAP_SYS_ADMIN "
                      f"to make a really full state directory): {p.stdout.strip()}")

    def _unmount(self, path, agent):
        agent.stop()
        if subprocess.run(["umount", path], stderr=subprocess.DEVNULL).returncode != 0:
            subprocess.run(["umount", "-l", path], stderr=subprocess.DEVNULL)

    @staticmethod
    def _fill(path):
        fd = os.open(os.path.join(path, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for chunk in (65536, 4096, 1):
                while True:
                    try:
                        os.write(fd, b"\0" * chunk)
                    except OSError as e:
                        if e.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(fd)

    def test_full_agent_state_directory_rejects_commands_and_runs_none(self):
        b = self.broker()
        state = self.lab.path("state-tmpfs")
        self._mount_tmpfs(state)
        a = self.agent("rig-full", b, state_dir=state)
        self.addCleanup(self._unmount, state, a)
        b.wait_rigs(["rig-full"])
        before = self.work(b, "rig-full")
        self.assert_succeeded(self.wait_states(b, [before]))
        self._fill(state)
        # The agent's dedup record is an append-only journal: a record that still
        # fits the space its file holds is durable, so that command is accepted (and
        # then fails to start: its process group cannot be recorded). Once the file
        # cannot grow, every command is refused; one at a time until three are.
        refused, accepted_while_full = [], []
        for _ in range(200):
            cid = self.work(b, "rig-full")
            v = self.wait_states(b, [cid], FINAL + ("acked", "running"))[cid]
            if v["state"] != "rejected":
                self.assertFalse(refused, f"accepted after a refusal, with the disk still full: {v}")
                accepted_while_full.append(cid)
                continue
            refused.append(cid)
            if len(refused) == 3:
                break
        self.assertEqual(len(refused), 3, "a full state directory refuses commands")
        views = self.wait_states(b, refused)
        for v in views.values():
            self.assertEqual(v["state"], "rejected", v)
            self.assertEqual(v["nack"]["reason"], "busy", v)
            self.assertTrue(v["nack"]["detail"].startswith("state directory not writable:"), v)
            self.assertIn("No space left on device", v["nack"]["detail"])
            self.assertIsNone(v["result"])
        self.assertIn("rig-full", b.rigs(), "the connection goes on")
        os.unlink(os.path.join(state, "filler"))
        after = self.work(b, "rig-full")
        self.assert_succeeded(self.wait_states(b, [after]))
        for cid in refused:
            self.assertEqual(b.command(cid)["state"], "rejected")
        ran = self.ran()
        self.assert_ran_once([before, after] + [c for c in accepted_while_full if c in ran], never=refused)

    # ------------------------------------------------------------------ cancel, execution deadline

    def suite_pid(self, sid):
        line = wait_for(lambda: next((l for l in lines(self.suites_log) if l.startswith(f"start {sid} ")), None),
                        10, what=f"suite {sid} started")
        return int(line.split()[2])

    def test_cancel_of_a_running_suite_and_the_execution_deadline_stop_it(self):
        b = self.broker()
        self.agent("rig-c", b)
        b.wait_rigs(["rig-c"])
        cancel_me = self.post(b, "rig-c", "suite", {"suite": "long-cancel"})["cmd_id"]
        timeout_me = self.post(b, "rig-c", "suite", {"suite": "long-timeout"}, timeout_s=2)["cmd_id"]
        t0 = time.monotonic()
        self.wait_states(b, [cancel_me], ("acked", "running"))
        cancel_pid = self.suite_pid("long-cancel")
        timeout_pid = self.suite_pid("long-timeout")
        status, body = b.api("POST", f"/v1/commands/{cancel_me}/cancel")
        self.assertEqual((status, body["cancel_sent"]), (202, True), body)
        v = self.wait_states(b, [cancel_me], timeout=10)[cancel_me]
        self.assertEqual(v["state"], "cancelled", v)
        self.assertEqual(v["result"]["status"], "cancelled", v)
        wait_for(lambda: pid_gone(cancel_pid), 10, what="the cancelled suite stopped")

        v = self.wait_states(b, [timeout_me], timeout=10)[timeout_me]
        self.assertEqual(v["state"], "timed_out", v)
        self.assertGreaterEqual(time.monotonic() - t0, 1.5)
        self.assertIn("CANCEL sent to the rig", v["detail"])
        # The CANCEL reached the rig: the suite got its TERM and stopped, and the
        # rig's RESULT for it (cancelled) is kept with the timed_out command.
        wait_for(lambda: pid_gone(timeout_pid), 10, what="the timed-out suite stopped")
        v = wait_for(lambda: (lambda c: c if c["result"] else None)(b.command(timeout_me)), 10,
                     what="the timed-out suite's RESULT")
        self.assertEqual(v["state"], "timed_out")
        self.assertEqual(v["result"]["status"], "cancelled", v)
        log = lines(self.suites_log)
        self.assertEqual(sorted(log), sorted(["start long-cancel %d" % cancel_pid, "term long-cancel",
                                              "start long-timeout %d" % timeout_pid, "term long-timeout"]),
                         "each suite started once and was stopped by a TERM")
        self.assertLess(time.monotonic() - t0, 30, "the 60 s sleeps were stopped")


if __name__ == "__main__":
    unittest.main()
