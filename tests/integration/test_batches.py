"""Fan-out through the older names of jobs (POST /v1/commands with targets,
GET /v1/batches/{id}; test_jobs.py has the rest) and fleetctl send
--rig-glob/--label, with a real broker and real agents: target selection by
ids, glob and labels; max_concurrency; max_errors stops the job."""
import json
import os
import subprocess

import harness


class TestBatches(harness.LabTestCase):
    def setUp(self):
        super().setUp()
        suites = {
            "pass": {"argv": ["/bin/sh", "-c", "sleep 0.3; echo pass"]},
            "fail": {"argv": ["/bin/sh", "-c", "exit 3"]},
        }
        path = self.lab.path("suites.json")
        with open(path, "w") as f:
            json.dump({"suites": suites}, f)
        self.broker = self.lab.broker()
        labels = {"rig-0401": "lab=b2", "rig-0402": "lab=b2", "rig-0403": "lab=b3",
                  "rig-0500": "lab=b2"}
        for rig, label in labels.items():
            self.lab.agent(rig, self.broker, suites=path, label=label)
        self.broker.wait_rigs(list(labels))

    def wait_batch(self, batch_id, timeout=20):
        def done():
            status, body = self.broker.api("GET", f"/v1/batches/{batch_id}")
            self.assertEqual(status, 200, body)
            return body if body["state"] != "running" else None
        return harness.wait_for(done, timeout, what=f"batch {batch_id} finished")

    def fleetctl(self, *args, timeout=60):
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
        return subprocess.run([harness.binary("fleetctl"), "--control", self.broker.control_url,
                               *args], capture_output=True, text=True, timeout=timeout, env=env)

    def test_glob_and_labels_with_concurrency(self):
        status, body = self.broker.api("POST", "/v1/commands", {
            "kind": "suite", "args": {"suite": "pass"},
            "targets": {"glob": "rig-04*", "labels": {"lab": "b2"}},
            "max_concurrency": 1})
        self.assertEqual(status, 202, body)
        self.assertEqual(body["batch_id"], body["job_id"])  # the older name, for existing clients
        self.assertEqual([r["rig_id"] for r in body["rigs"]], ["rig-0401", "rig-0402"])
        # One at a time: the second waits for the first.
        self.assertEqual([r["outcome"] for r in body["rigs"]], ["dispatched", "pending"])
        final = self.wait_batch(body["batch_id"])
        self.assertEqual(final["state"], "done")
        self.assertEqual([r["outcome"] for r in final["rigs"]], ["ok", "ok"])
        self.assertEqual(final["counts"]["ok"], 2)
        status, job = self.broker.api("GET", f"/v1/jobs/{body['job_id']}")
        self.assertEqual(status, 200, job)
        self.assertEqual(job["rigs"], final["rigs"])
        for r in final["rigs"]:
            self.assertEqual(self.broker.command(r["cmd_id"])["rig_id"], r["rig_id"])

    def test_ids_and_max_errors(self):
        status, body = self.broker.api("POST", "/v1/commands", {
            "kind": "suite", "args": {"suite": "fail"},
            "targets": {"ids": ["rig-0401", "rig-0403", "rig-0500", "rig-gone"]},
            "max_concurrency": 1, "max_errors": 1})
        self.assertEqual(status, 202, body)
        final = self.wait_batch(body["batch_id"])
        self.assertEqual(final["state"], "stopped")
        outcomes = {r["rig_id"]: r["outcome"] for r in final["rigs"]}
        # Sorted order: rig-0401 fails, rig-0403 fails (2 > 1 errors): the rest are skipped.
        self.assertEqual(outcomes, {"rig-0401": "failed", "rig-0403": "failed",
                                    "rig-0500": "skipped", "rig-gone": "skipped"})

        status, body = self.broker.api("POST", "/v1/commands", {
            "kind": "dmesg", "targets": {"ids": ["rig-gone"]}})
        self.assertEqual(status, 202, body)
        self.assertEqual(body["rigs"][0]["outcome"], "refused")
        self.assertEqual(body["rigs"][0]["error"], "unknown_rig")
        self.assertEqual(body["state"], "done")

        status, body = self.broker.api("POST", "/v1/commands", {
            "kind": "dmesg", "targets": {"glob": "nothing-*"}})
        self.assertEqual(status, 422, body)
        status, body = self.broker.api("POST", "/v1/commands", {"kind": "dmesg", "targets": {}})
        self.assertEqual(status, 400, body)
        status, body = self.broker.api("GET", "/v1/batches/nope")
        self.assertEqual(status, 404, body)

    def test_fleetctl_send_to_a_glob_and_a_label(self):
        r = self.fleetctl("send", "--rig-glob", "rig-04*", "suite", "--arg", "suite=pass",
                          "--wait")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        lines = r.stdout.splitlines()
        rows = {line.split()[0]: line.split() for line in lines if line.startswith("rig-")}
        self.assertEqual(set(rows), {"rig-0401", "rig-0402", "rig-0403"})
        self.assertTrue(all(cols[2] == "ok" for cols in rows.values()), r.stdout)

        r = self.fleetctl("send", "--label", "lab=b3", "suite", "--arg", "suite=fail", "--wait")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("rig-0403", r.stdout)
        self.assertIn("failed", r.stdout)


if __name__ == "__main__":
    import unittest
    unittest.main()
