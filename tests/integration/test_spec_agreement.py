"""docs/PROTOCOL.md and the broker agree on every close code, seen on the wire with a
raw client written from the spec (issue 15, point 4): a HELLO whose content breaks a
field limit is 4400 (1009 is only for a frame over max_frame_bytes), label values are
bounded at 256 bytes, kinds at 32, and boot_id must be a UUIDv7."""
import asyncio
import time
import unittest

import broker_rawclient as rc
from harness import LabTestCase


def close_reason(ws):
    rcvd = getattr(ws, "close_rcvd", None)
    return rcvd.reason if rcvd is not None else getattr(ws, "close_reason", "")


def nested(depth):
    v = 0
    for _ in range(depth):
        v = [v]
    return v


class HelloLimitsOnTheWireTest(LabTestCase):
    def setUp(self):
        super().setUp()
        self.broker = self.lab.broker()
        self.ctx = rc.tls_context(self.lab.certs, "rig-a")

    async def refused(self, data):
        ws = await rc.connect(self.broker.url, self.ctx)
        await ws.send(data)
        code = await rc.wait_closed_code(ws, timeout=10)
        return code, close_reason(ws)

    def hello_with(self, **over):
        fields = dict(rig_id="rig-a", agent_version="test-0.1", boot_id=rc.uuid7(), labels={}, kinds=["dmesg"])
        fields.update(over)
        return rc.frame("hello", **fields)

    def test_a_small_hello_over_a_field_limit_is_4400_not_1009(self):
        cases = {
            "rig_id 65 chars": (self.hello_with(rig_id="r" * 65), "rig_id"),
            "33 kinds": (self.hello_with(kinds=["k%d" % i for i in range(33)]), "kinds"),
            "65 labels": (self.hello_with(labels={"k%02d" % i: "v" for i in range(65)}), "labels"),
            "nesting 40 deep": (self.hello_with(extra=nested(40)), "msgpack limit"),
            "array of 4097": (self.hello_with(extra=[0] * 4097), "msgpack limit"),
            "map of 1025": (self.hello_with(extra={"k%d" % i: 0 for i in range(1025)}), "msgpack limit"),
        }

        async def go():
            for name, (data, words) in cases.items():
                with self.subTest(name):
                    self.assertLess(len(data), 131072)
                    code, reason = await self.refused(data)
                    self.assertEqual(code, 4400, (name, reason))
                    self.assertIn(words, reason)
        asyncio.run(go())
        self.assertEqual(self.broker.rigs(), {})
        # The 65-char rig_id HELLO is the issue's ~170 bytes.
        self.assertLess(len(cases["rig_id 65 chars"][0]), 200)

    def test_a_frame_over_max_frame_bytes_is_still_1009(self):
        async def go():
            code, _ = await self.refused(self.hello_with(extra="x" * 140000))
            self.assertEqual(code, 1009)
        asyncio.run(go())

    def test_b_label_values_are_bounded_at_256_bytes(self):
        async def go():
            code, reason = await self.refused(self.hello_with(labels={"lab": "x" * 257}))
            self.assertEqual(code, 4400)
            self.assertIn("labels 'lab': value longer than 256 bytes", reason)
            ws = await rc.connect(self.broker.url, self.ctx)
            await ws.send(self.hello_with(labels={"lab": "x" * 256}))
            self.assertEqual((await rc.recv_msg(ws, timeout=10))["t"], "welcome")
            self.assertEqual(self.broker.rigs()["rig-a"]["labels"], {"lab": "x" * 256})
            await ws.close()
        asyncio.run(go())

    def test_g_kinds_at_most_32_and_boot_id_a_uuid_v7(self):
        async def go():
            ws = await rc.connect(self.broker.url, self.ctx)
            await ws.send(self.hello_with(kinds=["k%d" % i for i in range(32)]))
            self.assertEqual((await rc.recv_msg(ws, timeout=10))["t"], "welcome")
            await ws.close()
            await asyncio.sleep(0.2)
            code, reason = await self.refused(self.hello_with(kinds=["k%d" % i for i in range(33)]))
            self.assertEqual((code, reason), (4400, "malformed frame: kinds: more than 32 entries"))
            # A UUID, but version 4: the broker orders boots by their text, so a UUIDv7 only.
            code, reason = await self.refused(self.hello_with(boot_id="6f1c1a52-1b0e-4d4e-9a6c-0e1a2b3c4d5e"))
            self.assertEqual(code, 4400)
            self.assertIn("boot_id: not a UUIDv7", reason)
        asyncio.run(go())


