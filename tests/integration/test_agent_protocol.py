"""fleetlink-agent against a scriptable broker (fake_broker.py): the protocol
duties of the agent — HELLO, ACK/RESULT, seq gaps, allow list, duplicates,
unknown fields, spooling, GOAWAY and 503 Retry-After."""
import os
import re
import time
import unittest

from broker_rawclient import SUBPROTOCOL
from fake_broker import FakeBroker, uuid7, write_recorder
from harness import LabTestCase

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


class AgentProtocolTest(LabTestCase):
    def setUp(self):
        super().setUp()
        self.fb = FakeBroker(self.lab.certs)
        self.addCleanup(self.fb.stop)  # before the lab's own cleanup (cleanups run last first)

    def agent(self, rig="rig-a", **kw):
        return self.lab.agent(rig, self.fb.url, **kw)

    def exec_plugin(self, kind, body):
        """A plugin directory with one executable plugin for `kind`: a shell script
        that reads the command line from stdin, then runs `body`."""
        plugins = self.lab.path("plugins")
        os.makedirs(plugins, exist_ok=True)
        prog = os.path.join(plugins, "fleetlink-" + kind)
        with open(prog, "w") as f:
            f.write("#!/bin/sh\nread line\n" + body + "\n")
        os.chmod(prog, 0o755)
        return plugins

    def test_hello_ack_and_dmesg_result(self):
        a = self.agent(label=["site=lab1"])
        c = self.fb.wait_conn(1)
        self.assertEqual(c.subprotocol, SUBPROTOCOL)  # requested, and bound to the answer
        h = c.hello
        self.assertEqual(h["v"], 1)
        self.assertEqual(h["rig_id"], "rig-a")
        self.assertRegex(h["boot_id"], UUID7)
        self.assertEqual(h["labels"], {"site": "lab1"})
        for k in ("dmesg", "reboot"):
            self.assertIn(k, h["kinds"])
        seq, cmd = c.command("dmesg", {"lines": 5})
        ack = c.ack_for(cmd)
        self.assertEqual(ack["seq"], seq)
        self.assertFalse(ack["duplicate"])
        res = c.result_for(cmd)
        if res["status"] == "ok":
            lines = res["output"].decode().splitlines()
            self.assertTrue(0 < len(lines) <= 5, lines)
        else:  # a rig that forbids the kernel log must say so
            self.assertEqual(res["status"], "failed")
            self.assertIn("kernel log", res["detail"])
        self.assertLessEqual(res["started_at_ms"], res["finished_at_ms"])
        a.wait_log(r"ack seq=1 cmd=" + cmd)

    def test_seq_gap_nacks_runs_nothing_after_and_reconnects(self):
        a = self.agent()
        c = self.fb.wait_conn(1)
        _, c1 = c.command("dmesg", {"lines": 1})
        c.ack_for(c1)
        _, c3 = c.command("dmesg", {"lines": 1}, seq=3)
        c4 = uuid7()
        try:  # the agent may already be closing: then it certainly did not run it
            c.command("dmesg", {"lines": 1}, seq=4, cmd_id=c4)
        except Exception:  # noqa: BLE001 - websockets.ConnectionClosed
            pass
        nack = c.nack_for(c3)
        self.assertEqual(nack["reason"], "seq_gap")
        self.assertEqual(nack["expected_seq"], 2)
        code, _ = c.wait_closed()
        self.assertEqual(code, 4412)
        self.assertFalse([f for f in c.frames if f.get("cmd_id") in (c3, c4) and f["t"] != "nack"])
        self.assertFalse([f for f in c.frames if f.get("cmd_id") == c4])
        # It comes back on its own, same process (same boot_id), seq starting at 1.
        c2 = self.fb.wait_conn(2)
        self.assertEqual(c2.hello["boot_id"], c.hello["boot_id"])
        _, again = c2.command("dmesg", {"lines": 1})
        c2.ack_for(again)
        a.wait_log(r"sequence gap")

    def test_kinds_not_allowed_or_unknown_are_nacked(self):
        self.agent(allow=["dmesg"])
        c = self.fb.wait_conn(1)
        self.assertEqual(c.hello["kinds"], ["dmesg"])
        _, r = c.command("reboot")
        self.assertEqual(c.nack_for(r)["reason"], "not_allowed")
        _, u = c.command("teleport")
        self.assertEqual(c.nack_for(u)["reason"], "unsupported_kind")
        _, d = c.command("dmesg", {"lines": 1})
        c.result_for(d)  # refusals do not break the sequence

    def test_unknown_fields_and_types_are_ignored_when_lenient(self):
        self.agent()
        c = self.fb.wait_conn(1)
        c.send("weather", forecast="sunny")  # an unknown message type
        _, cmd = c.command("dmesg", {"lines": 2}, future_field={"x": 1}, priority=9)
        c.result_for(cmd)
        self.assertIsNone(c.close_code)

    def test_unknown_type_closes_4422_when_strict(self):
        self.agent(strict=True)
        c = self.fb.wait_conn(1)
        c.send("weather", forecast="sunny")
        code, _ = c.wait_closed()
        self.assertEqual(code, 4422)

    def test_duplicate_seq_is_ignored(self):
        self.agent()
        c = self.fb.wait_conn(1)
        _, cmd = c.command("dmesg", {"lines": 1})
        c.result_for(cmd)
        c.command("dmesg", {"lines": 1}, seq=1, cmd_id=uuid7())
        _, nxt = c.command("dmesg", {"lines": 1}, seq=2)
        c.result_for(nxt)
        self.assertEqual(len([f for f in c.frames if f["t"] == "ack"]), 2)

    def test_reboot_runs_once_across_reconnect_and_restart(self):
        record = self.lab.path("reboots.log")
        script = write_recorder(self.lab.path("recorder.sh"), record)
        state = self.lab.path("state-reboot")
        opts = dict(state_dir=state, reboot_command=script, reboot_delay_ms=100)
        a = self.agent(**opts)
        c = self.fb.wait_conn(1)
        _, cmd = c.command("reboot")
        self.assertFalse(c.ack_for(cmd)["duplicate"])
        res = c.result_for(cmd)
        self.assertEqual(res["status"], "scheduled")
        deadline = time.monotonic() + 10
        while not os.path.exists(record) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertTrue(os.path.exists(record), "recorder never ran")

        # The connection drops; the broker redelivers the same cmd_id on the next one.
        c.close(1011, "broker restart")
        c2 = self.fb.wait_conn(2)
        _, same = c2.command("reboot", cmd_id=cmd)
        self.assertTrue(c2.ack_for(same)["duplicate"])
        self.assertEqual(c2.result_for(cmd)["status"], "scheduled")  # the stored result, replayed

        # The rig "rebooted": a new agent process on the same state directory.
        a.stop()
        self.agent(name="agent-rig-a-2", **opts)
        c3 = self.fb.wait_conn(3)
        self.assertNotEqual(c3.hello["boot_id"], c.hello["boot_id"])
        _, again = c3.command("reboot", cmd_id=cmd)
        self.assertTrue(c3.ack_for(again)["duplicate"])
        self.assertEqual(c3.result_for(cmd)["status"], "scheduled")
        time.sleep(0.5)  # the reboot delay, had it been scheduled again
        with open(record) as f:
            self.assertEqual(len(f.read().splitlines()), 1)

    def test_results_finished_while_disconnected_are_spooled_and_sent_after_welcome(self):
        suites = self.lab.path("suites.json")
        with open(suites, "w") as f:
            f.write('{"suites": {"slow": {"argv": ["/bin/sh", "-c", "sleep 1; echo finished"]}}}')
        a = self.agent(suites=suites)
        c = self.fb.wait_conn(1)
        _, cmd = c.command("suite", {"suite": "slow"})
        c.ack_for(cmd)
        # Drop the connection and keep the agent out until the suite has finished.
        self.fb.refuse = 1000
        self.fb.retry_after = 1
        c.close(1011, "network blip")
        a.wait_log(r"result spooled cmd=" + cmd, timeout=10)
        self.fb.refuse = 0
        c2 = self.fb.wait_conn(2, timeout=15)
        res = c2.result_for(cmd)
        self.assertEqual(res["status"], "ok")
        self.assertIn(b"finished", res["output"])
        # Sent once, then gone from the spool.
        a.wait_log(r"spool flushed sent=1 left=0")
        self.assertEqual(os.listdir(os.path.join(a.state_dir, "spool")), [])

    def test_goaway_reconnect_after_is_honoured(self):
        self.agent()
        c = self.fb.wait_conn(1)
        c.goaway(1500)
        code, _ = c.wait_closed()
        self.assertEqual(code, 1001)
        c2 = self.fb.wait_conn(2, timeout=10)
        waited = c2.opened_at - c.closed_at
        self.assertGreater(waited, 1.3)
        self.assertLess(waited, 3.0)

    def test_http_503_retry_after_is_honoured(self):
        self.fb.refuse = 1
        self.fb.retry_after = 2
        self.agent()
        attempts = self.fb.wait_attempts(2, timeout=10)
        gap = attempts[1] - attempts[0]
        self.assertGreater(gap, 1.8)  # not the 100 ms backoff the agent was given
        self.assertLess(gap, 3.5)
        self.fb.wait_conn(1)

    def test_backoff_grows_without_a_broker(self):
        self.fb.refuse = 1000
        self.fb.retry_after = None  # no hint: plain backoff
        self.agent(backoff_base_ms=100, backoff_cap_ms=400)
        attempts = self.fb.wait_attempts(6, timeout=15)
        gaps = [b - a for a, b in zip(attempts, attempts[1:])]
        # min(100*2^n, 400) x uniform(0.5, 1.5): later gaps are bounded by 1.5 x cap.
        self.assertTrue(all(g < 0.75 for g in gaps), gaps)
        self.assertGreater(max(gaps[2:]), 0.15, gaps)

    def test_suite_output_streams_and_cancel_stops_it(self):
        suites = self.lab.path("suites.json")
        with open(suites, "w") as f:
            f.write('{"suites": {"talk": {"argv": ["/bin/sh", "-c", "echo hello; sleep 30"]}}}')
        self.agent(suites=suites)
        c = self.fb.wait_conn(1)
        _, cmd = c.command("suite", {"suite": "talk"})
        c.ack_for(cmd)
        chunk = c.wait_frame(lambda f: f["t"] == "output" and f["cmd_id"] == cmd, 10, "output chunk")
        self.assertEqual(chunk["offset"], 0)
        self.assertIn(b"hello", chunk["data"])
        c.send("cancel", cmd_id=cmd)
        res = c.result_for(cmd, timeout=15)
        self.assertEqual(res["status"], "cancelled")

    def test_exec_plugin_from_the_plugin_dir_is_a_kind(self):
        plugins = self.exec_plugin("greet", "echo \"greetings\"")
        self.agent(plugin_dir=plugins)
        c = self.fb.wait_conn(1)
        self.assertIn("greet", c.hello["kinds"])
        _, cmd = c.command("greet")
        res = c.result_for(cmd)
        self.assertEqual(res["status"], "ok", res)
        self.assertIn(b"greetings", res["output"])

    def test_exec_plugin_limits_are_agent_options(self):
        plugins = self.exec_plugin("nap", "echo napping\nexec sleep 30")
        self.agent(plugin_dir=plugins, plugin_timeout_s=1, plugin_kill_grace_s=1, plugin_max_running=1)
        c = self.fb.wait_conn(1)
        started = time.monotonic()
        _, first = c.command("nap")
        c.ack_for(first)
        # One run at a time: the second is refused while the first sleeps.
        _, second = c.command("nap")
        busy = c.result_for(second)
        self.assertEqual(busy["status"], "failed", busy)
        self.assertIn("busy", busy["detail"])
        # The first is stopped by the 1 s timeout, not by the program's own 30 s.
        res = c.result_for(first, timeout=15)
        self.assertEqual(res["status"], "timeout", res)
        self.assertIn(b"napping", res["output"])
        self.assertLess(time.monotonic() - started, 10)

    def test_next_broker_url_after_a_failure(self):
        dead = "wss://127.0.0.1:1/agent"
        self.lab.agent("rig-a", [dead, self.fb.url])
        c = self.fb.wait_conn(1, timeout=10)
        self.assertEqual(c.hello["rig_id"], "rig-a")

    def test_oversized_frame_closes_1009(self):
        self.agent(max_frame_bytes=4096)
        c = self.fb.wait_conn(1)
        c.command("dmesg", {"blob": "x" * 8000})
        code, _ = c.wait_closed()
        self.assertEqual(code, 1009)
        self.fb.wait_conn(2)  # and it comes back

    def test_malformed_frame_closes_4400(self):
        self.agent()
        c = self.fb.wait_conn(1)
        c.send_raw(b"\xc1\xc1 not msgpack")
        code, _ = c.wait_closed()
        self.assertEqual(code, 4400)

    def test_undecodable_command_is_nacked_malformed_and_the_connection_goes_on(self):
        self.agent()
        c = self.fb.wait_conn(1)
        # args must be a map of strings: this COMMAND cannot be decoded.
        bad = uuid7()
        c.send("command", seq=1, cmd_id=bad, kind="dmesg", args=[1, 2], issued_at_ms=0)
        c.next_seq = 2
        nack = c.nack_for(bad)
        self.assertEqual(nack["reason"], "malformed")
        self.assertEqual(nack["seq"], 1)
        self.assertIn("args", nack["detail"])
        # Refused in sequence, never run: the next command runs on the same connection.
        _, good = c.command("dmesg", {"lines": 1})
        self.assertEqual(c.result_for(good)["status"], "ok")
        self.assertIsNone(c.closed_at)
        self.assertFalse(any(f["t"] == "ack" and f["cmd_id"] == bad for f in c.frames))

    def test_command_running_at_shutdown_is_reported_after_restart(self):
        suites = self.lab.path("suites.json")
        with open(suites, "w") as f:
            f.write('{"suites": {"long": {"argv": ["/bin/sh", "-c", "sleep 30"]}}}')
        state = self.lab.path("state-stop")
        a = self.agent(suites=suites, state_dir=state)
        c = self.fb.wait_conn(1)
        _, cmd = c.command("suite", {"suite": "long"})
        c.ack_for(cmd)
        t0 = time.monotonic()
        self.assertEqual(a.stop(timeout=10), 0)
        self.assertLess(time.monotonic() - t0, 8)
        self.agent(name="agent-rig-a-2", suites=suites, state_dir=state)
        c2 = self.fb.wait_conn(2)
        res = c2.result_for(cmd)
        self.assertEqual(res["status"], "cancelled")
        # And redelivery does not start it again.
        _, same = c2.command("suite", {"suite": "long"}, cmd_id=cmd)
        self.assertTrue(c2.ack_for(same)["duplicate"])

    def test_fragmented_message_is_reassembled(self):
        self.agent()
        c = self.fb.wait_conn(1)
        cmd = uuid7()
        c.send_fragmented("command", pieces=4, seq=1, cmd_id=cmd, kind="dmesg",
                          args={"lines": "1", "pad": "p" * 3000}, issued_at_ms=0)
        c.next_seq = 2
        self.assertEqual(c.ack_for(cmd)["seq"], 1)
        c.result_for(cmd)

    def test_a_silent_broker_is_detected_by_the_agents_own_keepalive(self):
        a = self.agent(keepalive_idle_s=1, keepalive_timeout_s=2)
        c = self.fb.wait_conn(1)
        t0 = time.monotonic()
        c.freeze()
        self.fb.wait_conn(2, timeout=10)
        self.assertLess(time.monotonic() - t0, 6)
        a.wait_log(r"disconnected")


if __name__ == "__main__":
    unittest.main()
