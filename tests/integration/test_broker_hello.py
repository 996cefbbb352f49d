"""Broker HELLO outcomes with a raw client: WELCOME, 4400, 4401, 4409, 4410, 4008."""
import asyncio
import time
import unittest

import websockets

import broker_rawclient as rc
from harness import LabTestCase, wait_for


class BrokerHelloTest(LabTestCase):
    def setUp(self):
        super().setUp()
        self.broker = self.lab.broker(hello_timeout_ms=500)

    def ctx(self, rig_id):
        return rc.tls_context(self.lab.certs, rig_id)

    def test_accept_then_welcome_and_registered(self):
        async def go():
            ws, welcome = await rc.rig_session(self.broker.url, self.ctx("rig-a"), "rig-a")
            self.assertEqual(ws.subprotocol, rc.SUBPROTOCOL)  # the broker answers with it
            self.assertEqual(welcome["broker_id"], "broker")
            self.assertTrue(welcome["session_id"])
            rigs = self.broker.rigs()
            self.assertIn("rig-a", rigs)
            self.assertEqual(rigs["rig-a"]["state"], "connected")
            await ws.close()
        asyncio.run(go())
        self.broker.wait_rig_gone("rig-a")

    def test_no_subprotocol_is_accepted(self):
        async def go():
            ws = await websockets.connect(self.broker.url, ssl=self.ctx("rig-a"), open_timeout=10)
            self.assertIsNone(ws.subprotocol)
            await ws.send(rc.hello("rig-a"))
            self.assertEqual((await rc.recv_msg(ws))["t"], "welcome")
            await ws.close()
        asyncio.run(go())

    def test_malformed_hello_closes_4400_and_logs_subject(self):
        async def go():
            for junk in (b"\x93garbage", b"", b"\xc1", rc.frame("ack", seq=1, cmd_id="x", duplicate=False),
                         rc.frame("hello", rig_id="rig-b", agent_version="x", boot_id="not-a-uuid",
                                  labels={}, kinds=[])):
                ws = await rc.connect(self.broker.url, self.ctx("rig-b"))
                await ws.send(junk)
                self.assertEqual(await rc.wait_closed_code(ws), 4400, junk)
        asyncio.run(go())
        self.assertNotIn("rig-b", self.broker.rigs())
        self.assertIn("CN=rig-b", self.broker.log())

    def test_identity_mismatch_closes_4401(self):
        async def go():
            ws = await rc.connect(self.broker.url, self.ctx("rig-a"))
            await ws.send(rc.hello("rig-b"))
            self.assertEqual(await rc.wait_closed_code(ws), 4401)
        asyncio.run(go())
        self.assertEqual(self.broker.rigs(), {})

    def test_live_healthy_connection_refuses_the_new_one_4409(self):
        async def go():
            boot = rc.uuid7()
            first, _ = await rc.rig_session(self.broker.url, self.ctx("rig-a"), "rig-a", boot)
            second = await rc.connect(self.broker.url, self.ctx("rig-a"))
            await second.send(rc.hello("rig-a", boot))
            self.assertEqual(await rc.wait_closed_code(second), 4409)
            # An older boot cannot displace a live newer one either.
            third = await rc.connect(self.broker.url, self.ctx("rig-a"))
            await third.send(rc.hello("rig-a", rc.uuid7(ms=1_600_000_000_000)))
            self.assertEqual(await rc.wait_closed_code(third), 4409)
            self.assertEqual(self.broker.rigs()["rig-a"]["boot_id"], boot)
            await first.ping()  # the first one is untouched
            await first.close()
        asyncio.run(go())

    def start_frozen_capable_rig(self, broker, boot):
        """A rig in its own process (so it can be SIGSTOPped), WELCOMEd with `boot`."""
        import os
        crt, key = self.lab.certs.rig("rig-a")
        old = self.lab.process("rig-old", ["/usr/bin/python3", os.path.join(os.path.dirname(__file__), "broker_rigproc.py"),
                                           broker.url, "rig-a", crt, key, self.lab.certs.ca, boot])
        old.wait_log("welcome ")
        return old

    def test_newer_boot_does_not_take_over_a_connection_that_answers_pings(self):
        # A cloned rig configuration on a second machine: same certificate and rig_id,
        # a newer boot_id. The broker probes the first connection; it answers, so the
        # newcomer is refused 4409 and the first keeps the rig.
        import signal
        broker = self.lab.broker(name="clone", ping_interval_ms=60000, pong_timeout_ms=2000, max_missed_pongs=3)
        old_boot = rc.uuid7(ms=1_700_000_000_000)
        old = self.start_frozen_capable_rig(broker, old_boot)

        async def go():
            for _ in range(2):
                ws = await rc.connect(broker.url, self.ctx("rig-a"))
                await ws.send(rc.hello("rig-a", rc.uuid7()))  # newer boot_id
                self.assertEqual(await rc.wait_closed_code(ws, timeout=10), 4409)
            rigs = broker.rigs()
            self.assertEqual(rigs["rig-a"]["boot_id"], old_boot)
            self.assertEqual(rigs["rig-a"]["state"], "connected")
        asyncio.run(go())
        self.assertTrue(old.alive())
        self.assertRegex(broker.log(), r"hello refused rig=rig-a .*outcome=duplicate: rig already has a live connection \(it answered a ping\)")
        # The first one frozen (kill -STOP): no pong within the pong timeout, so the
        # newcomer takes over (the frozen one is closed 4410).
        old.signal(signal.SIGSTOP)
        try:
            async def take_over():
                new_boot = rc.uuid7()
                t0 = time.monotonic()
                ws, welcome = await rc.rig_session(broker.url, self.ctx("rig-a"), "rig-a", new_boot, )
                waited = time.monotonic() - t0
                self.assertGreaterEqual(waited, 1.5)   # it waited for the probe ...
                self.assertLess(waited, 8)              # ... bounded by the pong timeout (2 s)
                self.assertEqual(broker.rigs()["rig-a"]["boot_id"], new_boot)
                await ws.close()
            asyncio.run(take_over())
            self.assertRegex(broker.log(), r"closing rig=rig-a .*code=4410")
        finally:
            old.signal(signal.SIGCONT)

    def test_a_reboot_takes_over_at_once(self):
        # The old connection's peer is gone (here its process died, as in a reboot or
        # a crash): the new boot is admitted without waiting for the pong timeout
        # (20 s here), whether the broker saw the old socket close before the new
        # HELLO or learns it from the probe (a reset).
        broker = self.lab.broker(name="reboot", ping_interval_ms=60000, pong_timeout_ms=20000)
        old = self.start_frozen_capable_rig(broker, rc.uuid7(ms=1_700_000_000_000))
        old.kill()  # the process dies: its kernel resets the socket
        async def go():
            new_boot = rc.uuid7()
            t0 = time.monotonic()
            ws, _ = await rc.rig_session(broker.url, self.ctx("rig-a"), "rig-a", new_boot)
            self.assertLess(time.monotonic() - t0, 5)
            self.assertEqual(broker.rigs()["rig-a"]["boot_id"], new_boot)
            await ws.close()
        asyncio.run(go())

    def test_same_boot_reconnect_probes_the_half_open_old_socket(self):
        # The agent's old socket is half-open (here: its process frozen), the agent
        # process says HELLO again with the same boot_id: the broker pings the old socket
        # at once and the new connection waits; no pong within the pong timeout, so the
        # old one is closed 4410 and the new one WELCOMEd.
        import signal
        broker = self.lab.broker(name="probe", ping_interval_ms=60000, pong_timeout_ms=300, max_missed_pongs=3)
        boot = rc.uuid7()
        old = self.start_frozen_capable_rig(broker, boot)
        old.signal(signal.SIGSTOP)
        try:
            async def go():
                ws, _ = await rc.rig_session(broker.url, self.ctx("rig-a"), "rig-a", boot)
                self.assertEqual(broker.rigs()["rig-a"]["state"], "connected")
                await ws.close()
            asyncio.run(go())
            self.assertRegex(broker.log(), r"closing rig=rig-a .*code=4410")
        finally:
            old.signal(signal.SIGCONT)

    def test_hello_timeout_closes_4008(self):
        async def go():
            ws = await rc.connect(self.broker.url, self.ctx("rig-a"))
            self.assertEqual(await rc.wait_closed_code(ws, timeout=5), 4008)
        asyncio.run(go())

    def test_wrong_path_is_refused_before_upgrade(self):
        async def go():
            url = self.broker.url.replace("/agent", "/nope")
            with self.assertRaises(Exception) as cm:
                await rc.connect(url, self.ctx("rig-a"))
            self.assertIn("404", str(cm.exception))
        asyncio.run(go())

    def test_certificate_from_another_ca_is_refused(self):
        import os
        from harness import Certs
        other = Certs(os.path.join(self.lab.dir, "other-ca"))
        crt, key = other.rig("rig-a")

        async def go():
            with self.assertRaises(Exception):
                ws = await rc.connect(self.broker.url, rc.tls_context(self.lab.certs, cert=crt, key=key))
                await ws.send(rc.hello("rig-a"))
                await rc.recv_msg(ws, timeout=3)
        asyncio.run(go())
        self.assertEqual(self.broker.rigs(), {})
        self.assertIn("client certificate refused", self.broker.log())

    def test_client_without_certificate_is_refused(self):
        async def go():
            with self.assertRaises(Exception):
                ws = await rc.connect(self.broker.url, rc.tls_context(self.lab.certs))
                await ws.send(rc.hello("rig-a"))
                await rc.recv_msg(ws, timeout=3)
        asyncio.run(go())
        self.assertEqual(self.broker.rigs(), {})


if __name__ == "__main__":
    unittest.main()
