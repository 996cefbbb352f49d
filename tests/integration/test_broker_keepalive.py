"""Keepalive: a frozen rig (SIGSTOP) is closed 4002 after N missed pongs and leaves
the registry within the configured bound; the other rigs are untouched."""
import os
import signal
import sys
import time
import unittest

from harness import LabTestCase

HERE = os.path.dirname(os.path.abspath(__file__))


class BrokerKeepaliveTest(LabTestCase):
    def rig_process(self, broker, rig_id):
        crt, key = self.lab.certs.rig(rig_id)
        p = self.lab.process(f"rig-{rig_id}", ["/usr/bin/python3", os.path.join(HERE, "broker_rigproc.py"),
                                               broker.url, rig_id, crt, key, self.lab.certs.ca])
        p.wait_log(r"welcome ", timeout=10)
        return p

    def test_sigstopped_rig_is_dropped_4002_others_untouched(self):
        ping, pong, missed = 100, 100, 3
        broker = self.lab.broker(ping_interval_ms=ping, pong_timeout_ms=pong, max_missed_pongs=missed)
        frozen = self.rig_process(broker, "rig-frozen")
        others = [self.rig_process(broker, f"rig-{i}") for i in range(3)]
        broker.wait_rigs(["rig-frozen", "rig-0", "rig-1", "rig-2"])
        # Healthy rigs answer pings for a while: nobody is dropped.
        time.sleep(0.6)
        self.assertEqual(len(broker.rigs()), 4)
        frozen.signal(signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            # It shows as unresponsive once a pong is missed ...
            broker.wait_rig_gone("rig-frozen", timeout=5)
            elapsed = time.monotonic() - t0
            # ... and is gone within (missed) ping periods + the pong timeout + sweep slack.
            bound = (missed * ping + pong) / 1000.0 + 0.5
            self.assertLess(elapsed, bound, f"dropped after {elapsed:.2f}s, bound {bound:.2f}s")
            self.assertRegex(broker.log(), r"closing rig=rig-frozen .*code=4002")
            self.assertEqual(set(broker.rigs()), {"rig-0", "rig-1", "rig-2"})
            for i in range(3):
                c = broker.run(f"rig-{i}", "dmesg", {"lines": 3}, timeout=5)
                self.assertEqual(c["state"], "succeeded")
            self.assertTrue(all(p.alive() for p in others))
        finally:
            frozen.signal(signal.SIGCONT)
        status, text = broker.api("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertIn("4002", text)


if __name__ == "__main__":
    unittest.main()
