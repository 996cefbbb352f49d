"""Jobs (POST /v1/jobs, GET /v1/jobs, GET /v1/jobs/{id}, POST /v1/jobs/{id}/cancel,
fleetctl job create|list|show|watch|cancel, jobs / job / send --rig-glob) with a
real broker and real agents: a job ends by its deadline with its frozen, offline
and slow rigs listed silent; max_errors and max_concurrency as percentages; a
broker killed with -9 mid-job and started again on the same state directory
finishes the job, every rig's suite run once (a ground-truth file); a dry run
sends nothing; ten at a time over twelve rigs, watched to its end with each
rig's exit code and first line; a cancelled job's long commands end cancelled,
its pending rigs skipped, nothing more started (the agents' ground truth)."""
import datetime
import json
import os
import re
import signal
import subprocess
import time
import unittest

import harness

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}"


def iso_ms(text):
    return int(datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


class JobsTestCase(harness.LabTestCase):
    def suites(self, name, suites):
        path = self.lab.path(name)
        with open(path, "w") as f:
            json.dump({"suites": {k: {"argv": ["/bin/sh", "-c", v]} for k, v in suites.items()}}, f)
        return path

    def job(self, broker, job_id, rigs=True):
        status, body = broker.api("GET", f"/v1/jobs/{job_id}" + ("" if rigs else "?rigs=false"))
        self.assertEqual(status, 200, body)
        return body

    def wait_job(self, broker, job_id, timeout=20):
        def done():
            body = self.job(broker, job_id, rigs=False)
            return body if body["state"] != "running" else None
        harness.wait_for(done, timeout, interval=0.1, what=f"job {job_id} finished")
        return self.job(broker, job_id)

    def fleetctl(self, broker, *args, timeout=60):
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
        return subprocess.run([harness.binary("fleetctl"), "--control", broker.control_url, *args],
                              capture_output=True, text=True, timeout=timeout, env=env)


class TestJobDeadline(JobsTestCase):
    def test_frozen_offline_and_slow_rigs_are_silent_when_the_deadline_ends_the_job(self):
        quick = self.suites("quick.json", {"work": "echo done"})
        slow = self.suites("slow.json", {"work": "sleep 60"})
        broker = self.lab.broker()  # pings every 20 s: a frozen rig stays connected past the deadline
        self.lab.agent("rig-ok", broker, suites=quick)
        self.lab.agent("rig-slow", broker, suites=slow)
        frozen = self.lab.agent("rig-frozen", broker, suites=quick)
        offline = self.lab.agent("rig-off", broker, suites=quick)
        broker.wait_rigs(["rig-ok", "rig-slow", "rig-frozen", "rig-off"])
        offline.stop()
        broker.wait_rig_gone("rig-off")
        frozen.signal(signal.SIGSTOP)
        self.addCleanup(frozen.signal, signal.SIGCONT)

        status, body = broker.api("POST", "/v1/jobs", {
            "kind": "suite", "args": {"suite": "work"}, "targets": {"glob": "rig-*"}, "deadline_s": 4})
        self.assertEqual(status, 202, body)
        self.assertRegex(body["job_id"], UUID)
        self.assertNotIn("batch_id", body)
        self.assertEqual(body["deadline_s"], 4)
        self.assertEqual(body["counts"]["total"], 4)
        self.assertEqual(body["counts"]["dispatched"], 4)  # the offline rig's command is held for it
        job_id = body["job_id"]

        # Running meanwhile, and listed so.
        status, listed = broker.api("GET", "/v1/jobs?state=running")
        self.assertEqual(status, 200, listed)
        self.assertIn(job_id, [j["job_id"] for j in listed["jobs"]])

        final = self.wait_job(broker, job_id, timeout=15)
        self.assertEqual(final["state"], "expired", final)
        rigs = {r["rig_id"]: r for r in final["rigs"]}
        self.assertEqual({k: r["outcome"] for k, r in rigs.items()},
                         {"rig-ok": "ok", "rig-slow": "silent", "rig-frozen": "silent", "rig-off": "silent"})
        self.assertEqual(rigs["rig-ok"]["state"], "succeeded")
        self.assertEqual(rigs["rig-slow"]["error"], "never_answered")
        self.assertIn(rigs["rig-slow"]["state"], ("acked", "running"))
        self.assertEqual(rigs["rig-frozen"]["error"], "never_acknowledged")
        self.assertEqual(rigs["rig-frozen"]["state"], "sent")
        self.assertEqual(rigs["rig-off"]["error"], "never_acknowledged")
        self.assertEqual(rigs["rig-off"]["state"], "queued")
        self.assertEqual(final["counts"]["silent"], 3)
        self.assertEqual(final["counts"]["ok"], 1)
        self.assertEqual(final["errors"], 3)
        self.assertIsNotNone(final["finished_at"])
        # The commands never acknowledged are withdrawn: they cannot run after the job said so.
        self.assertEqual(broker.command(rigs["rig-off"]["cmd_id"])["state"], "cancelled")
        self.assertIsNotNone(broker.command(rigs["rig-frozen"]["cmd_id"])["cancel_requested_at"])
        # The slow one goes on under its own timeout.
        self.assertIn(broker.command(rigs["rig-slow"]["cmd_id"])["state"], ("acked", "running"))

        status, listed = broker.api("GET", "/v1/jobs?state=expired")
        self.assertEqual(status, 200, listed)
        self.assertEqual([j["job_id"] for j in listed["jobs"]], [job_id])
        self.assertEqual(listed["jobs"][0]["counts"]["silent"], 3)
        self.assertNotIn("rigs", listed["jobs"][0])
        status, listed = broker.api("GET", "/v1/jobs?state=running")
        self.assertEqual(listed["jobs"], [])

        r = self.fleetctl(broker, "job", job_id)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("state:        expired", r.stdout)
        self.assertRegex(r.stdout, r"rig-frozen\s+\S+\s+silent\s+sent\s+never_acknowledged")
        self.assertRegex(r.stdout, r"rig-slow\s+\S+\s+silent\s+(acked|running)\s+never_answered")
        self.assertIn("3 silent", r.stderr)
        r = self.fleetctl(broker, "jobs", "--state", "expired")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, job_id + r"\s+expired\s+suite")


