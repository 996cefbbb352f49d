"""Cancel through the broker: POST /v1/commands/{cmd_id}/cancel and
`fleetctl cancel CMD_ID`, with a real broker and a real agent running a suite
that sleeps. The broker sends CANCEL, the agent stops the suite and reports
RESULT status "cancelled"; cancelling a finished command is 409 not_running,
an unknown one 404 unknown_command."""
import json
import os
import subprocess
import time

import harness


class TestCancel(harness.LabTestCase):
    def fleetctl(self, *args, timeout=30):
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
        return subprocess.run([harness.binary("fleetctl"), "--control", self.broker.control_url,
                               *args], capture_output=True, text=True, timeout=timeout, env=env)

    def setUp(self):
        super().setUp()
        suites = {
            "sleep": {"argv": ["/bin/sh", "-c", "echo started; exec sleep 60"],
                      "timeout_s": 120, "kill_grace_s": 2},
            "quick": {"argv": ["/bin/sh", "-c", "echo quick"]},
        }
        path = self.lab.path("suites.json")
        with open(path, "w") as f:
            json.dump({"suites": suites}, f)
        self.broker = self.lab.broker()
        self.agent = self.lab.agent("rig-c", self.broker, suites=path)
        self.broker.wait_rigs(["rig-c"])

    def start_sleeping_suite(self):
        status, body = self.broker.send("rig-c", "suite", {"suite": "sleep"})
        self.assertEqual(status, 202, body)
        cmd_id = body["cmd_id"]
        # Accepted by the rig (acked), then give the suite a moment to start.
        harness.wait_for(lambda: self.broker.command(cmd_id)["state"] in ("acked", "running"),
                         15, what="suite acked")
        time.sleep(0.5)
        self.assertIn(self.broker.command(cmd_id)["state"], ("acked", "running"))
        return cmd_id

    def test_fleetctl_cancel_stops_a_running_suite(self):
        cmd_id = self.start_sleeping_suite()
        started = time.monotonic()
        r = self.fleetctl("cancel", cmd_id)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"cancel sent for {cmd_id}", r.stdout)

        view = self.broker.wait_command(cmd_id, timeout=15)
        self.assertEqual(view["state"], "cancelled", view)
        self.assertEqual(view["result"]["status"], "cancelled", view)
        self.assertLess(time.monotonic() - started, 10, "the 60 s sleep was not stopped")

        # Already finished: 409 not_running, fleetctl exits 1 and says so.
        r = self.fleetctl("cancel", cmd_id)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("not running", r.stderr)
        status, body = self.broker.api("POST", f"/v1/commands/{cmd_id}/cancel")
        self.assertEqual(status, 409, body)
        self.assertEqual(body["error"], "not_running")
        self.assertEqual(body["state"], "cancelled")

        # The rig is fine afterwards.
        quick = self.broker.run("rig-c", "suite", {"suite": "quick"})
        self.assertEqual(quick["result"]["status"], "ok", quick)

    def test_cancel_api_answers(self):
        cmd_id = self.start_sleeping_suite()
        status, body = self.broker.api("POST", f"/v1/commands/{cmd_id}/cancel")
        self.assertEqual(status, 202, body)
        self.assertEqual(body, {"cmd_id": cmd_id, "state": body["state"], "cancel_sent": True})
        self.assertIn(body["state"], ("acked", "running"))
        # A second cancel: 409, never a second CANCEL (cancel_pending while the first is
        # on its way, not_running if the rig already answered it).
        status, again = self.broker.api("POST", f"/v1/commands/{cmd_id}/cancel")
        self.assertEqual(status, 409, again)
        self.assertIn(again["error"], ("cancel_pending", "not_running"), again)
        view = self.broker.wait_command(cmd_id, timeout=15)
        self.assertEqual(view["result"]["status"], "cancelled", view)

        status, body = self.broker.api("POST", "/v1/commands/no-such-command/cancel")
        self.assertEqual(status, 404, body)
        self.assertEqual(body["error"], "unknown_command")
        r = self.fleetctl("cancel", "no-such-command")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("unknown command", r.stderr)

        status, body = self.broker.api("GET", f"/v1/commands/{cmd_id}/cancel")
        self.assertEqual(status, 405, body)


if __name__ == "__main__":
    import unittest
    unittest.main()
