"""The HELLO path fuzzed through a real broker (issue 15, point 7): a raw client
(python, TLS with a rig certificate, a real WebSocket) sends mutated HELLOs, and a
valid HELLO followed by mutated and random frames, over a bounded number of
connections; every connection must end with a close code of docs/PROTOCOL.md §7
sent by the broker (never an abnormal end without a close frame, never 4500), and
a real fleetlink-agent connected to the same broker keeps running commands
throughout. This is the "through a real broker" proof; the millions of executions
are the in-process target tests/fuzz/fuzz_fleet_hello.cpp (docs/FUZZING.md).

FLEETLINK_RAWFUZZ_SEED (default 1515) and FLEETLINK_RAWFUZZ_CONNECTIONS (default
360) choose the run; a failure prints the seed and the inputs that failed.
"""
import asyncio
import os
import random
import unittest

import msgpack
import websockets

import broker_rawclient as rc
from harness import LabTestCase

# The codes the broker may send (docs/PROTOCOL.md §7, sender broker or either),
# and 1000 for the connections this client ends itself after the broker served them.
BROKER_CLOSES = {1000, 1001, 1002, 1009, 4002, 4008, 4400, 4401, 4403, 4409, 4410, 4422, 4426, 4429}


def mutate_hello(rnd, rig_id):
    """A HELLO for rig_id, bent one way or another (as bytes)."""
    fields = {"v": 1, "t": "hello", "rig_id": rig_id, "agent_version": "0.1.0", "boot_id": rc.uuid7(),
              "labels": {"lab": "b2"}, "kinds": ["dmesg", "reboot"]}
    how = rnd.randrange(12)
    if how == 0:
        fields["rig_id"] = "r" * rnd.choice((0, 64, 65, 300))
    elif how == 1:
        fields["kinds"] = [f"k{i}" for i in range(rnd.choice((32, 33, 64, 65, 500)))]
    elif how == 2:
        nested = "x"
        for _ in range(rnd.choice((8, 31, 32, 40, 200))):
            nested = [nested]
        fields["labels"] = {"deep": nested}
    elif how == 3:
        fields["labels"] = {f"l{i}": "v" for i in range(rnd.choice((64, 65, 1025)))}
    elif how == 4:
        fields["labels"] = {"lab": "v" * rnd.choice((256, 257, 4096, 4097))}
    elif how == 5:
        fields["boot_id"] = rnd.choice(("", "not-a-uuid", "01936d3c-0000-4000-8000-000000000001", rc.uuid7().upper()))
    elif how == 6:
        fields["v"] = rnd.choice((0, 2, -1, "1", None))
    elif how == 7:
        del fields[rnd.choice(list(fields))]
    elif how == 8:
        fields[rnd.choice(list(fields))] = rnd.choice((None, 7, 3.5, b"\x00\xff", [], {}, True))
    data = bytearray(msgpack.packb(fields, use_bin_type=True))
    if how == 9:  # bytes flipped
        for _ in range(rnd.randrange(1, 6)):
            data[rnd.randrange(len(data))] = rnd.randrange(256)
    elif how == 10:  # cut short, or trailing bytes
        data = data[:rnd.randrange(len(data))] if rnd.random() < 0.5 else data + os.urandom(rnd.randrange(1, 32))
    elif how == 11:  # a chunk of random bytes spliced in
        at = rnd.randrange(len(data))
        data[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 24)))
    return bytes(data)


