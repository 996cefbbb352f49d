"""The agent's side of at-least-once delivery (issue 12), against the scriptable
broker (fake_broker.py), with a ground-truth file: every command here is a suite
or an executable plugin that appends one line per execution, so "ran exactly
once" is counted, not assumed.

- an agent killed -9 mid-suite and restarted on the same state directory reports
  the command interrupted after WELCOME; a redelivery gets ACK duplicate and the
  same RESULT; it ran once;
- redelivery of a finished command gets its stored RESULT, of a running one ACK
  duplicate and then its one real RESULT;
- CANCEL of a command the rig does not run is answered with a RESULT;
- a full state directory (a real 256 KiB tmpfs) refuses commands with NACK busy
  and runs none of them once the dedup journal cannot grow (a record that still
  fits the file's space is durable and runs), and works again by itself once
  there is space.
"""
import errno
import os
import signal
import subprocess
import time
import unittest

from fake_broker import FakeBroker, uuid7
from harness import LabTestCase, wait_for


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().splitlines()


class AgentDeliveryTest(LabTestCase):
    def setUp(self):
        super().setUp()
        self.fb = FakeBroker(self.lab.certs)
        self.addCleanup(self.fb.stop)
        self.truth = self.lab.path("truth.log")

    def agent(self, name=None, **kw):
        return self.lab.agent("rig-d", self.fb.url, name=name, **kw)

    def counting_plugin(self, kind, then="echo ran"):
        """A plugin directory with `kind`: appends its cmd_id to the ground truth, then `then`."""
        plugins = self.lab.path("plugins")
        os.makedirs(plugins, exist_ok=True)
        prog = os.path.join(plugins, "fleetlink-" + kind)
        with open(prog, "w") as f:
            f.write(f"#!/bin/sh\nread line\necho \"$FLEETLINK_CMD_ID\" >> '{self.truth}'\n{then}\n")
        os.chmod(prog, 0o755)
        return plugins

    def results(self, conns, cmd_id):
        return [f for c in conns for f in c.frames if f["t"] == "result" and f["cmd_id"] == cmd_id]

    # ------------------------------------------------------------------ kill -9

    def test_kill_9_mid_suite_reports_interrupted_after_restart_and_redelivery_answers_the_same(self):
        pidfile = self.lab.path("suite.pid")
        suites = self.lab.path("suites.json")
        with open(suites, "w") as f:
            f.write('{"suites": {"long": {"argv": ["/bin/sh", "-c", '
                    f'"echo run $$ >> {self.truth}; echo $$ > {pidfile}; exec sleep 60"]}}}}}}')
        state = self.lab.path("state-kill")
        a = self.agent(suites=suites, state_dir=state)
        c1 = self.fb.wait_conn(1)
        _, cmd = c1.command("suite", {"suite": "long"})
        self.assertFalse(c1.ack_for(cmd)["duplicate"])
        wait_for(lambda: len(lines(self.truth)) == 1 and os.path.exists(pidfile), what="the suite started")
        a.kill()
        # PR_SET_PDEATHSIG ends the suite (exec'd sleep) with the agent; the next start
        # would stop anything left (test_agent_crash_cleanup.py). Here the test makes
        # sure before the restart.
        with open(pidfile) as f:
            suite_pid = int(f.read())
        try:
            os.killpg(suite_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

        b = self.agent(name="agent-rig-d-2", suites=suites, state_dir=state)
        c2 = self.fb.wait_conn(2)
        self.assertNotEqual(c2.hello["boot_id"], c1.hello["boot_id"])
        res = c2.result_for(cmd)
        self.assertEqual(res["status"], "failed")
        self.assertIs(res["interrupted"], True)
        self.assertEqual(res["exit_code"], 0)
        self.assertEqual(res["detail"], "interrupted: accepted by an earlier agent process (boot_id %s) "
                                        "that ended before it finished" % c1.hello["boot_id"])
        b.wait_log(r"cmd=%s interrupted: accepted by boot_id=%s" % (cmd, c1.hello["boot_id"]))

        # Redelivered under the same cmd_id: ACK duplicate and the same RESULT.
        _, same = c2.command("suite", {"suite": "long"}, cmd_id=cmd)
        self.assertTrue(c2.ack_for(same)["duplicate"])
        wait_for(lambda: len(self.results([c2], cmd)) == 2, what="the RESULT again")
        self.assertEqual(self.results([c2], cmd)[1], res)
        # A CANCEL for it: the same RESULT once more, nothing else happens.
        c2.send("cancel", cmd_id=cmd)
        wait_for(lambda: len(self.results([c2], cmd)) == 3, what="the RESULT for the cancel")
        self.assertEqual(self.results([c2], cmd)[2], res)

        # A third process: it was reported already (stored), so it is not again.
        b.stop()
        self.agent(name="agent-rig-d-3", suites=suites, state_dir=state)
        c3 = self.fb.wait_conn(3)
        _, again = c3.command("suite", {"suite": "long"}, cmd_id=cmd)
        self.assertTrue(c3.ack_for(again)["duplicate"])
        c3.result_for(cmd)
        time.sleep(0.3)
        self.assertEqual(len(self.results([c3], cmd)), 1)
        self.assertEqual(self.results([c3], cmd)[0], res)
        self.assertEqual(len(lines(self.truth)), 1, "the suite ran exactly once")

    # ------------------------------------------------------------------ redelivery

    def test_redelivery_of_a_finished_command_gets_its_stored_result_and_no_second_run(self):
        plugins = self.counting_plugin("count")
        state = self.lab.path("state-finished")
        a = self.agent(plugin_dir=plugins, state_dir=state)
        c1 = self.fb.wait_conn(1)
        _, cmd = c1.command("count")
        first = c1.result_for(cmd)
        self.assertEqual(first["status"], "ok", first)
        self.assertEqual(first["output"], b"ran\n")
        # The connection ends; the broker redelivers on the next one (same boot_id).
        c1.close(1011, "broker restart")
        c2 = self.fb.wait_conn(2)
        self.assertEqual(c2.hello["boot_id"], c1.hello["boot_id"])
        _, same = c2.command("count", cmd_id=cmd)
        self.assertTrue(c2.ack_for(same)["duplicate"])
        self.assertEqual(c2.result_for(cmd), first)
        # And after a restart of the agent (a new boot_id).
        a.stop()
        self.agent(name="agent-rig-d-2", plugin_dir=plugins, state_dir=state)
        c3 = self.fb.wait_conn(3)
        _, again = c3.command("count", cmd_id=cmd)
        self.assertTrue(c3.ack_for(again)["duplicate"])
        self.assertEqual(c3.result_for(cmd), first)
        time.sleep(0.3)
        self.assertEqual(lines(self.truth), [cmd])
        # Nothing was reported interrupted at that start.
        self.assertFalse([f for f in c3.frames if f["t"] == "result" and f.get("interrupted")])

    def test_redelivery_of_a_running_command_gets_ack_duplicate_then_its_result_once(self):
        plugins = self.counting_plugin("slow", then="sleep 2; echo done")
        a = self.agent(plugin_dir=plugins)
        c1 = self.fb.wait_conn(1)
        _, cmd = c1.command("slow")
        c1.ack_for(cmd)
        wait_for(lambda: lines(self.truth) == [cmd], what="the plugin started")
        c1.close(1011, "network blip")
        c2 = self.fb.wait_conn(2)
        self.assertEqual(c2.hello["boot_id"], c1.hello["boot_id"])
        _, same = c2.command("slow", cmd_id=cmd)
        self.assertTrue(c2.ack_for(same)["duplicate"])
        a.wait_log(r"cmd=%s duplicate=true \(still running" % cmd)
        self.assertEqual(self.results([c1, c2], cmd), [], "nothing before it finishes")
        res = c2.result_for(cmd, timeout=15)
        self.assertEqual(res["status"], "ok", res)
        self.assertIn(b"done", res["output"])
        self.assertFalse(res["interrupted"])
        time.sleep(0.5)
        self.assertEqual(len(self.results([c1, c2], cmd)), 1, "its RESULT exactly once")
        self.assertEqual(lines(self.truth), [cmd])

    # ------------------------------------------------------------------ cancel

    def test_cancel_of_a_command_not_running_is_answered(self):
        plugins = self.counting_plugin("count")
        self.agent(plugin_dir=plugins)
        c = self.fb.wait_conn(1)
        # Finished: its RESULT again.
        _, done = c.command("count")
        first = c.result_for(done)
        c.send("cancel", cmd_id=done)
        wait_for(lambda: len(self.results([c], done)) == 2, what="the stored RESULT for the cancel")
        self.assertEqual(self.results([c], done)[1], first)
        # Never received: cancelled, and it will not run when it arrives after all
        # (a CANCEL can overtake its COMMAND in the broker's outbox).
        never = uuid7()
        c.send("cancel", cmd_id=never)
        res = c.result_for(never)
        self.assertEqual(res["status"], "cancelled")
        self.assertEqual(res["detail"], "not running on this rig: never received")
        self.assertFalse(res["interrupted"])
        _, late = c.command("count", cmd_id=never)
        self.assertTrue(c.ack_for(late)["duplicate"])
        wait_for(lambda: len(self.results([c], never)) == 2, what="the cancelled RESULT again")
        self.assertEqual(self.results([c], never)[1], res)
        time.sleep(0.3)
        self.assertEqual(lines(self.truth), [done])
        self.assertIsNone(c.closed_at)

    # ------------------------------------------------------------------ full disk

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
        """Writes a file until the file system is full (ENOSPC)."""
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

    def test_full_state_directory_refuses_commands_runs_none_and_recovers_by_itself(self):
        state = self.lab.path("state-tmpfs")
        self._mount_tmpfs(state)
        plugins = self.counting_plugin("count")
        a = self.agent(plugin_dir=plugins, state_dir=state)
        self.addCleanup(self._unmount, state, a)
        c = self.fb.wait_conn(1)
        _, before = c.command("count")
        self.assertEqual(c.result_for(before)["status"], "ok")

        self._fill(state)
        with self.assertRaises(OSError):
            with open(os.path.join(state, "probe"), "wb") as f:
                f.write(b"x")
        # The record is an append-only journal: a line that still fits the space
        # its file already holds is written and fdatasync'd, so that command is
        # recorded and runs. Once the file cannot grow, every command is refused.
        refused = []
        recorded_while_full = []
        for _ in range(200):
            seq, cmd = c.command("count")
            reply = c.wait_frame(lambda f, cmd=cmd: f["t"] in ("ack", "nack") and f["cmd_id"] == cmd,
                                 what=f"ack or nack {cmd}")
            if reply["t"] == "ack":
                self.assertFalse(refused, "after the first refusal, every command is refused until space returns")
                recorded_while_full.append(cmd)
                continue
            self.assertEqual(reply["seq"], seq)
            self.assertEqual(reply["reason"], "busy")
            self.assertTrue(reply["detail"].startswith("state directory not writable:"), reply["detail"])
            self.assertIn("No space left on device", reply["detail"])
            refused.append(cmd)
            if len(refused) == 3:
                break
        self.assertEqual(len(refused), 3, "a full state directory refuses commands")
        time.sleep(0.5)  # a run would have appended by now
        self.assertFalse([f for f in c.frames if f["t"] in ("ack", "result", "output")
                          and f["cmd_id"] in refused])
        self.assertFalse(set(lines(self.truth)) & set(refused), "nothing refused ran")
        self.assertIsNone(c.closed_at, "the connection goes on")
        a.wait_log(r"reason=busy: state directory not writable:")

        # Space again: the next command runs, once; so does a refused one sent again.
        os.unlink(os.path.join(state, "filler"))
        _, after = c.command("count")
        self.assertFalse(c.ack_for(after)["duplicate"])
        self.assertEqual(c.result_for(after)["status"], "ok")
        _, retried = c.command("count", cmd_id=refused[0])
        self.assertFalse(c.ack_for(retried)["duplicate"])
        self.assertEqual(c.result_for(refused[0])["status"], "ok")
        time.sleep(0.3)
        ran = lines(self.truth)
        self.assertEqual([x for x in ran if x not in recorded_while_full], [before, after, refused[0]])
        self.assertTrue(all(ran.count(x) <= 1 for x in recorded_while_full), "none ran twice")
        self.assertIsNone(c.closed_at)


if __name__ == "__main__":
    unittest.main()