class TestJobLimits(JobsTestCase):
    def setUp(self):
        super().setUp()
        suites = self.suites("suites.json", {"pass": "echo pass", "fail": "exit 3", "nap": "sleep 0.5"})
        self.broker = self.lab.broker()
        self.rigs = ["rig-1", "rig-2", "rig-3", "rig-4"]
        for rig in self.rigs:
            self.lab.agent(rig, self.broker, suites=suites)
        self.broker.wait_rigs(self.rigs)

    def test_max_errors_and_max_concurrency_as_percentages(self):
        status, body = self.broker.api("POST", "/v1/jobs", {
            "kind": "suite", "args": {"suite": "fail"}, "targets": {"glob": "rig-*"},
            "max_concurrency": 1, "max_errors": "50%"})
        self.assertEqual(status, 202, body)
        self.assertEqual(body["max_errors"], 2)
        self.assertEqual(body["max_errors_given"], "50%")
        final = self.wait_job(self.broker, body["job_id"])
        self.assertEqual(final["state"], "stopped")
        # Two failures are allowed, the third stops the job: rig-4 is never sent to.
        self.assertEqual([r["outcome"] for r in final["rigs"]], ["failed", "failed", "failed", "skipped"])
        self.assertEqual([r["error"] for r in final["rigs"][:3]], ["failed"] * 3)
        self.assertIsNone(final["rigs"][3]["cmd_id"])

        status, body = self.broker.api("POST", "/v1/jobs", {
            "kind": "suite", "args": {"suite": "nap"}, "targets": {"ids": self.rigs},
            "max_concurrency": "50%", "deliver_within_s": 20, "timeout_s": 30})
        self.assertEqual(status, 202, body)
        self.assertEqual(body["max_concurrency"], 2)
        self.assertEqual([r["outcome"] for r in body["rigs"]], ["dispatched", "dispatched", "pending", "pending"])
        self.assertEqual(body["deadline_s"], 2 * (20 + 30) + 10)  # two waves of one command's longest
        final = self.wait_job(self.broker, body["job_id"])
        self.assertEqual(final["state"], "done")
        self.assertEqual(final["counts"]["ok"], 4)
        cmd = self.broker.command(final["rigs"][3]["cmd_id"])
        self.assertEqual(cmd["job_id"], body["job_id"])
        # Every rig's command has the job's own deadlines.
        self.assertEqual(cmd["timeout_s"], 30)
        delivery = iso_ms(cmd["deliver_by"]) - iso_ms(cmd["enqueued_at"])
        self.assertTrue(19_000 <= delivery <= 21_000, cmd)

        status, listed = self.broker.api("GET", "/v1/jobs?limit=1")
        self.assertEqual(status, 200, listed)
        self.assertEqual([j["job_id"] for j in listed["jobs"]], [body["job_id"]])
        self.assertIsNotNone(listed["next_before"])
        status, older = self.broker.api("GET", f"/v1/jobs?before={listed['next_before']}")
        self.assertEqual(len(older["jobs"]), 1)
        self.assertEqual(older["jobs"][0]["state"], "stopped")
        status, body = self.broker.api("POST", "/v1/jobs", {
            "kind": "suite", "targets": {"glob": "rig-*"}, "max_errors": "150%"})
        self.assertEqual(status, 400, body)

    def test_fleetctl_send_to_a_job_and_follow_it(self):
        r = self.fleetctl(self.broker, "send", "--rig-glob", "rig-*", "suite", "--arg", "suite=pass",
                          "--max-concurrency", "50%", "--wait")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        first = r.stdout.splitlines()[0]
        self.assertRegex(first, "^job " + UUID + "$")
        job_id = first.split()[1]
        self.assertIn("state:        done", r.stdout)
        self.assertIn("concurrency:  2 (50%)", r.stdout)
        rows = {line.split()[0]: line.split() for line in r.stdout.splitlines() if line.startswith("rig-")}
        self.assertEqual(set(rows), set(self.rigs))
        self.assertTrue(all(cols[2] == "ok" for cols in rows.values()), r.stdout)
        self.assertEqual(self.job(self.broker, job_id)["state"], "done")

        r = self.fleetctl(self.broker, "job", job_id, "--wait")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = self.fleetctl(self.broker, "jobs")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, job_id + r"\s+done\s+suite\s+\S+\s+4\s+0\s+4\s")

        r = self.fleetctl(self.broker, "send", "--label", "lab=none", "suite", "--arg", "suite=fail", "--wait")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)  # no rig matches: refused
        r = self.fleetctl(self.broker, "send", "--rig-glob", "rig-*", "suite", "--arg", "suite=fail",
                          "--max-concurrency", "1", "--max-errors", "0", "--wait")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("stopped", r.stderr)
        self.assertRegex(r.stdout, r"rig-1\s+\S+\s+failed\s+failed")
        self.assertRegex(r.stdout, r"rig-4\s+-\s+skipped")
        r = self.fleetctl(self.broker, "send", "--rig-glob", "rig-*", "suite", "--max-errors", "x%")
        self.assertEqual(r.returncode, 64, r.stdout + r.stderr)
        r = self.fleetctl(self.broker, "job", "01900000-0000-7000-8000-000000000000")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("unknown job", r.stderr)