def random_frame(rnd):
    """A frame after a valid HELLO: a mutated vector, random bytes, or another message."""
    base = rnd.choice([
        rc.frame("ack", seq=rnd.randrange(0, 5), cmd_id=rc.uuid7(), duplicate=rnd.random() < 0.5),
        rc.frame("nack", seq=1, cmd_id=rc.uuid7(), reason=rnd.choice(("busy", "seq_gap", "zzz")), detail="",
                 expected_seq=rnd.randrange(3)),
        rc.frame("output", cmd_id=rc.uuid7(), offset=rnd.randrange(1 << 20), data=os.urandom(rnd.randrange(64))),
        rc.frame("event", name="e", fields={"a": "b"}, at_ms=rnd.randrange(1 << 40)),
        rc.frame("result", cmd_id=rc.uuid7(), status=rnd.choice(("ok", "failed", "bogus")), exit_code=0, signal=0,
                 output=b"", truncated=False, dropped_bytes=0, started_at_ms=0, finished_at_ms=0, detail=""),
        rc.hello("rig-fz"),
        rc.frame("welcome", broker_id="b", session_id=rc.uuid7(), ping_interval_ms=1, max_frame_bytes=1),
    ])
    how = rnd.randrange(4)
    if how == 0:
        return base
    if how == 1:
        b = bytearray(base)
        for _ in range(rnd.randrange(1, 4)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        return bytes(b)
    if how == 2:
        return base[:rnd.randrange(len(base))]
    return bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 200)))


class BrokerRawFuzzTest(LabTestCase):
    def test_mutated_hellos_and_frames_end_with_defined_close_codes_and_a_good_agent_is_served(self):
        seed = int(os.environ.get("FLEETLINK_RAWFUZZ_SEED", "1515"))
        total = int(os.environ.get("FLEETLINK_RAWFUZZ_CONNECTIONS", "360"))
        rnd = random.Random(seed)
        broker = self.lab.broker(hello_timeout_ms=3000, accept_rate=10000, accept_burst=10000, rig_rate=1000,
                                 rig_burst=1000)
        self.lab.agent("rig-good", broker)
        broker.wait_rigs(["rig-good"], timeout=20)
        ctx = rc.tls_context(self.lab.certs, "rig-fz")
        outcomes = []

        async def one(n):
            inputs = []
            try:
                ws = await rc.connect(broker.url, ctx)
            except Exception as e:  # noqa: BLE001
                return (n, "connect failed", repr(e), inputs)
            try:
                if rnd.random() < 0.6:
                    inputs.append(mutate_hello(rnd, "rig-fz"))
                else:
                    inputs.append(rc.hello("rig-fz"))
                    inputs += [random_frame(rnd) for _ in range(rnd.randrange(1, 6))]
                for data in inputs:
                    await ws.send(data)
            except websockets.ConnectionClosed:
                pass
            try:
                # Whatever the broker answers, until it closes; still open after a while:
                # it served the connection, and this client ends it (1000).
                while True:
                    await asyncio.wait_for(ws.recv(), 4)
            except asyncio.TimeoutError:
                await ws.close(1000)
            except websockets.ConnectionClosed:
                pass
            await asyncio.wait_for(ws.wait_closed(), 10)
            rcvd = getattr(ws, "close_rcvd", None)
            return (n, "closed", rcvd.code if rcvd is not None else None, inputs)

        async def go():
            done = 0
            while done < total:
                batch = min(12, total - done)
                outcomes.extend(await asyncio.gather(*(one(done + i) for i in range(batch))))
                done += batch
                if done % 120 == 0 or done == total:
                    c = await asyncio.to_thread(broker.run, "rig-good", "dmesg", {"lines": 1}, 30)
                    self.assertEqual(c["state"], "succeeded", f"the good agent after {done} connections: {c}")
        asyncio.run(go())

        bad = [o for o in outcomes if o[1] != "closed" or o[2] not in BROKER_CLOSES]
        self.assertEqual([(n, what, code, [d.hex()[:120] for d in inputs]) for n, what, code, inputs in bad], [],
                         f"seed {seed}: connections that did not end with a defined close code")
        codes = {}
        for o in outcomes:
            codes[o[2]] = codes.get(o[2], 0) + 1
        print(f"rawfuzz seed={seed} connections={len(outcomes)} close codes={dict(sorted(codes.items()))}")
        # Most were refused for cause (4400 and kin), some served: both paths ran.
        self.assertGreater(codes.get(4400, 0), total // 10, codes)
        self.assertTrue(broker.alive())
        self.assertEqual(broker.api("GET", "/healthz")[0], 200)
        self.assertIn("rig-good", broker.rigs())
        self.assertNotRegex(broker.log(), r"code=4500")


if __name__ == "__main__":
    unittest.main()
