"""Drain: 200 rigs, a 2 s window. Every rig gets GOAWAY with a reconnect delay
spread uniformly over the window (histogram check), commands acknowledged
before the drain are not lost (their results still arrive), the broker stops
accepting and exits 0 once empty. SIGTERM drains the same way."""
import asyncio
import re
import signal
import time
import unittest

import websockets

import broker_rawclient as rc
from harness import LabTestCase, wait_for

N = 200
WINDOW_MS = 2000


def plain_url(broker):
    m = broker.wait_log(r"ready .* plain=127\.0\.0\.1:(\d+)")
    return f"ws://127.0.0.1:{int(m.group(1))}/agent"


class BrokerDrainTest(LabTestCase):
    def start(self, name):
        return self.lab.broker(name=name, plain_listen="127.0.0.1:0", accept_rate=10000, accept_burst=10000,
                               drain_window_ms=WINDOW_MS, drain_deadline_ms=WINDOW_MS + 3000)

    def test_goaway_spread_over_the_window_and_nothing_acked_is_lost(self):
        old = self.start("broker-old")
        new = self.start("broker-new")
        old_url, new_url = plain_url(old), plain_url(new)
        reconnect_at = {}
        delays = {}
        acked = {}
        drain_t0 = []

        async def rig(i, ready):
            rig_id = f"rig-{i:03d}"
            ws = await websockets.connect(old_url, subprotocols=[rc.SUBPROTOCOL], ping_interval=None)
            await ws.send(rc.hello(rig_id))
            assert (await rc.recv_msg(ws))["t"] == "welcome"
            ready.release()
            pending = []
            async for data in ws:
                m = rc.decode(data)
                if m["t"] == "command":
                    await ws.send(rc.frame("ack", seq=m["seq"], cmd_id=m["cmd_id"], duplicate=False))
                    acked[m["cmd_id"]] = rig_id
                    pending.append(m["cmd_id"])  # its RESULT comes later, during the drain
                elif m["t"] == "goaway":
                    delays[rig_id] = m["reconnect_after_ms"]
                    now = int(time.time() * 1000)
                    for cid in pending:
                        await ws.send(rc.frame("result", cmd_id=cid, status="ok", exit_code=0, signal=0,
                                               output=b"x", truncated=False, dropped_bytes=0,
                                               started_at_ms=now, finished_at_ms=now, detail=""))
                    await ws.close(1001)
                    break
            await asyncio.sleep(delays[rig_id] / 1000.0)
            ws2 = await websockets.connect(new_url, subprotocols=[rc.SUBPROTOCOL], ping_interval=None)
            await ws2.send(rc.hello(rig_id))
            assert (await rc.recv_msg(ws2))["t"] == "welcome"
            reconnect_at[rig_id] = time.monotonic() - drain_t0[0]
            return ws2

        async def go():
            ready = asyncio.Semaphore(0)
            tasks = [asyncio.create_task(rig(i, ready)) for i in range(N)]
            for _ in range(N):
                await asyncio.wait_for(ready.acquire(), 30)
            self.assertEqual(len(old.rigs()), N)
            cmd_ids = []
            for i in range(N):
                status, body = await asyncio.to_thread(old.send, f"rig-{i:03d}", "dmesg")
                self.assertEqual(status, 202, body)
                cmd_ids.append(body["cmd_id"])
            await asyncio.to_thread(wait_for, lambda: len(acked) == N, 15, 0.02, "all acks")
            drain_t0.append(time.monotonic())
            status, body = await asyncio.to_thread(old.api, "POST", "/v1/admin/drain", {"window_ms": WINDOW_MS})
            self.assertEqual(status, 202, body)
            sockets = await asyncio.wait_for(asyncio.gather(*tasks), 30)
            # The old broker refuses new connections while draining, then exits 0.
            rc_code = await asyncio.to_thread(old.proc.wait, WINDOW_MS / 1000 + 10)
            self.assertEqual(rc_code, 0, old.log()[-2000:])
            self.assertEqual(len(new.rigs()), N)
            await asyncio.gather(*(ws.close() for ws in sockets))
            return cmd_ids
        cmd_ids = asyncio.run(go())

        # Reconnect delays: every rig got one within the window, spread uniformly.
        self.assertEqual(len(delays), N)
        self.assertTrue(all(0 <= d <= WINDOW_MS for d in delays.values()))
        buckets = [0] * 10
        for d in delays.values():
            buckets[min(9, d * 10 // WINDOW_MS)] += 1
        fair = N / 10
        self.assertTrue(max(buckets) <= 3 * fair, buckets)
        self.assertTrue(min(buckets) >= fair / 3, buckets)
        # Actual reconnect times follow the delays (the last one near the window's end).
        times = sorted(reconnect_at.values())
        self.assertLess(times[0], 0.6 * WINDOW_MS / 1000)
        self.assertGreater(times[-1], 0.7 * WINDOW_MS / 1000)
        rb = [0] * 10
        for t in times:
            rb[min(9, int(t * 1000 * 10 // (WINDOW_MS + 500)))] += 1
        self.assertTrue(max(rb) <= 4 * fair, rb)
        print(f"\nGOAWAY delay histogram (200 ms buckets): {buckets}; reconnect times: {rb}")
        # Nothing acknowledged before the drain was lost: every RESULT reached the old broker.
        log = old.log()
        for cid in cmd_ids:
            self.assertRegex(log, rf"result rig=rig-\d+ cmd={cid} status=ok")
        self.assertNotIn("command lost", log)

    def test_sigterm_drains_and_exits_0(self):
        broker = self.start("broker")
        url = plain_url(broker)

        async def go():
            socks = []
            for i in range(5):
                ws = await websockets.connect(url, subprotocols=[rc.SUBPROTOCOL], ping_interval=None)
                await ws.send(rc.hello(f"rig-{i}"))
                await rc.recv_msg(ws)
                socks.append(ws)
            broker.signal(signal.SIGTERM)
            got = []
            for ws in socks:
                m = rc.decode(await asyncio.wait_for(ws.recv(), 5))
                self.assertEqual(m["t"], "goaway")
                self.assertLessEqual(m["reconnect_after_ms"], WINDOW_MS)
                got.append(m)
            # New connections are not accepted any more.
            with self.assertRaises(Exception):
                await websockets.connect(url, subprotocols=[rc.SUBPROTOCOL], open_timeout=2)
            for ws in socks:
                await ws.close(1001)
            code = await asyncio.to_thread(broker.proc.wait, 10)
            self.assertEqual(code, 0)
        asyncio.run(go())

    def test_drain_deadline_exits_even_if_rigs_stay(self):
        broker = self.lab.broker(plain_listen="127.0.0.1:0", drain_window_ms=300, drain_deadline_ms=1500)
        url = plain_url(broker)

        async def go():
            ws = await websockets.connect(url, subprotocols=[rc.SUBPROTOCOL], ping_interval=None)
            await ws.send(rc.hello("rig-stubborn"))
            await rc.recv_msg(ws)
            t0 = time.monotonic()
            broker.signal(signal.SIGTERM)
            code = await asyncio.to_thread(broker.proc.wait, 10)  # the rig ignores GOAWAY
            self.assertEqual(code, 0)
            self.assertLess(time.monotonic() - t0, 5)
        asyncio.run(go())

    def test_real_agents_follow_goaway_to_the_other_broker(self):
        old = self.lab.broker(name="old", drain_window_ms=1500, drain_deadline_ms=6000)
        new = self.lab.broker(name="new")
        rigs = [f"rig-{i}" for i in range(5)]
        for r in rigs:
            # The old broker first; the agent moves on to the next URL after a GOAWAY.
            self.lab.agent(r, [old, new])
        old.wait_rigs(rigs)
        acked = [old.run(r, "dmesg", {"lines": 3}) for r in rigs]
        self.assertTrue(all(c["state"] == "succeeded" for c in acked), acked)
        status, body = old.api("POST", "/v1/admin/drain", {"window_ms": 1500})
        self.assertEqual(status, 202, body)
        self.assertEqual(old.proc.wait(15), 0)
        new.wait_rigs(rigs, timeout=20)
        c = new.run("rig-0", "dmesg", {"lines": 3})
        self.assertEqual(c["state"], "succeeded")


if __name__ == "__main__":
    unittest.main()
