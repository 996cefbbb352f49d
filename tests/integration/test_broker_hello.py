"""Broker HELLO outcomes with a raw client: WELCOME, 4400, 4401, 4409, 4410, 4008."""
import asyncio
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

    def test_newer_boot_supersedes_old_4410(self):
        async def go():
            old_boot = rc.uuid7(ms=1_700_000_000_000)
            old, _ = await rc.rig_session(self.broker.url, self.ctx("rig-a"), "rig-a", old_boot)
            new_boot = rc.uuid7()
            new, _ = await rc.rig_session(self.broker.url, self.ctx("rig-a"), "rig-a", new_boot)
            self.assertEqual(await rc.wait_closed_code(old), 4410)
            rigs = self.broker.rigs()
            self.assertEqual(rigs["rig-a"]["boot_id"], new_boot)
            await new.close()
        asyncio.run(go())

    def test_same_boot_reconnect_probes_the_half_open_old_socket(self):
        # The agent's old socket is half-open (here: its process frozen), the agent
        # process says HELLO again with the same boot_id: refused 4409 at first, but
        # the broker pings the old socket at once, so a retry after the pong timeout wins.
        import os, signal, sys
        broker = self.lab.broker(name="probe", ping_interval_ms=60000, pong_timeout_ms=300, max_missed_pongs=3)
        boot = rc.uuid7()
        crt, key = self.lab.certs.rig("rig-a")
        old = self.lab.process("rig-old", ["/usr/bin/python3", os.path.join(os.path.dirname(__file__), "broker_rigproc.py"),
                                           broker.url, "rig-a", crt, key, self.lab.certs.ca, boot])
        old.wait_log("welcome ")
        old.signal(signal.SIGSTOP)
        try:
            async def go():
                ws = await rc.connect(broker.url, self.ctx("rig-a"))
                await ws.send(rc.hello("rig-a", boot))
                self.assertEqual(await rc.wait_closed_code(ws), 4409)
                await asyncio.sleep(0.6)  # > pong timeout: the probe went unanswered
                self.assertEqual(broker.rigs()["rig-a"]["state"], "unresponsive")
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
