"""The agent acknowledges a command only once its dedup record is on disk (issue 17
point 3), now that the record is an append-only journal committed once per loop
turn (group commit) instead of rewritten per command. Against the scriptable broker
(fake_broker.py) with real agent processes and a ground-truth file (a plugin that
appends its cmd_id per execution):

- kill -9 the agent the moment its ACK arrives, restart it on the same state
  directory, deliver the same cmd_id again: ACK duplicate, and it never runs a
  second time; a record torn by the crash (a half-written last line) is ignored;
- many commands sent in one burst are committed together (fewer commits than
  commands) and every one of them is durable: after kill -9 and a restart, each
  redelivery is answered as a duplicate and none runs again;
- an agent upgraded in place reads the format-2 file the previous version wrote,
  answers its cmd_ids as duplicates, and rewrites it as format 3.
"""
import os
import re
import time
import unittest

from fake_broker import FakeBroker, encode, uuid7
from harness import LabTestCase, wait_for


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().splitlines()


class AgentAckDurabilityTest(LabTestCase):
    def setUp(self):
        super().setUp()
        self.fb = FakeBroker(self.lab.certs)
        self.addCleanup(self.fb.stop)
        self.truth = self.lab.path("truth.log")
        self.plugins = self.lab.path("plugins")
        os.makedirs(self.plugins)
        prog = os.path.join(self.plugins, "fleetlink-count")
        with open(prog, "w") as f:
            f.write(f"#!/bin/sh\nread line\necho \"$FLEETLINK_CMD_ID\" >> '{self.truth}'\necho ran\n")
        os.chmod(prog, 0o755)
        self.state = self.lab.path("state")

    def agent(self, n):
        return self.lab.agent("rig-ack", self.fb.url, name=f"agent-rig-ack-{n}", plugin_dir=self.plugins,
                              state_dir=self.state)

    def send_burst(self, conn, cmd_ids):
        """Every COMMAND in one write to the socket (WebSocket frames made here: a
        server's are unmasked), so they arrive together whatever the timing: a frame
        per write lets an agent on a fast disk commit each before the next comes."""
        first = conn.next_seq
        conn.next_seq += len(cmd_ids)
        data = bytearray()
        for i, cid in enumerate(cmd_ids):
            payload = encode("command", seq=first + i, cmd_id=cid, kind="count", args={},
                             issued_at_ms=int(time.time() * 1000))
            assert len(payload) < 65536
            data += bytes([0x82]) + (bytes([len(payload)]) if len(payload) < 126
                                     else bytes([126]) + len(payload).to_bytes(2, "big"))
            data += payload

        async def burst():
            conn.ws.transport.write(bytes(data))
        self.fb._call(burst())

    def acks(self, conn, cmd_id):
        return [f for f in conn.frames if f["t"] == "ack" and f["cmd_id"] == cmd_id]

    def test_killed_right_after_the_ack_the_command_is_still_a_duplicate_after_restart(self):
        a = self.agent(1)
        c1 = self.fb.wait_conn(1)
        _, warm = c1.command("count")
        self.assertEqual(c1.result_for(warm)["status"], "ok")
        # Kill the moment the ACK is in: whatever the agent did not write before it
        # sent the ACK is lost with the process.
        _, cmd = c1.command("count")
        ack = c1.ack_for(cmd, timeout=15.0)
        a.kill()
        self.assertFalse(ack["duplicate"])
        ran_before = lines(self.truth).count(cmd)
        self.assertLessEqual(ran_before, 1)
        # A crash in the middle of a later append leaves half a line: ignored.
        record = os.path.join(self.state, "dedup-window")
        with open(record) as f:
            self.assertEqual(f.readline(), "fleetlink-dedup 3\n")
            self.assertRegex(f.read(), r"(?m)^e -?\d+ a %s %s [0-9a-f]{8}$" % (c1.hello["boot_id"], cmd),
                             "the acknowledged command's record is in the file the killed agent left")
        with open(record, "a") as f:
            f.write("e 99999 a 01936d3c-0000-7000-8000-0000000")

        b = self.agent(2)
        c2 = self.fb.wait_conn(2)
        b.wait_log(r"dedup window .*dedup-window: its last record was cut short")
        _, same = c2.command("count", cmd_id=cmd)
        self.assertTrue(c2.ack_for(same, timeout=15.0)["duplicate"])
        res = c2.result_for(cmd, timeout=15.0)
        if ran_before == 0:
            # Killed before the plugin appended: reported interrupted, never run.
            self.assertIs(res.get("interrupted"), True, res)
        time.sleep(0.5)  # a second run would have appended by now
        self.assertEqual(lines(self.truth).count(cmd), ran_before, "not run again after the restart")
        self.assertEqual(lines(self.truth).count(warm), 1)

    def test_a_burst_is_committed_together_and_every_command_of_it_is_durable(self):
        a = self.agent(1)
        c1 = self.fb.wait_conn(1)
        _, warm = c1.command("count")
        self.assertEqual(c1.result_for(warm)["status"], "ok")
        log_from = a.log_size()
        burst = [uuid7() for _ in range(60)]
        self.send_burst(c1, burst)
        for cid in burst:
            self.assertFalse(c1.ack_for(cid, timeout=20.0)["duplicate"])
        a.kill()
        commits = [int(m) for m in re.findall(r"dedup record: (\d+) accepted command\(s\) committed together\n",
                                                a.log()[log_from:])]
        self.assertEqual(sum(commits), len(burst), commits)
        self.assertLess(len(commits), len(burst), f"the burst was committed per command: {commits}")
        self.assertGreater(max(commits), 1, commits)
        ran_before = {cid: lines(self.truth).count(cid) for cid in burst}
        self.assertTrue(all(n <= 1 for n in ran_before.values()))

        self.agent(2)
        c2 = self.fb.wait_conn(2)
        self.send_burst(c2, burst)
        for cid in burst:
            acks = wait_for(lambda cid=cid: self.acks(c2, cid), 20.0, what=f"ack {cid}")
            self.assertTrue(acks[0]["duplicate"], cid)
        for cid in burst:
            c2.result_for(cid, timeout=20.0)
        time.sleep(0.5)
        self.assertEqual({cid: lines(self.truth).count(cid) for cid in burst}, ran_before,
                         "no command of the burst ran again")

    def test_an_agent_upgraded_in_place_reads_the_format_2_record_and_rewrites_it(self):
        os.makedirs(self.state, mode=0o700, exist_ok=True)
        old = uuid7()
        unfinished = uuid7()
        boot = "01936d3c-0000-7000-8000-00000000000a"
        with open(os.path.join(self.state, "dedup-window"), "w") as f:
            f.write(f"fleetlink-dedup 2\n5000 f {boot} {old}\n100 a {boot} {unfinished}\nend 2\n")
        a = self.agent(1)
        c = self.fb.wait_conn(1)
        # The unfinished one is reported interrupted after WELCOME, as before.
        self.assertIs(c.result_for(unfinished)["interrupted"], True)
        with open(os.path.join(self.state, "dedup-window")) as f:
            text = f.read()
        self.assertTrue(text.startswith("fleetlink-dedup 3\n"), text)
        self.assertIn(f" f {boot} {old} ", text)
        _, same = c.command("count", cmd_id=old)
        self.assertTrue(c.ack_for(same)["duplicate"])
        self.assertEqual(c.result_for(old)["status"], "duplicate")
        _, fresh = c.command("count")
        self.assertEqual(c.result_for(fresh)["status"], "ok")
        time.sleep(0.3)
        self.assertEqual(lines(self.truth), [fresh])
        a.stop()


if __name__ == "__main__":
    unittest.main()