if __name__ == "__main__":
    unittest.main()


class DrainDeadlineOnTheWireTest(LabTestCase):
    """c: at the drain deadline a rig that ignored its GOAWAY gets a close frame 1001
    (PROTOCOL 5.6), not a vanished socket (1006). d: a drain through the API ends by
    its own window_ms + 5 s, not by the configured window's deadline."""

    async def stubborn_rig(self, broker, rig_id):
        ws = await rc.connect(broker.url, rc.tls_context(self.lab.certs, rig_id))
        await ws.send(rc.hello(rig_id))
        self.assertEqual((await rc.recv_msg(ws, timeout=10))["t"], "welcome")
        return ws

    async def read_until_closed(self, ws, timeout):
        """Ignores GOAWAY (reads and drops every frame); the close code and when it came."""
        goaways = 0
        try:
            while True:
                m = rc.decode(await asyncio.wait_for(ws.recv(), timeout))
                goaways += m.get("t") == "goaway"
        except Exception:
            pass
        return rc.close_code(ws), time.monotonic(), goaways

    def test_c_the_deadline_closes_1001_with_a_close_frame(self):
        broker = self.lab.broker(drain_window_ms=300, drain_deadline_ms=1500)

        async def go():
            socks = [await self.stubborn_rig(broker, f"rig-{c}") for c in "ab"]
            t0 = time.monotonic()
            status, body = await asyncio.to_thread(broker.api, "POST", "/v1/admin/drain", {})
            self.assertEqual(status, 202, body)
            results = await asyncio.gather(*(self.read_until_closed(ws, 15) for ws in socks))
            for code, at, goaways in results:
                self.assertEqual(goaways, 1)
                self.assertEqual(code, 1001)  # close_rcvd: the broker's own close frame
                self.assertGreaterEqual(at - t0, 1.4)  # at the deadline, not before
            for ws in socks:
                self.assertIsNotNone(ws.close_rcvd)
                self.assertIn("deadline", ws.close_rcvd.reason)
            self.assertEqual(await asyncio.to_thread(broker.proc.wait, 10), 0)
        asyncio.run(go())
        self.assertIn("drain deadline reached with 2 connections left", broker.log())

    def test_d_an_api_drain_follows_its_own_window_ms(self):
        # The configured window is long (deadline 0: window + 5 s = 65 s); the API's is 500 ms.
        broker = self.lab.broker(drain_window_ms=60000)

        async def go():
            ws = await self.stubborn_rig(broker, "rig-a")
            t0 = time.monotonic()
            status, body = await asyncio.to_thread(broker.api, "POST", "/v1/admin/drain", {"window_ms": 500})
            self.assertEqual(status, 202, body)
            self.assertEqual(body["window_ms"], 500)
            goaway = rc.decode(await asyncio.wait_for(ws.recv(), 10))
            self.assertEqual(goaway["t"], "goaway")
            self.assertLessEqual(goaway["reconnect_after_ms"], 500)
            code, at, _ = await self.read_until_closed(ws, 30)
            self.assertEqual(code, 1001)
            self.assertGreaterEqual(at - t0, 5.4)   # window 500 ms + 5 s
            self.assertLess(at - t0, 20)            # not the configured window's 65 s
            self.assertEqual(await asyncio.to_thread(broker.proc.wait, 10), 0)
        asyncio.run(go())
        self.assertRegex(broker.log(), r"drain started: 1 rigs, window 500 ms, deadline 5500 ms")


