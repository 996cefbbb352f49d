"""The dashboard in a real browser (Debian's headless chromium, driven by
playwright-core from tests/browser/): a real broker with a control token and real
agents (mTLS). The page asks for the token and then follows /v1/events with it
(?access_token=); it lists the rigs; an agent frozen with SIGSTOP, with commands
waiting for its ACK, shows `unresponsive`; Force reconnect (confirmed in the
page's own dialog) closes its connection and the page shows the API's answer; a
job started from the form shows its per-rig results; a suite's output appears
live in the command view.

A second test loads the page against 19,900 plain-ws rigs (two fleetlink-rigsim
processes) and measures the first render and the cost of update bursts; the
figures are in docs/PERFORMANCE.md ("Dashboard at 20,000 rigs").

Screenshots go to tests/browser/artifacts/<test>-<time>/ (git-ignored); the path
is printed. Without chromium, node or tests/browser/node_modules these tests
fail, saying to run scripts/install-deps.sh."""
import json
import os
import resource
import shutil
import signal
import subprocess
import threading
import time
import unittest

import harness

BROWSER_DIR = os.path.join(harness.SOURCE_DIR, "tests", "browser")
SCRIPT = os.path.join(BROWSER_DIR, "dashboard.test.mjs")
CHROMIUM = "/usr/bin/chromium"
INSTALL = ("run scripts/install-deps.sh as root: it installs chromium (and nodejs/npm) with apt-get "
           "and runs `npm ci` in tests/browser")
TOKEN = "dash-s3cret"
SLOW = "for i in 1 2 3; do echo step $i; sleep 0.5; done"


def browser_tools(case):
    """node's path; fails the test (never skips) when something is missing."""
    missing = []
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(CHROMIUM)
    node = shutil.which("node")
    if node is None:
        missing.append("node")
    if not os.path.isfile(os.path.join(BROWSER_DIR, "node_modules", "playwright-core", "package.json")):
        missing.append("tests/browser/node_modules/playwright-core")
    if missing:
        case.fail(f"the browser test cannot run: missing {', '.join(missing)}; {INSTALL}")
    return node


