"""Ordered delivery, ACK tracking, backpressure (503 rig_unresponsive), forced reconnect,
and a frozen (SIGSTOP) rig that neither disturbs the others nor grows the broker."""
import asyncio
import os
import re
import signal
import sys
import time
import unittest

import broker_rawclient as rc
from harness import LabTestCase, rss_kb, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))



class BrokerDeliveryTest(LabTestCase):
    def rig_process(self, broker, rig_id):
        crt, key = self.lab.certs.rig(rig_id)
        p = self.lab.process(f"rig-{rig_id}", [sys.executable if sys.executable.startswith("/usr/bin") else "/usr/bin/python3",
                                               os.path.join(HERE, "broker_rigproc.py"), broker.url, rig_id, crt, key,
                                               self.lab.certs.ca])
        p.wait_log(r"welcome ", timeout=10)
        return p

    def test_in_order_seq_ack_result_and_unacked_view(self):
        broker = self.lab.broker(outbox_capacity=4)

        async def go():
            ws, _ = await rc.rig_session(broker.url, rc.tls_context(self.lab.certs, "rig-a"), "rig-a")
            ids = []
            for i in range(4):
                status, body = await asyncio.to_thread(broker.send, "rig-a", "dmesg", {"lines": i})
                self.assertEqual(status, 202, body)
                self.assertEqual(body["seq"], i + 1)
                ids.append(body["cmd_id"])
            got = [await rc.recv_msg(ws) for _ in range(4)]
            self.assertEqual([m["seq"] for m in got], [1, 2, 3, 4])
            self.assertEqual([m["cmd_id"] for m in got], ids)
            self.assertEqual(got[0]["args"], {"lines": "0"})
            # Full outbox: the exact operator answer, at once.
            status, body = await asyncio.to_thread(broker.send, "rig-a", "dmesg")
            self.assertEqual(status, 503, body)
            self.assertEqual(body["error"], "rig_unresponsive")
            self.assertEqual(body["rig_id"], "rig-a")
            self.assertRegex(body["detail"], r"^outbox full \(4/4\), oldest queued cmd age \d+s$")
            self.assertEqual(body["suggested_action"], "force_reconnect")
            self.assertEqual(body["last_ack_seq"], 0)
            self.assertIsNone(body["last_ack_at"])
            status, rig = await asyncio.to_thread(broker.api, "GET", "/v1/rigs/rig-a")
            self.assertEqual(status, 200)
            self.assertEqual([u["seq"] for u in rig["unacked_commands"]], [1, 2, 3, 4])
            self.assertTrue(all(u["sent"] for u in rig["unacked_commands"]))
            # ACK 1 and 2, RESULT for 1.
            await ws.send(rc.frame("ack", seq=1, cmd_id=ids[0], duplicate=False))
            await ws.send(rc.frame("ack", seq=2, cmd_id=ids[1], duplicate=True))
            now = int(time.time() * 1000)
            await ws.send(rc.frame("result", cmd_id=ids[0], status="ok", exit_code=0, signal=0,
                                   output=b"hello\xff", truncated=False, dropped_bytes=0,
                                   started_at_ms=now, finished_at_ms=now, detail=""))
            c = await asyncio.to_thread(broker.wait_command, ids[0], ("succeeded",))
            self.assertEqual(c["result"]["exit_code"], 0)
            self.assertTrue(c["result"]["output"].startswith("hello"))
            c2 = await asyncio.to_thread(broker.command, ids[1])
            self.assertEqual(c2["state"], "acked")
            self.assertTrue(c2["duplicate"])
            status, rig = await asyncio.to_thread(broker.api, "GET", "/v1/rigs/rig-a")
            self.assertEqual(rig["last_ack_seq"], 2)
            self.assertIsNotNone(rig["last_ack_at"])
            self.assertEqual([u["seq"] for u in rig["unacked_commands"]], [3, 4])
            # Forced reconnect: 4403; the unacknowledged commands wait for the next connection.
            status, body = await asyncio.to_thread(broker.api, "POST", "/v1/rigs/rig-a/reconnect")
            self.assertEqual(status, 200, body)
            self.assertEqual(await rc.wait_closed_code(ws), 4403)
            for cid in ids[2:]:
                self.assertEqual((await asyncio.to_thread(broker.command, cid))["state"], "sent")
            self.assertEqual((await asyncio.to_thread(broker.command, ids[0]))["state"], "succeeded")
        asyncio.run(go())
        self.assertEqual(broker.rigs(connected_only=False)["rig-a"]["state"], "offline")
        status, body = broker.send("rig-a", "dmesg")
        self.assertEqual(status, 202, body)  # held for the rig
        self.assertTrue(body["held"], body)

    def test_a_result_without_an_ack_settles_the_command_even_after_output(self):
        # A rig that streams OUTPUT and sends its RESULT but never the ACK: the
        # command is done, and stays done when the connection ends (it must not
        # linger in the outbox and be reported lost).
        broker = self.lab.broker()

        async def go():
            ws, _ = await rc.rig_session(broker.url, rc.tls_context(self.lab.certs, "rig-a"), "rig-a")
            status, body = await asyncio.to_thread(broker.send, "rig-a", "dmesg")
            self.assertEqual(status, 202, body)
            cmd_id = body["cmd_id"]
            cmd = await rc.recv_msg(ws)
            self.assertEqual(cmd["cmd_id"], cmd_id)
            await ws.send(rc.frame("output", cmd_id=cmd_id, offset=0, data=b"line\n"))
            now = int(time.time() * 1000)
            await ws.send(rc.frame("result", cmd_id=cmd_id, status="ok", exit_code=0, signal=0,
                                   output=b"line\n", truncated=False, dropped_bytes=0,
                                   started_at_ms=now, finished_at_ms=now, detail=""))
            c = await asyncio.to_thread(broker.wait_command, cmd_id, ("succeeded",))
            self.assertEqual(c["result"]["status"], "ok")
            status, rig = await asyncio.to_thread(broker.api, "GET", "/v1/rigs/rig-a")
            self.assertEqual(rig["unacked_commands"], [])
            await ws.close()
            await asyncio.to_thread(wait_for, lambda: "rig-a" not in broker.rigs(), 10)
            self.assertEqual((await asyncio.to_thread(broker.command, cmd_id))["state"], "succeeded")
        asyncio.run(go())

    def test_frozen_rig_does_not_slow_the_others(self):
        broker = self.lab.broker(outbox_capacity=16)
        frozen = self.rig_process(broker, "rig-frozen")
        healthy = self.rig_process(broker, "rig-ok")
        broker.wait_rigs(["rig-frozen", "rig-ok"])
        rss_before = rss_kb(broker.pid)
        frozen.signal(signal.SIGSTOP)
        try:
            accepted = 0
            refused = None
            for _ in range(40):
                status, body = broker.send("rig-frozen", "dmesg", {"lines": 5})
                if status == 202:
                    accepted += 1
                else:
                    refused = (status, body)
                    break
            self.assertEqual(accepted, 16)
            self.assertEqual(refused[0], 503)
            self.assertEqual(refused[1]["error"], "rig_unresponsive")
            latencies = []
            for _ in range(50):
                t0 = time.monotonic()
                status, body = broker.send("rig-ok", "dmesg", {"lines": 5})
                self.assertEqual(status, 202, body)
                broker.wait_command(body["cmd_id"], ("acked", "succeeded"), timeout=5)
                latencies.append(time.monotonic() - t0)
                # Keep hammering the frozen rig: every attempt is refused at once.
                status, _ = broker.send("rig-frozen", "dmesg")
                self.assertEqual(status, 503)
            latencies.sort()
            self.assertLess(latencies[len(latencies) // 2], 0.25, latencies)
            self.assertLess(latencies[-1], 1.0, latencies)
            self.assertLess(rss_kb(broker.pid) - rss_before, 20 * 1024)
            status, body = broker.api("POST", "/v1/rigs/rig-frozen/reconnect")
            self.assertEqual(status, 200, body)
            broker.wait_rig_gone("rig-frozen", timeout=5)
            self.assertIn("rig-ok", broker.rigs())
        finally:
            frozen.signal(signal.SIGCONT)


if __name__ == "__main__":
    unittest.main()