class CancelOnTheWireTest(LabTestCase):
    """e: a second cancel of a command whose CANCEL is on its way is 409 cancel_pending
    (OPERATIONS 9.5), never a second 202 nor a second CANCEL frame; fleetctl says so."""

    def fleetctl(self, broker, *args):
        import os
        import subprocess
        from harness import binary
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
        return subprocess.run([binary("fleetctl"), "--control", broker.control_url, *args],
                              capture_output=True, text=True, timeout=30, env=env)

    def test_e_second_cancel_is_409_cancel_pending(self):
        broker = self.lab.broker()

        async def go():
            ws, _ = await rc.rig_session(broker.url, rc.tls_context(self.lab.certs, "rig-a"), "rig-a")
            frames = []
            for acked in (True, False):  # acknowledged (running), and only sent
                status, body = await asyncio.to_thread(broker.send, "rig-a", "dmesg")
                self.assertEqual(status, 202, body)
                cmd = await rc.recv_msg(ws, timeout=10)
                self.assertEqual(cmd["t"], "command")
                if acked:
                    await ws.send(rc.frame("ack", seq=cmd["seq"], cmd_id=cmd["cmd_id"], duplicate=False))
                    await asyncio.to_thread(broker.wait_command, cmd["cmd_id"], ("acked", "running"))
                path = f"/v1/commands/{cmd['cmd_id']}/cancel"
                status, first = await asyncio.to_thread(broker.api, "POST", path)
                self.assertEqual(status, 202, first)
                self.assertTrue(first["cancel_sent"])
                cancel = await rc.recv_msg(ws, timeout=10)
                self.assertEqual((cancel["t"], cancel["cmd_id"]), ("cancel", cmd["cmd_id"]))
                status, again = await asyncio.to_thread(broker.api, "POST", path)
                self.assertEqual(status, 409, again)
                self.assertEqual(again["error"], "cancel_pending")
                self.assertEqual(again["state"], "acked" if acked else "sent")
                self.assertTrue(again["cancel_requested_at"])
                r = await asyncio.to_thread(self.fleetctl, broker, "cancel", cmd["cmd_id"])
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self.assertIn(f"a cancel of {cmd['cmd_id']} is already on its way", r.stderr)
                frames.append(cmd["cmd_id"])
            # No second CANCEL reached the rig for either.
            with self.assertRaises(asyncio.TimeoutError):
                extra = await rc.recv_msg(ws, timeout=1.0)
                self.fail(f"unexpected frame {extra}")
            await ws.close()
        asyncio.run(go())

    def test_e_second_job_cancel_is_409_cancel_pending(self):
        broker = self.lab.broker()

        async def go():
            ws, _ = await rc.rig_session(broker.url, rc.tls_context(self.lab.certs, "rig-a"), "rig-a")
            status, job = await asyncio.to_thread(broker.api, "POST", "/v1/jobs",
                                                  {"kind": "dmesg", "targets": {"ids": ["rig-a"]}})
            self.assertIn(status, (200, 201, 202), job)
            cmd = await rc.recv_msg(ws, timeout=10)
            self.assertEqual(cmd["t"], "command")
            await ws.send(rc.frame("ack", seq=cmd["seq"], cmd_id=cmd["cmd_id"], duplicate=False))
            await asyncio.to_thread(broker.wait_command, cmd["cmd_id"], ("acked", "running"))
            path = f"/v1/jobs/{job['job_id']}/cancel"
            status, first = await asyncio.to_thread(broker.api, "POST", path)
            self.assertEqual(status, 202, first)
            self.assertEqual((await rc.recv_msg(ws, timeout=10))["t"], "cancel")
            status, again = await asyncio.to_thread(broker.api, "POST", path)
            self.assertEqual(status, 409, again)
            self.assertEqual(again["error"], "cancel_pending")
            self.assertEqual(again["cancelled_at"], first["cancelled_at"])
            r = await asyncio.to_thread(self.fleetctl, broker, "job", "cancel", job["job_id"])
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn(f"job {job['job_id']} was already cancelled", r.stderr)
            with self.assertRaises(asyncio.TimeoutError):
                extra = await rc.recv_msg(ws, timeout=1.0)
                self.fail(f"unexpected frame {extra}")
            await ws.close()
        asyncio.run(go())


