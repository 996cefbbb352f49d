"""fleetlink-agent with the real broker on loopback (mutual TLS): dmesg and
reboot through the control API, an allow-list refusal, and reconnecting after
the broker is killed and restarted."""
import os
import time
import unittest

from fake_broker import write_recorder
from harness import LabTestCase, wait_for


class AgentWithBrokerTest(LabTestCase):
    def test_dmesg_result_arrives(self):
        b = self.lab.broker()
        a = self.lab.agent("rig-a", b)
        b.wait_rigs(["rig-a"])
        rig = b.rigs()["rig-a"]
        self.assertIn("dmesg", rig["kinds"])
        cmd = b.run("rig-a", "dmesg", {"lines": 20})
        self.assertEqual(cmd["state"], "succeeded", cmd)
        res = cmd["result"]
        if res["status"] == "ok":
            lines = res["output"].splitlines()
            self.assertTrue(0 < len(lines) <= 20, lines)
        else:
            self.assertEqual(res["status"], "failed")
            self.assertIn("kernel log", res["detail"])
        a.wait_log(r"result cmd=" + cmd["cmd_id"])

    def test_reboot_is_scheduled_and_runs_the_configured_command_once(self):
        record = self.lab.path("reboots.log")
        script = write_recorder(self.lab.path("recorder.sh"), record)
        b = self.lab.broker()
        a = self.lab.agent("rig-a", b, reboot_command=script, reboot_delay_ms=100)
        b.wait_rigs(["rig-a"])
        status, body = b.send("rig-a", "reboot")
        self.assertEqual(status, 202, body)
        # Scheduled is not done: the broker waits for the rig to come back with a new boot_id.
        cmd = b.wait_command(body["cmd_id"], ("running",))
        self.assertEqual(cmd["result"]["status"], "scheduled", cmd)
        wait_for(lambda: os.path.exists(record), 10, what="recorder ran")
        time.sleep(0.3)
        with open(record) as f:
            self.assertEqual(len(f.read().splitlines()), 1)
        self.assertEqual(b.command(body["cmd_id"])["state"], "running")
        # The "reboot": a new agent process, a new boot_id.
        a.stop()
        self.lab.agent("rig-a", b, name="agent-rig-a-2", reboot_command=script, reboot_delay_ms=100)
        cmd = b.wait_command(body["cmd_id"])
        self.assertEqual(cmd["state"], "succeeded", cmd)
        with open(record) as f:
            self.assertEqual(len(f.read().splitlines()), 1)

    def test_not_allowed_kind_is_refused(self):
        b = self.lab.broker()
        self.lab.agent("rig-a", b, allow=["dmesg"])
        b.wait_rigs(["rig-a"])
        status, body = b.send("rig-a", "reboot")
        if status == 202:  # the broker may leave the refusal to the agent
            cmd = b.wait_command(body["cmd_id"])
            self.assertEqual(cmd["state"], "rejected", cmd)
            self.assertEqual(cmd["nack"]["reason"], "not_allowed")
        else:  # or refuse kinds the rig did not announce in HELLO
            self.assertEqual(status, 422, body)

    def test_agent_reconnects_after_the_broker_is_killed(self):
        b = self.lab.broker()
        a = self.lab.agent("rig-a", b)
        b.wait_rigs(["rig-a"])
        port, control = b.listen_port, b.control_port
        mark = a.log_size()
        b.kill()
        a.wait_log(r"disconnected", start=mark)
        b2 = self.lab.broker(name="broker2", listen_port=port, control_port=control)
        b2.wait_rigs(["rig-a"], timeout=20)
        cmd = b2.run("rig-a", "dmesg", {"lines": 3})
        self.assertEqual(cmd["state"], "succeeded", cmd)

    def test_agent_answers_the_brokers_pings(self):
        b = self.lab.broker(ping_interval_ms=100, pong_timeout_ms=200, max_missed_pongs=2)
        a = self.lab.agent("rig-a", b)
        b.wait_rigs(["rig-a"])
        before = b.rigs()["rig-a"]["connected_at"]
        time.sleep(1.5)  # many ping rounds: a silent agent would be closed 4002 by now
        self.assertEqual(b.rigs()["rig-a"]["connected_at"], before)
        self.assertNotRegex(a.log(), r"disconnected code=4002")

    def test_drain_goaway_then_reconnect_to_the_next_broker(self):
        b = self.lab.broker(drain_window_ms=500, drain_deadline_ms=3000)
        a = self.lab.agent("rig-a", b)
        b.wait_rigs(["rig-a"])
        port, control = b.listen_port, b.control_port
        mark = a.log_size()
        status, body = b.api("POST", "/v1/admin/drain", {"window_ms": 500})
        self.assertEqual(status, 202, body)
        a.wait_log(r"goaway reason=", start=mark)
        a.wait_log(r"disconnected code=1001", start=mark)
        wait_for(lambda: not b.alive(), 10, what="drained broker exits")
        b2 = self.lab.broker(name="broker2", listen_port=port, control_port=control)
        b2.wait_rigs(["rig-a"], timeout=20)


if __name__ == "__main__":
    unittest.main()
