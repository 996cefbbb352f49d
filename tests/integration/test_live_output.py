"""A command's output while it runs, with a real broker and a real agent running a
suite that prints a line every 0.4 s: `fleetctl logs -f` prints each line as it
comes (long before the end) and ends with the state and exit code;
`fleetctl send --wait` does the same; GET /v1/commands/{id}/output serves what
the broker keeps (JSON, or ?text); /v1/events?cmd= carries command_output events
with their offsets; the control stream's "notify":"output" sends them as lines."""
import asyncio
import http.client
import json
import os
import subprocess
import time
import unittest

import harness
import test_control_stream as control_stream  # its helpers (its tests are not run here)

STEPS = 6
SLOW = "for i in 1 2 3 4 5 6; do echo \"step $i of 6\"; sleep 0.4; done"


class LiveOutputTest(harness.LabTestCase):
    def setUp(self):
        super().setUp()
        path = self.lab.path("suites.json")
        with open(path, "w") as f:
            json.dump({"suites": {
                "slow": {"argv": ["/bin/sh", "-c", SLOW]},
                "slow-fail": {"argv": ["/bin/sh", "-c", SLOW + "; exit 3"]},
            }}, f)
        self.broker = self.lab.broker()
        self.lab.agent("rig-a", self.broker, suites=path)
        self.broker.wait_rigs(["rig-a"])

    def fleetctl_lines(self, *args, timeout=30):
        """Runs fleetctl; returns (stdout lines each with the seconds it came at, stderr, exit code)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
        t0 = time.monotonic()
        lines = []
        with subprocess.Popen([harness.binary("fleetctl"), "--control", self.broker.control_url, *args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as p:
            for line in p.stdout:
                lines.append((time.monotonic() - t0, line.rstrip("\n")))
            err = p.stderr.read()
            rc = p.wait(timeout=timeout)
        return lines, err, rc

    def post_suite(self, suite):
        status, body = self.broker.api("POST", "/v1/rigs/rig-a/commands", {"kind": "suite", "args": {"suite": suite}})
        self.assertEqual(status, 202, body)
        return body["cmd_id"]

    def assert_live(self, lines):
        texts = [t for _, t in lines]
        self.assertEqual(texts, [f"step {i} of 6" for i in range(1, STEPS + 1)])
        # The first line is printed while the suite still runs: at least 1.2 s
        # (three steps) before the last one.
        first, last = lines[0][0], lines[-1][0]
        self.assertGreater(last - first, 1.2, f"printed all at once: {lines}")

    def test_logs_follow_prints_each_line_as_it_comes_then_state_and_exit_code(self):
        cmd_id = self.post_suite("slow")
        lines, err, rc = self.fleetctl_lines("logs", "-f", cmd_id)
        self.assertEqual(rc, 0, err)
        self.assert_live(lines)
        self.assertRegex(err, rf"command {cmd_id} succeeded, exit code 0")
        # Afterwards, without -f: all of it at once, and the same end.
        r = subprocess.run([harness.binary("fleetctl"), "--control", self.broker.control_url, "logs", cmd_id],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), [f"step {i} of 6" for i in range(1, STEPS + 1)])

    def test_logs_follow_of_a_failing_suite_exits_1_with_its_exit_code(self):
        cmd_id = self.post_suite("slow-fail")
        lines, err, rc = self.fleetctl_lines("logs", "--follow", cmd_id)
        self.assertEqual(rc, 1, err)
        self.assert_live(lines)
        self.assertRegex(err, rf"command {cmd_id} failed: exit code 3")

    def test_status_of_a_running_suite_shows_its_output_so_far(self):
        cmd_id = self.post_suite("slow")
        harness.wait_for(lambda: "step 2" in self.broker.api("GET", f"/v1/commands/{cmd_id}/output")[1]["data"],
                         10, interval=0.05, what="two steps streamed")
        r = subprocess.run([harness.binary("fleetctl"), "--control", self.broker.control_url, "status", cmd_id],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"output so far:\nstep 1 of 6\nstep 2 of 6\n")

    def test_send_wait_prints_output_live(self):
        lines, err, rc = self.fleetctl_lines("send", "rig-a", "suite", "--arg", "suite=slow", "--wait")
        self.assertEqual(rc, 0, err)
        self.assert_live(lines)

    def test_output_endpoint_while_running_and_after(self):
        cmd_id = self.post_suite("slow")
        harness.wait_for(lambda: "step 2" in self.broker.api("GET", f"/v1/commands/{cmd_id}/output")[1]["data"],
                         10, interval=0.05, what="two steps streamed")
        status, out = self.broker.api("GET", f"/v1/commands/{cmd_id}/output")
        self.assertEqual(status, 200, out)
        self.assertEqual((out["cmd_id"], out["rig_id"], out["offset"]), (cmd_id, "rig-a", 0))
        self.assertIn(out["state"], ("acked", "running"))
        self.assertFalse(out["final"])
        self.assertTrue(out["data"].startswith("step 1 of 6\nstep 2 of 6\n"), out)
        self.assertIsNone(out["exit_code"])
        done = self.broker.wait_command(cmd_id)
        self.assertEqual(done["state"], "succeeded")
        status, out = self.broker.api("GET", f"/v1/commands/{cmd_id}/output")
        self.assertEqual(status, 200, out)
        self.assertTrue(out["final"])
        self.assertTrue(out["complete"], out)
        self.assertEqual(out["exit_code"], 0)
        self.assertEqual(out["data"].splitlines(), [f"step {i} of 6" for i in range(1, STEPS + 1)])
        self.assertEqual(out["bytes"], out["total_bytes"])
        conn = http.client.HTTPConnection(self.broker.control_host, self.broker.control_port, timeout=10)
        conn.request("GET", f"/v1/commands/{cmd_id}/output?text")
        resp = conn.getresponse()
        self.assertEqual(resp.status, 200)
        self.assertTrue(resp.getheader("Content-Type").startswith("text/plain"))
        self.assertEqual(resp.read().decode(), out["data"])
        conn.close()
        status, body = self.broker.api("GET", "/v1/commands/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/output")
        self.assertEqual(status, 404, body)

    def test_events_of_one_command_carry_its_output_with_offsets(self):
        conn = http.client.HTTPConnection(self.broker.control_host, self.broker.control_port, timeout=20)
        cmd_id = self.post_suite("slow")
        conn.request("GET", f"/v1/events?cmd={cmd_id}")
        events = conn.getresponse()
        self.assertEqual(events.status, 200)
        got, types = "", []
        deadline = time.monotonic() + 15
        name = None
        while time.monotonic() < deadline:
            line = events.fp.readline().decode()
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                e = json.loads(line[5:])
                self.assertEqual(e["cmd_id"], cmd_id)  # only that command's
                types.append(name)
                if name == "command_output":
                    self.assertLessEqual(e["offset"], len(got))  # contiguous (or overlapping)
                    got = got[:e["offset"]] + e["data"]
                if name == "command_done":
                    break
        conn.close()
        self.assertEqual(types[-1], "command_done")
        self.assertIn("command_output", types)
        # Subscribed after the POST: the first steps may be before it, never a hole after.
        self.assertTrue(got.endswith("step 6 of 6\n"), got)

    def test_control_stream_notify_output(self):
        frame = control_stream.send("r1", "rig-a", "suite", args={"suite": "slow"}, notify="output") + "\n"

        def finished(lines):
            return any(l["op"] == "done" for l in control_stream.by_ref(lines, "r1"))

        lines = asyncio.run(control_stream.exchange(self.broker, [frame], finished))
        ops = [l["op"] for l in control_stream.by_ref(lines, "r1")]
        self.assertEqual(ops[:2], ["queued", "acked"], lines)
        self.assertEqual(ops[-1], "done")
        outputs = [l for l in control_stream.by_ref(lines, "r1") if l["op"] == "output"]
        text = ""
        for o in outputs:
            self.assertLessEqual(o["offset"], len(text))
            text = text[:o["offset"]] + o["data"]
        self.assertEqual(text.splitlines(), [f"step {i} of 6" for i in range(1, STEPS + 1)])
        # A stream that did not ask gets no output lines.
        plain = control_stream.send("r2", "rig-a", "suite", args={"suite": "slow"}) + "\n"
        lines = asyncio.run(control_stream.exchange(
            self.broker, [plain], lambda ls: any(l["op"] == "done" for l in control_stream.by_ref(ls, "r2"))))
        self.assertNotIn("output", [l["op"] for l in lines])


if __name__ == "__main__":
    unittest.main()