class AgentCheckConfigHelloTest(LabTestCase):
    """--check-config refuses, naming the key and the HELLO field, what the broker
    would refuse 4400; the agent itself refuses to start instead of reconnecting in a loop."""

    def run_agent(self, *args, timeout=20):
        import subprocess
        from harness import agent_command  # never the host's /etc/fleetlink/agent.conf
        return subprocess.run(agent_command(*args), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def flags(self, *extra, rig_id="rig-a"):
        crt, key = self.lab.certs.rig("rig-a")
        return ["--broker", "wss://127.0.0.1:9/agent", "--rig-id", rig_id, "--cert", crt, "--key", key,
                "--ca", self.lab.certs.ca, "--state-dir", self.lab.path("state-rig-a"), *extra]

    def test_h_a_label_value_over_256_bytes(self):
        r = self.run_agent(*self.flags("--label", "site=" + "x" * 256), "--check-config")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.run_agent(*self.flags("--label", "site=" + "x" * 257), "--check-config")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("error: --label: the broker would refuse this rig's HELLO (4400): "
                      "labels 'site': value longer than 256 bytes", r.stderr)
        # Started anyway: refused at once (exit 2), never a reconnect loop.
        r = self.run_agent(*self.flags("--label", "site=" + "x" * 257))
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("labels 'site': value longer than 256 bytes", r.stderr)

    def test_h_too_many_labels_and_a_long_key_in_the_config_file(self):
        import os
        crt, key = self.lab.certs.rig("rig-a")
        conf = self.lab.path("agent.conf")
        with open(conf, "w") as f:
            f.write(f"broker = wss://127.0.0.1:9/agent\nrig-id = rig-a\ncert = {crt}\nkey = {key}\n"
                    f"ca = {self.lab.certs.ca}\nstate-dir = {self.lab.path('state')}\n")
            for i in range(65):
                f.write(f"label = k{i}=v\n")
        r = self.run_agent("--config", conf, "--check-config")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(f"{conf}: key 'label': the broker would refuse this rig's HELLO (4400): "
                      "labels: more than 64 entries", r.stderr)
        r = self.run_agent(*self.flags("--label", "k" * 65 + "=v"), "--check-config")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--label: ", r.stderr)
        self.assertIn("labels key '" + "k" * 32 + "...': must be 1..64 bytes", r.stderr)
        self.assertTrue(os.path.exists(conf))

    def test_h_more_than_32_kinds(self):
        import os
        plugins = self.lab.path("plugins")
        os.makedirs(plugins, mode=0o755)
        os.chmod(plugins, 0o755)
        for i in range(32):
            path = os.path.join(plugins, f"fleetlink-k{i:02d}")
            with open(path, "w") as f:
                f.write("#!/bin/sh\nexit 0\n")
            os.chmod(path, 0o755)
        # 32 plugins + the built-ins: more than a HELLO carries.
        r = self.run_agent(*self.flags("--plugin-dir", plugins), "--check-config")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("the broker would refuse this rig's HELLO (4400): kinds: more than 32 entries", r.stderr)
        self.assertIn("--plugin-dir", r.stderr)
        # An allow list that keeps it at 32 or fewer is fine.
        allow = ",".join(f"k{i:02d}" for i in range(30))
        r = self.run_agent(*self.flags("--plugin-dir", plugins, *sum((["--allow", k] for k in allow.split(",")), [])),
                           "--check-config")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_h_rig_id_length_and_characters(self):
        r = self.run_agent(*self.flags(rig_id="r" * 65), "--check-config")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--rig-id: ", r.stderr)
        self.assertIn("1-64", r.stderr)
        r = self.run_agent(*self.flags(rig_id="rig a"), "--check-config")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--rig-id: 'rig a' is not a valid id", r.stderr)