def artifacts_dir(name):
    path = os.path.join(BROWSER_DIR, "artifacts", f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")
    os.makedirs(path, exist_ok=True)
    print(f"\n{name}: screenshots in {path}", flush=True)
    return path


def parse_result(out):
    for line in out.splitlines():
        if line.startswith("DASHBOARD_RESULT "):
            return json.loads(line[len("DASHBOARD_RESULT "):])
    return None


class DashboardBrowserTest(harness.LabTestCase):
    def test_rigs_unresponsive_reconnect_job_and_live_output_in_chromium(self):
        node = browser_tools(self)
        suites = self.lab.path("suites.json")
        with open(suites, "w") as f:
            json.dump({"suites": {"slow": {"argv": ["/bin/sh", "-c", SLOW]},
                                  "quick": {"argv": ["/bin/sh", "-c", "echo quick"]}}}, f)
        broker = self.lab.broker(control_token=TOKEN, unresponsive_after_ms=1000)
        agents = {
            "rig-a": self.lab.agent("rig-a", broker, suites=suites, label="lab=a1"),
            "rig-b": self.lab.agent("rig-b", broker, suites=suites, label="lab=b2"),
            "rig-c": self.lab.agent("rig-c", broker, suites=suites, label="lab=c3"),
        }
        broker.wait_rigs(agents)
        # rig-c freezes; the commands sent to it wait for an ACK that does not come.
        agents["rig-c"].signal(signal.SIGSTOP)
        for _ in range(3):
            status, body = broker.send("rig-c", "suite", {"suite": "quick"})
            self.assertEqual(status, 202, body)
        log_mark = broker.log_size()

        art = artifacts_dir("functional")
        env = dict(os.environ, FLEETLINK_URL=broker.control_url, FLEETLINK_TOKEN=TOKEN,
                   DASH_SCENARIO="functional", DASH_ARTIFACTS=art, DASH_RIGS="rig-a,rig-b,rig-c",
                   DASH_FROZEN="rig-c", DASH_JOB_RIGS="rig-a,rig-b", DASH_LIVE_RIG="rig-a")
        proc = subprocess.run([node, SCRIPT], cwd=BROWSER_DIR, env=env, capture_output=True,
                              text=True, timeout=240, stdin=subprocess.DEVNULL)
        print(proc.stdout[-3000:], flush=True)
        self.assertEqual(proc.returncode, 0, f"browser test failed (screenshots in {art}):\n"
                         + proc.stdout[-6000:] + proc.stderr[-3000:])
        result = parse_result(proc.stdout)
        self.assertIsNotNone(result, proc.stdout[-2000:])
        self.assertGreaterEqual(len(result["screenshots"]), 7)
        for shot in result["screenshots"]:
            self.assertGreater(os.path.getsize(shot), 1000, shot)

        # What the page showed is what the broker did: rig-c's connection was closed
        # by the operator's reconnect, the job went to both rigs, the suite ran.
        broker.wait_log(r"operator asked for a reconnect", start=log_mark, timeout=5)
        self.assertFalse(broker.rigs(connected_only=False)["rig-c"]["connected"])
        status, job = broker.api("GET", f"/v1/jobs/{result['job_id']}")
        self.assertEqual(status, 200, job)
        self.assertEqual(job["state"], "done")
        self.assertEqual(job["max_concurrency"], 1)
        self.assertEqual(sorted(r["rig_id"] for r in job["rigs"] if r["outcome"] == "ok"), ["rig-a", "rig-b"])
        cmd = broker.command(result["live_cmd_id"])
        self.assertEqual((cmd["state"], cmd["rig_id"]), ("succeeded", "rig-a"))
        self.assertTrue(result["live_early_output"].startswith("step 1"))


class DashboardScaleTest(harness.LabTestCase):
    """19,900 rigs (the open-files limit here is 20,000 per process, and the broker
    needs a few files besides its rigs' sockets, as in docs/PERFORMANCE.md)."""

    PER_SIM = 9950

    def rigsim(self, url, prefix, source_ip, tag):
        return self.lab.process(tag, [harness.binary("fleetlink-rigsim"), "--url", url,
                                      "--count", str(self.PER_SIM), "--rig-prefix", prefix,
                                      "--connect-rate", "4000", "--status-ms", "1000",
                                      "--backoff-base-ms", "500", "--backoff-cap-ms", "2000",
                                      "--source-ip", source_ip, "--source-ip-count", "64",
                                      "--max-seconds", "1200"])

    def test_dashboard_at_19900_rigs(self):
        node = browser_tools(self)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.assertGreaterEqual(hard, 2 * self.PER_SIM + 64, "the open-files limit is too low for this test")
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # inherited by the broker
        self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        plain = harness.free_port()
        # 16 control connections (a reserve of 48 descriptors) leave room for 19,900 rigs
        # under the 20,000 open-files limit; the default 64 would keep 96 back.
        broker = self.lab.broker(plain_listen=f"127.0.0.1:{plain}", accept_rate=4000, accept_burst=4000,
                                 log_level="warn", control_token=TOKEN, control_max_connections=16)
        url = f"ws://127.0.0.1:{plain}/agent"
        sims = [self.rigsim(url, "sima-", "127.11.0.1", "rigsim-a"), self.rigsim(url, "simb-", "127.12.0.1", "rigsim-b")]
        total = 2 * self.PER_SIM
        for s in sims:
            s.wait_log(r'"event":"all_connected"', timeout=180)
        harness.wait_for(lambda: len(broker.rigs()) == total, timeout=60, interval=1, what=f"{total} rigs")

        art = artifacts_dir("scale")
        env = dict(os.environ, FLEETLINK_URL=broker.control_url, FLEETLINK_TOKEN=TOKEN, DASH_SCENARIO="scale",
                   DASH_ARTIFACTS=art, DASH_EXPECT=str(total), DASH_RUNS=os.environ.get("DASH_RUNS", "3"),
                   DASH_BURST_SIZE=str(self.PER_SIM))
        proc = subprocess.Popen([node, SCRIPT], cwd=BROWSER_DIR, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        watchdog = threading.Timer(900, proc.kill)  # bounded, whatever the browser does
        watchdog.start()
        self.addCleanup(watchdog.cancel)
        out = []
        try:
            for line in proc.stdout:
                out.append(line)
                if line.startswith("NEED disconnect-burst"):
                    sims[1].stop()                      # 9,950 rigs go at once
                    proc.stdin.write("DONE disconnect-burst\n")
                    proc.stdin.flush()
                elif line.startswith("NEED connect-burst"):
                    sims[1] = self.rigsim(url, "simb-", "127.12.0.1", "rigsim-b2")  # and come back
                    proc.stdin.write("DONE connect-burst\n")
                    proc.stdin.flush()
            rc = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        text = "".join(out)
        print(text[-4000:], flush=True)
        self.assertEqual(rc, 0, f"browser test failed (screenshots in {art}):\n" + text[-6000:])
        result = parse_result(text)
        self.assertIsNotNone(result)
        with open(os.path.join(art, "figures.json"), "w") as f:
            json.dump(result, f, indent=1)
        print(f"figures: {os.path.join(art, 'figures.json')}", flush=True)
        self.assertEqual([load["rigs"] for load in result["loads"]], [total] * len(result["loads"]))
        # Usable: the first screen within 10 s at this size, a burst's page work well under its events' count in ms.
        self.assertLess(result["median_first_render_ms"], 10000, result["loads"])
        self.assertEqual(result["disconnect_burst"]["events"] >= self.PER_SIM, True, result["disconnect_burst"])
        self.assertEqual(result["job_burst"]["rigs"], total)


if __name__ == "__main__":
    unittest.main()
