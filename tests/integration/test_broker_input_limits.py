"""Limits on input: oversized frames (1009), malformed frames after HELLO (4400),
unknown types (strict 4422 / lenient ignored), per-rig rate limit (4429),
reassembly of fragmented frames, and a fuzz run of random and truncated frames
that never crashes the broker nor disturbs a healthy rig."""
import asyncio
import os
import random
import time
import unittest

import websockets

import broker_rawclient as rc
from harness import LabTestCase

ALLOWED_CLOSES = {1000, 1002, 1006, 1007, 1009, 4008, 4400, 4409, 4410, 4422, 4426, 4429}


def result_frame(cmd_id, output=b"ok"):
    now = int(time.time() * 1000)
    return rc.frame("result", cmd_id=cmd_id, status="ok", exit_code=0, signal=0, output=output,
                    truncated=False, dropped_bytes=0, started_at_ms=now, finished_at_ms=now, detail="")


class BrokerInputLimitsTest(LabTestCase):
    def ctx(self, rig):
        return rc.tls_context(self.lab.certs, rig)

    def test_oversized_frame_closes_1009(self):
        broker = self.lab.broker(max_frame_bytes=4096)

        async def go():
            ws, welcome = await rc.rig_session(broker.url, self.ctx("rig-a"), "rig-a")
            self.assertEqual(welcome["max_frame_bytes"], 4096)
            await ws.send(rc.frame("event", name="big", fields={"x": "y" * 8000}, at_ms=0))
            self.assertEqual(await rc.wait_closed_code(ws), 1009)
            # Also when the big frame arrives as many small fragments.
            ws, _ = await rc.rig_session(broker.url, self.ctx("rig-a"), "rig-a")
            data = rc.frame("event", name="big", fields={"x": "y" * 8000}, at_ms=0)
            await ws.send([data[i:i + 500] for i in range(0, len(data), 500)])
            self.assertEqual(await rc.wait_closed_code(ws), 1009)
        asyncio.run(go())
        self.assertNotIn("rig-a", broker.rigs())

    def test_fragmented_and_large_frames_are_reassembled(self):
        # With the default receive buffer (128 B: a 60 KB RESULT arrives in ~470 reads)
        # and a large one (one read can hold several frames).
        for rx in (None, 65536):
            with self.subTest(ws_rx_buffer_bytes=rx):
                self._reassemble(self.lab.broker(**({"ws_rx_buffer_bytes": rx} if rx else {})))

    def _reassemble(self, broker):
        async def go():
            ws, _ = await rc.rig_session(broker.url, self.ctx("rig-a"), "rig-a")
            status, body = await asyncio.to_thread(broker.send, "rig-a", "dmesg")
            self.assertEqual(status, 202)
            cmd = await rc.recv_msg(ws)
            await ws.send(rc.frame("ack", seq=cmd["seq"], cmd_id=cmd["cmd_id"], duplicate=False))
            output = bytes(random.Random(1).choice(b"abcdefgh\n") for _ in range(60000))
            data = result_frame(cmd["cmd_id"], output)
            await ws.send([data[i:i + 777] for i in range(0, len(data), 777)])  # fragmented message
            c = await asyncio.to_thread(broker.wait_command, body["cmd_id"], ("succeeded",))
            self.assertEqual(c["result"]["output"], output.decode())
            await ws.close()
        asyncio.run(go())

    def test_malformed_after_hello_4400_and_unknown_type_strict_4422(self):
        broker = self.lab.broker(strict=True)

        async def go():
            ws, _ = await rc.rig_session(broker.url, self.ctx("rig-a"), "rig-a")
            await ws.send(b"\x81\xa1v")  # truncated map
            self.assertEqual(await rc.wait_closed_code(ws), 4400)
            ws, _ = await rc.rig_session(broker.url, self.ctx("rig-a"), "rig-a")
            await ws.send(rc.frame("bogus", x=1))
            self.assertEqual(await rc.wait_closed_code(ws), 4422)
            ws, _ = await rc.rig_session(broker.url, self.ctx("rig-a"), "rig-a")
            await ws.send(rc.hello("rig-a"))  # a second HELLO is a protocol violation
            self.assertEqual(await rc.wait_closed_code(ws), 4400)
        asyncio.run(go())

    def test_unknown_type_lenient_is_ignored(self):
        broker = self.lab.broker(strict=False)

        async def go():
            ws, _ = await rc.rig_session(broker.url, self.ctx("rig-a"), "rig-a")
            await ws.send(rc.frame("bogus", x=1))
            status, body = await asyncio.to_thread(broker.send, "rig-a", "dmesg")
            self.assertEqual(status, 202, body)
            self.assertEqual((await rc.recv_msg(ws))["t"], "command")
            await ws.close()
        asyncio.run(go())
        self.assertIn("unknown message type ignored", broker.log())

    def test_inbound_flood_closes_4429(self):
        broker = self.lab.broker(rig_rate=20, rig_burst=20)

        async def go():
            ws, _ = await rc.rig_session(broker.url, self.ctx("rig-a"), "rig-a")
            try:
                for i in range(200):
                    await ws.send(rc.frame("event", name="spam", fields={}, at_ms=i))
            except websockets.ConnectionClosed:
                pass
            self.assertEqual(await rc.wait_closed_code(ws), 4429)
        asyncio.run(go())

    def test_output_stream_over_the_rate_is_slowed_not_closed(self):
        broker = self.lab.broker(rig_rate=200, rig_burst=20)

        async def go():
            ws, _ = await rc.rig_session(broker.url, self.ctx("rig-a"), "rig-a")
            status, body = await asyncio.to_thread(broker.send, "rig-a", "suite", {"suite": "x"})
            self.assertEqual(status, 202)
            cmd = await rc.recv_msg(ws)
            await ws.send(rc.frame("ack", seq=cmd["seq"], cmd_id=cmd["cmd_id"], duplicate=False))
            chunk = b"y" * 1000
            t0 = time.monotonic()
            for i in range(300):
                await ws.send(rc.frame("output", cmd_id=cmd["cmd_id"], offset=i * 1000, data=chunk))
            await ws.send(result_frame(cmd["cmd_id"], b"end"))
            c = await asyncio.to_thread(broker.wait_command, body["cmd_id"], ("succeeded",), 20)
            elapsed = time.monotonic() - t0
            self.assertEqual(c["streamed_bytes"], 300 * 1000)
            # 300 frames at 200/s after a burst of 20: paced, so it took over a second.
            self.assertGreater(elapsed, 1.0)
            self.assertIn("rig-a", broker.rigs())
            await ws.close()
        asyncio.run(go())
        self.assertNotIn("code=4429", broker.log())

    def test_fuzz_random_and_truncated_frames(self):
        # 40 clients at once from 127.0.0.1: no bound per source address here (test_broker_fd_budget has it).
        broker = self.lab.broker(max_frame_bytes=8192, hello_timeout_ms=2000, accept_rate=10000, accept_burst=10000,
                                 max_handshakes_per_address=0)
        rnd = random.Random(int(os.environ.get("FLEETLINK_FUZZ_SEED", "4242")))
        valid = [rc.hello("rig-fuzz"), rc.frame("ack", seq=1, cmd_id="x", duplicate=False),
                 result_frame("nope"), rc.frame("output", cmd_id="x", offset=0, data=b"abc"),
                 rc.frame("event", name="e", fields={"a": "b"}, at_ms=1)]

        def junk():
            kind = rnd.randrange(5)
            if kind == 0:
                return bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 64)))
            base = rnd.choice(valid)
            if kind == 1:
                return base[:rnd.randrange(len(base))]
            if kind == 2:
                b = bytearray(base)
                for _ in range(rnd.randrange(1, 4)):
                    b[rnd.randrange(len(b))] = rnd.randrange(256)
                return bytes(b)
            if kind == 3:
                return base + bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 16)))
            return bytes(rnd.randrange(256) for _ in range(rnd.randrange(9000, 12000)))

        async def healthy_roundtrip(ws):
            status, body = await asyncio.to_thread(broker.send, "rig-ok", "dmesg")
            self.assertEqual(status, 202, body)
            cmd = await rc.recv_msg(ws)
            await ws.send(rc.frame("ack", seq=cmd["seq"], cmd_id=cmd["cmd_id"], duplicate=False))
            await ws.send(result_frame(cmd["cmd_id"]))
            c = await asyncio.to_thread(broker.wait_command, body["cmd_id"], ("succeeded",), 5)
            self.assertEqual(c["state"], "succeeded")

        async def fuzz_one(after_hello):
            try:
                ws = await rc.connect(broker.url, self.ctx("rig-fuzz"))
            except Exception as e:  # noqa: BLE001
                return ("connect", repr(e))
            try:
                if after_hello:
                    await ws.send(rc.hello("rig-fuzz"))
                for _ in range(rnd.randrange(1, 5)):
                    if rnd.random() < 0.2:
                        text = "".join(chr(rnd.randrange(32, 127)) for _ in range(20))
                        await ws.send(text)
                    else:
                        await ws.send(junk())
            except websockets.ConnectionClosed:
                pass
            try:
                code = await rc.wait_closed_code(ws, timeout=8)
            except asyncio.TimeoutError:
                # Still open after 8 s: it said a valid HELLO, then only frames the broker
                # takes, and it answers pings, so it keeps the rig (PROTOCOL 5.3: the later
                # HELLOs of rig-fuzz were refused 4409, not given the rig). Legitimate:
                # counted, and closed here.
                await ws.close()
                return ("kept", None)
            return ("closed", code)

        async def go():
            ok, _ = await rc.rig_session(broker.url, self.ctx("rig-ok"), "rig-ok")
            codes = []
            for round_ in range(6):
                codes += await asyncio.gather(*(fuzz_one(rnd.random() < 0.5) for _ in range(40)))
                await healthy_roundtrip(ok)
            bad = [c for c in codes if c[0] not in ("closed", "kept") or (c[1] is not None and c[1] not in ALLOWED_CLOSES)]
            self.assertEqual(bad, [])
            # At most one live rig-fuzz connection at a time can be kept (per round).
            self.assertLessEqual(sum(c[0] == "kept" for c in codes), 6)
            await ok.close()
        asyncio.run(go())
        self.assertTrue(broker.alive())
        self.assertEqual(broker.api("GET", "/healthz")[0], 200)


if __name__ == "__main__":
    unittest.main()
