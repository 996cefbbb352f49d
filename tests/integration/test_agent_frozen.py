"""Real fleetlink-agent processes frozen with SIGSTOP: the broker drops the frozen
rig by keepalive (4002) within its bound, answers a full outbox at once with the
rig_unresponsive error, and the other agents keep their command->ACK latency."""
import re
import signal
import time
import unittest

from harness import LabTestCase, rss_kb, wait_for



class FrozenAgentTest(LabTestCase):
    def start(self, broker, rigs):
        agents = {r: self.lab.agent(r, broker) for r in rigs}
        broker.wait_rigs(rigs)
        return agents

    def ack_latency(self, broker, rig):
        t0 = time.monotonic()
        status, body = broker.send(rig, "dmesg", {"lines": 1})
        self.assertEqual(status, 202, body)
        broker.wait_command(body["cmd_id"], ("acked", "running", "succeeded"), timeout=5)
        return time.monotonic() - t0

    def test_frozen_agent_is_closed_4002_and_leaves_the_registry(self):
        ping, pong, missed = 200, 200, 3
        broker = self.lab.broker(ping_interval_ms=ping, pong_timeout_ms=pong, max_missed_pongs=missed)
        agents = self.start(broker, ["rig-frozen", "rig-a", "rig-b"])
        time.sleep(1.0)  # several ping rounds: healthy agents are never dropped
        self.assertEqual(set(broker.rigs()), {"rig-frozen", "rig-a", "rig-b"})
        agents["rig-frozen"].signal(signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            broker.wait_rig_gone("rig-frozen", timeout=10)
            elapsed = time.monotonic() - t0
            bound = (missed * ping + pong) / 1000.0 + 1.0
            self.assertLess(elapsed, bound, f"dropped after {elapsed:.2f}s, bound {bound:.2f}s")
            self.assertRegex(broker.log(), r"rig=rig-frozen.*4002")
            self.assertEqual(set(broker.rigs()), {"rig-a", "rig-b"})
            for rig in ("rig-a", "rig-b"):
                self.assertLess(self.ack_latency(broker, rig), 1.0)
        finally:
            agents["rig-frozen"].signal(signal.SIGCONT)
        # Thawed, it notices, reconnects with its same boot_id and is served again.
        broker.wait_rigs(["rig-frozen"], timeout=20)
        self.assertLess(self.ack_latency(broker, "rig-frozen"), 5.0)

    def test_full_outbox_of_a_frozen_agent_is_refused_at_once_others_unaffected(self):
        capacity = 8
        broker = self.lab.broker(outbox_capacity=capacity)  # default keepalive: 20 s pings
        agents = self.start(broker, ["rig-frozen", "rig-a"])
        baseline = sorted(self.ack_latency(broker, "rig-a") for _ in range(10))
        rss_before = rss_kb(broker.pid)
        agents["rig-frozen"].signal(signal.SIGSTOP)
        try:
            stuck = []
            for _ in range(capacity):
                status, body = broker.send("rig-frozen", "dmesg", {"lines": 1})
                self.assertEqual(status, 202, body)
                stuck.append(body["cmd_id"])
            time.sleep(1.1)  # let the oldest queued command age past a second
            t0 = time.monotonic()
            status, body = broker.send("rig-frozen", "dmesg", {"lines": 1})
            self.assertLess(time.monotonic() - t0, 0.5)  # answered at once, not queued
            self.assertEqual(status, 503, body)
            self.assertEqual(set(body), {"error", "rig_id", "detail", "last_ack_seq", "last_ack_at",
                                         "suggested_action"})
            self.assertEqual(body["error"], "rig_unresponsive")
            self.assertEqual(body["rig_id"], "rig-frozen")
            self.assertRegex(body["detail"],
                             rf"^outbox full \({capacity}/{capacity}\), oldest queued cmd age [1-9]\d*s$")
            self.assertEqual(body["suggested_action"], "force_reconnect")
            # The rig view shows what is stuck.
            status, rig = broker.api("GET", "/v1/rigs/rig-frozen")
            self.assertEqual(status, 200)
            self.assertEqual(len(rig["unacked_commands"]), capacity)

            latencies = []
            for _ in range(40):
                latencies.append(self.ack_latency(broker, "rig-a"))
                self.assertEqual(broker.send("rig-frozen", "dmesg")[0], 503)
            latencies.sort()
            median, base = latencies[len(latencies) // 2], baseline[len(baseline) // 2]
            self.assertLess(median, max(0.25, 3 * base), (latencies, baseline))
            self.assertLess(rss_kb(broker.pid) - rss_before, 20 * 1024)

            status, body = broker.api("POST", "/v1/rigs/rig-frozen/reconnect")
            self.assertEqual(status, 200, body)
            broker.wait_rig_gone("rig-frozen", timeout=5)
        finally:
            agents["rig-frozen"].signal(signal.SIGCONT)
        # Commands that never got an ACK wait for the rig; when it is back they are
        # sent again under the same cmd_id, and its dedup answers those it had run.
        self.assertEqual({broker.command(c)["state"] for c in stuck}, {"sent"})
        broker.wait_rigs(["rig-frozen"], timeout=20)
        for c in stuck:
            self.assertEqual(broker.wait_command(c, timeout=20)["state"], "succeeded")
        # Then a new one (until the redelivered ones are acknowledged they fill the
        # outbox again, and a command sent right after the WELCOME got 503).
        self.assertLess(self.ack_latency(broker, "rig-frozen"), 5.0)


if __name__ == "__main__":
    unittest.main()