class TestJobRestart(JobsTestCase):
    def test_a_job_goes_on_after_the_broker_is_killed_and_started_again(self):
        runs = self.lab.path("runs.txt")
        state_dir = self.lab.path("broker-state")
        broker = self.lab.broker(state_dir=state_dir)
        rigs = ["rig-a", "rig-b", "rig-c"]
        for rig in rigs:
            suites = self.suites(f"suites-{rig}.json", {"work": f"sleep 1.5; echo {rig} >> {runs}"})
            self.lab.agent(rig, broker, suites=suites)
        broker.wait_rigs(rigs)
        status, body = broker.api("POST", "/v1/jobs", {
            "kind": "suite", "args": {"suite": "work"}, "targets": {"glob": "rig-*"}, "max_concurrency": 1})
        self.assertEqual(status, 202, body)
        job_id = body["job_id"]
        first = body["rigs"][0]
        self.assertEqual(first["outcome"], "dispatched")
        broker.wait_command(first["cmd_id"], ("acked", "running"))
        port, control = broker.listen_port, broker.control_port
        broker.kill()  # kill -9 while rig-a's suite runs and rig-b, rig-c wait their turn

        again = self.lab.broker(name="broker-again", listen_port=port, control_port=control, state_dir=state_dir)
        again.wait_log(r"job " + job_id + r" resumed \(running\): 3 rigs, 1 in flight, 2 pending")
        final = self.wait_job(again, job_id, timeout=40)
        self.assertEqual(final["state"], "done", final)
        self.assertEqual([r["outcome"] for r in final["rigs"]], ["ok", "ok", "ok"], final)
        self.assertEqual(final["rigs"][0]["cmd_id"], first["cmd_id"])  # the same command, not a second one
        for r in final["rigs"]:
            cmd = again.command(r["cmd_id"])
            self.assertEqual((cmd["rig_id"], cmd["state"], cmd["job_id"]), (r["rig_id"], "succeeded", job_id))
        with open(runs) as f:
            self.assertEqual(sorted(f.read().split()), rigs)  # each rig's suite ran exactly once
        status, listed = again.api("GET", "/v1/jobs")
        self.assertEqual(status, 200, listed)
        self.assertEqual([(j["job_id"], j["state"]) for j in listed["jobs"]], [(job_id, "done")])


