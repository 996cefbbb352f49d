"""The plain ws listener (loopback only, identities unchecked), readiness, metrics,
and a real agent's round trip through the broker."""
import asyncio
import os
import subprocess
import unittest

import websockets

import broker_rawclient as rc
from harness import BUILD_DIR, LabTestCase, binary


class BrokerPlainHealthTest(LabTestCase):
    def test_plain_listener_refused_off_loopback(self):
        c = self.lab.certs
        for addr in ("0.0.0.0:0", "10.1.2.3:9000", "[::]:0"):
            p = subprocess.run([binary("fleetlink-broker"), "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0",
                                "--cert", c.broker_cert, "--key", c.broker_key, "--ca", c.ca,
                                "--plain-listen", addr, "--state-dir", self.lab.path("state")],
                               capture_output=True, text=True, timeout=10)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("loopback", p.stderr)

    def test_plain_listener_on_loopback_skips_identity(self):
        broker = self.lab.broker(plain_listen="127.0.0.1:0")
        m = broker.wait_log(r"ready .* plain=127\.0\.0\.1:(\d+)")
        self.assertRegex(broker.log(), r"WARN .*plain ws listener .*NOT checked")
        url = f"ws://127.0.0.1:{int(m.group(1))}/agent"

        async def go():
            ws = await websockets.connect(url, subprotocols=[rc.SUBPROTOCOL])
            await ws.send(rc.hello("bench-rig-1"))
            self.assertEqual((await rc.recv_msg(ws))["t"], "welcome")
            self.assertIn("bench-rig-1", broker.rigs())
            await ws.close()
        asyncio.run(go())

    def test_broker_says_which_malloc_it_runs_on(self):
        # Guards the link: a linker that dropped libmimalloc (as-needed) would leave
        # the broker on glibc's malloc without a word.
        allocator = "mimalloc"
        with open(os.path.join(BUILD_DIR, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("FLEETLINK_BROKER_ALLOCATOR:"):
                    allocator = line.split("=", 1)[1].strip()
        broker = self.lab.broker()
        m = broker.wait_log(r"broker id=.* allocator=(.+)")
        if allocator == "mimalloc":
            self.assertRegex(m.group(1), r"^mimalloc \d+\.\d+\.\d+")
        else:
            self.assertEqual(m.group(1).strip(), "glibc malloc")

    def test_readiness_and_metrics(self):
        broker = self.lab.broker()
        self.assertEqual(broker.api("GET", "/healthz")[0], 200)
        self.assertEqual(broker.api("GET", "/readyz")[0], 200)

        async def go():
            # (Admission refusals have their own tests: test_broker_admission.)
            ws, _ = await rc.rig_session(broker.url, rc.tls_context(self.lab.certs, "rig-a"), "rig-a")
            status, body = await asyncio.to_thread(broker.send, "rig-a", "dmesg")
            self.assertEqual(status, 202)
            await rc.recv_msg(ws)
            status, text = await asyncio.to_thread(broker.api, "GET", "/metrics")
            self.assertEqual(status, 200)
            self.assertNotIn("rig-a", text)  # aggregated only, never a series per rig
            for needle in ("accepted", "admission", "enqueued"):
                self.assertIn(needle, text)
            # A connected rig keeps the draining broker up: it reports not-ready meanwhile.
            status, body = await asyncio.to_thread(broker.api, "POST", "/v1/admin/drain", {"window_ms": 5000})
            self.assertEqual(status, 202, body)
            self.assertEqual((await asyncio.to_thread(broker.api, "GET", "/readyz"))[0], 503)
            self.assertEqual((await rc.recv_msg(ws, skip=()))["t"], "goaway")
            await ws.close(1001)
        asyncio.run(go())
        self.assertEqual(broker.proc.wait(10), 0)

    def test_two_brokers_share_one_port(self):
        # SO_REUSEPORT on the broker's own listening socket.
        first = self.lab.broker(name="b1")
        second = self.lab.broker(name="b2", listen_port=first.listen_port)
        self.assertEqual(second.listen_port, first.listen_port)

        async def go():
            for i in range(6):
                ws, welcome = await rc.rig_session(first.url, rc.tls_context(self.lab.certs, f"rig-{i}"), f"rig-{i}")
                await ws.close()
        asyncio.run(go())

    def test_config_file(self):
        c = self.lab.certs
        conf = self.lab.path("broker.conf")
        with open(conf, "w") as f:
            f.write(f"listen=127.0.0.1:0\ncontrol=127.0.0.1:0\ncert={c.broker_cert}\nkey={c.broker_key}\n"
                    f"ca={c.ca}\nbroker-id=from-file\nping-interval-ms=1234\n")
        broker = self.lab.broker(name="cfg", config=conf, cert=None, key=None, ca=None, broker_id=None,
                                 listen=None, control=None)
        # Logged right after the ready line: wait for it rather than race it.
        broker.wait_log(r"broker id=from-file .*ping=1234ms")

    def test_real_agent_round_trip(self):
        broker = self.lab.broker()
        self.lab.agent("rig-real", broker)
        broker.wait_rigs(["rig-real"])
        c = broker.run("rig-real", "dmesg", {"lines": 5}, timeout=20)
        self.assertIn(c["state"], ("succeeded",), c)


if __name__ == "__main__":
    unittest.main()
