"""The walking skeleton end to end (issue 2): a real broker, two real agents over
mutual TLS, dmesg through the control API, a broker killed with -9 and restarted,
and an agent presenting one rig's certificate while claiming another rig's id."""
import asyncio
import subprocess
import unittest

import broker_rawclient as rc
from harness import LabTestCase, agent_command


class WalkingSkeletonTest(LabTestCase):
    def dmesg_each(self, broker, rigs):
        for rig in rigs:
            status, body = broker.send(rig, "dmesg", {"lines": 50})
            self.assertEqual(status, 202, body)
            cmd = broker.wait_command(body["cmd_id"])
            self.assertEqual(cmd["cmd_id"], body["cmd_id"])
            self.assertEqual(cmd["rig_id"], rig)
            self.assertEqual(cmd["state"], "succeeded", cmd)
            self.assertEqual(cmd["result"]["status"], "ok", cmd)
            lines = cmd["result"]["output"].splitlines()
            self.assertTrue(0 < len(lines) <= 50, cmd["result"])

    def test_dmesg_to_two_agents_survives_a_broker_restart(self):
        rigs = ["rig-a", "rig-b"]
        broker = self.lab.broker()
        agents = [self.lab.agent(r, broker) for r in rigs]
        broker.wait_rigs(rigs)
        self.dmesg_each(broker, rigs)

        boot_ids = {r: v["boot_id"] for r, v in broker.rigs().items()}
        marks = [a.log_size() for a in agents]
        broker.kill()
        for a, mark in zip(agents, marks):
            a.wait_log(r"disconnected", start=mark)
        again = self.lab.broker(name="broker-restarted", listen_port=broker.listen_port,
                                control_port=broker.control_port)
        again.wait_rigs(rigs, timeout=20)
        # Same agent processes: the boot_id is per process start, not per connection.
        self.assertEqual({r: v["boot_id"] for r, v in again.rigs().items()}, boot_ids)
        self.dmesg_each(again, rigs)

    def test_certificate_of_one_rig_cannot_say_hello_as_another(self):
        broker = self.lab.broker()
        crt_a, key_a = self.lab.certs.rig("rig-a")
        # The agent itself refuses a rig id its certificate does not carry ...
        refused = subprocess.run(
            agent_command("--broker", broker.url, "--rig-id", "rig-b",
                          "--cert", crt_a, "--key", key_a, "--ca", self.lab.certs.ca,
                          "--state-dir", self.lab.path("state-impostor")),
            capture_output=True, text=True, timeout=10)
        self.assertEqual(refused.returncode, 2, refused.stderr)
        self.assertIn("4401", refused.stderr)

        # ... and a client that skips that check is closed 4401 by the broker.
        async def impostor():
            ws = await rc.connect(broker.url, rc.tls_context(self.lab.certs, "rig-a"))
            await ws.send(rc.hello("rig-b"))
            return await rc.wait_closed_code(ws)
        self.assertEqual(asyncio.run(impostor()), 4401)
        self.assertNotIn("rig-b", broker.rigs())

        # The broker goes on serving honest rigs.
        self.lab.agent("rig-c", broker)
        broker.wait_rigs(["rig-c"])
        self.dmesg_each(broker, ["rig-c"])


if __name__ == "__main__":
    unittest.main()