def lines_of(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().split()


class TestJobCli(JobsTestCase):
    """fleetctl job create --dry-run / --max-concurrency 10 / watch / show / list / cancel."""

    def setUp(self):
        super().setUp()
        self.started = self.lab.path("started.txt")
        self.finished = self.lab.path("finished.txt")
        self.events = self.lab.path("events.txt")  # +rig when a suite starts, -rig when it ends
        self.broker = self.lab.broker()
        self.rigs = [f"rig-{i:02d}" for i in range(1, 13)]
        for rig in self.rigs:
            suites = self.suites(f"suites-{rig}.json", {
                # Ground truth: each run appends its rig to started.txt, and to finished.txt when it ends.
                "quick": f"echo {rig} >> {self.started}; echo +{rig} >> {self.events}; sleep 0.3; "
                         f"echo -{rig} >> {self.events}; echo {rig} >> {self.finished}; echo {rig} ok; echo more",
                "long": f"echo {rig} >> {self.started}; sleep 60; echo {rig} >> {self.finished}",
                "bad": "echo disk full; exit 3"})
            self.lab.agent(rig, self.broker, suites=suites, label=["lab=b2" if rig <= "rig-06" else "lab=b3"])
        self.broker.wait_rigs(self.rigs)

    def test_dry_run_sends_nothing_and_shows_the_selection(self):
        r = self.fleetctl(self.broker, "job", "create", "suite", "--arg", "suite=quick", "--label", "lab=b2",
                          "--ids", "rig-01,rig-02,rig-99,rig-07", "--dry-run")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # ids and labels both apply: rig-07 is lab=b3; rig-99 was never seen (kept: it would be refused).
        self.assertIn("would go to 3 rigs", r.stdout)
        self.assertRegex(r.stdout, r"rig-01\s+connected")
        self.assertRegex(r.stdout, r"rig-02\s+connected")
        self.assertRegex(r.stdout, r"rig-99\s+unknown")
        self.assertNotIn("rig-07", r.stdout)
        r = self.fleetctl(self.broker, "job", "create", "suite", "--glob", "rig-1*", "--dry-run", "--json")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        body = json.loads(r.stdout)
        self.assertEqual(body["count"], 3)
        self.assertEqual([x["rig_id"] for x in body["rigs"]], ["rig-10", "rig-11", "rig-12"])
        r = self.fleetctl(self.broker, "job", "create", "suite", "--glob", "nothing-*", "--dry-run")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("would go to 0 rigs", r.stdout)
        # Nothing was sent: no job, no command, no suite ran.
        status, listed = self.broker.api("GET", "/v1/jobs")
        self.assertEqual((status, listed["jobs"]), (200, []))
        status, cmds = self.broker.api("GET", "/v1/commands")
        self.assertEqual(status, 200, cmds)
        self.assertEqual(cmds["commands"], [])
        time.sleep(0.5)
        self.assertEqual(lines_of(self.started), [])

    def test_ten_at_a_time_watched_to_the_end_with_exit_codes_and_first_lines(self):
        r = self.fleetctl(self.broker, "job", "create", "suite", "--arg", "suite=quick", "--glob", "rig-*",
                          "--max-concurrency", "10", "--max-errors", "25%", "--deadline-s", "60")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout.splitlines()[0], "^job " + UUID + "$")
        job_id = r.stdout.splitlines()[0].split()[1]
        # Ten in flight at once, two waiting for a slot.
        self.assertIn("concurrency:  10\n", r.stdout)
        self.assertIn("max_errors:   3 (25%)", r.stdout)
        self.assertEqual(len(re.findall(r"^rig-\d\d\s+\S+\s+dispatched", r.stdout, re.M)), 10, r.stdout)
        self.assertEqual(len(re.findall(r"^rig-1[12]\s+-\s+pending", r.stdout, re.M)), 2, r.stdout)

        w = self.fleetctl(self.broker, "job", "watch", job_id)
        self.assertEqual(w.returncode, 0, w.stdout + w.stderr)
        progress = [line for line in w.stderr.splitlines() if line.startswith(f"job {job_id} ")]
        self.assertGreaterEqual(len(progress), 1, w.stderr)
        self.assertEqual(len(progress), len(set(progress)), "one line per change, not per poll")
        self.assertTrue(progress[-1].endswith("done: done 12, failed 0, running 0, pending 0, silent 0 (of 12)"),
                        progress)
        self.assertIn("state:        done", w.stdout)
        self.assertRegex(w.stdout, r"RIG\s+CMD_ID\s+OUTCOME\s+STATE\s+ERROR\s+EXIT\s+FIRST_LINE")
        for rig in self.rigs:
            self.assertRegex(w.stdout, rf"{rig}\s+{UUID}\s+ok\s+succeeded\s+-\s+0\s+{rig} ok\n")
        # The agents' ground truth: every rig ran once, never more than ten at a time.
        self.assertEqual(sorted(lines_of(self.started)), self.rigs)
        self.assertEqual(sorted(lines_of(self.finished)), self.rigs)
        at_once, most = 0, 0
        for event in lines_of(self.events):
            at_once += 1 if event.startswith("+") else -1
            most = max(most, at_once)
        self.assertLessEqual(most, 10)
        self.assertGreater(most, 1)

        job = self.job(self.broker, job_id)
        self.assertEqual([(r["exit_code"], r["output_first_line"]) for r in job["rigs"]],
                         [(0, f"{rig} ok") for rig in self.rigs])

        # A failing job: the exit code and the output's first line, and watch exits 1.
        r = self.fleetctl(self.broker, "job", "create", "suite", "--arg", "suite=bad", "--ids", "rig-01,rig-02",
                          "--watch")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"rig-01\s+\S+\s+failed\s+failed\s+failed\s+3\s+disk full")
        self.assertIn("2 failed", r.stderr)
        bad_id = r.stdout.splitlines()[0].split()[1]
        r = self.fleetctl(self.broker, "job", "show", bad_id)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"rig-02\s+\S+\s+failed\s+failed\s+failed\s+3\s+disk full")

        # The list: newest first, one line each, filtered by state.
        r = self.fleetctl(self.broker, "job", "list")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        rows = [line.split() for line in r.stdout.splitlines()[1:]]
        self.assertEqual([row[0] for row in rows], [bad_id, job_id])
        self.assertEqual(rows[1][:2], [job_id, "done"])
        r = self.fleetctl(self.broker, "job", "list", "--state", "done")
        self.assertEqual([line.split()[0] for line in r.stdout.splitlines()[1:]], [bad_id, job_id])
        r = self.fleetctl(self.broker, "job", "list", "--state", "cancelled")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.splitlines()[1:], [])

    def test_cancel_a_running_job_of_long_commands(self):
        r = self.fleetctl(self.broker, "job", "create", "suite", "--arg", "suite=long", "--glob", "rig-0*",
                          "--max-concurrency", "3", "--json")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        job = json.loads(r.stdout)
        job_id = job["job_id"]
        self.assertEqual(job["counts"], {"total": 9, "pending": 6, "dispatched": 3, "ok": 0, "failed": 0,
                                         "refused": 0, "skipped": 0, "silent": 0})
        running = [r for r in job["rigs"] if r["outcome"] == "dispatched"]
        for rig in running:
            self.broker.wait_command(rig["cmd_id"], ("acked", "running"))
        harness.wait_for(lambda: len(lines_of(self.started)) == 3 or None, 10, what="three suites started")

        c = self.fleetctl(self.broker, "job", "cancel", job_id)
        self.assertEqual(c.returncode, 0, c.stdout + c.stderr)
        self.assertIn(f"cancelled job {job_id}: nothing more is sent (6 rigs skipped), 3 commands in flight",
                      c.stdout)
        started = time.monotonic()
        w = self.fleetctl(self.broker, "job", "watch", job_id, "--timeout", "20")
        self.assertEqual(w.returncode, 1, w.stdout + w.stderr)  # not every rig ok
        self.assertLess(time.monotonic() - started, 15, "the 60 s suites were not stopped")
        self.assertIn("state:        cancelled", w.stdout)
        self.assertIn("cancelled_at: ", w.stdout)
        final = self.job(self.broker, job_id)
        self.assertEqual(final["state"], "cancelled")
        self.assertIsNotNone(final["finished_at"])
        by_rig = {r["rig_id"]: r for r in final["rigs"]}
        for rig in running:
            got = by_rig[rig["rig_id"]]
            self.assertEqual((got["outcome"], got["state"], got["error"]), ("failed", "cancelled", "cancelled"), got)
            self.assertEqual(self.broker.command(rig["cmd_id"])["state"], "cancelled")
        skipped = [r for r in final["rigs"] if r["outcome"] == "skipped"]
        self.assertEqual(len(skipped), 6)
        for r in skipped:
            self.assertIsNone(r["cmd_id"])
            self.assertIn("the job was cancelled", r["detail"])
        self.assertRegex(w.stdout, r"rig-09\s+-\s+skipped\s+-\s+-\s+-\s+not sent: the job was cancelled")
        # Nothing more was started, and the long suites never reached their end (the agents' ground truth).
        time.sleep(1.5)
        self.assertEqual(sorted(lines_of(self.started)), sorted(r["rig_id"] for r in running))
        self.assertEqual(lines_of(self.finished), [])
        status, cmds = self.broker.api("GET", f"/v1/commands?job={job_id}")
        self.assertEqual(status, 200, cmds)
        self.assertEqual(sorted(c["state"] for c in cmds["commands"]), ["cancelled"] * 3)

        # Finished: a second cancel is refused; an unknown job is 404.
        c = self.fleetctl(self.broker, "job", "cancel", job_id)
        self.assertEqual(c.returncode, 1, c.stdout + c.stderr)
        self.assertIn("is not running (state cancelled)", c.stderr)
        status, body = self.broker.api("POST", f"/v1/jobs/{job_id}/cancel")
        self.assertEqual((status, body["error"]), (409, "not_running"))
        status, body = self.broker.api("POST", "/v1/jobs/01900000-0000-7000-8000-000000000000/cancel")
        self.assertEqual((status, body["error"]), (404, "unknown_job"))
        r = self.fleetctl(self.broker, "job", "list", "--state", "cancelled")
        self.assertRegex(r.stdout, job_id + r"\s+cancelled\s+suite")


if __name__ == "__main__":
    unittest.main()
