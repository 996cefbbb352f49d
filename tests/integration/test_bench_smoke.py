"""The benchmark instruments keep working: tests/bench/run --smoke (N = 200, a few
seconds) must produce figures for every scenario on both transports. Nothing here is
about speed; the real runs and their bar are in docs/PERFORMANCE.md."""
import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.environ.get("FLEETLINK_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.environ.get("FLEETLINK_BUILD_DIR", os.path.join(SOURCE, "build"))

EXPECTED = {
    "plain": {"density": "bytes_per_connection", "round_trip": "p50_ms", "pipelined": "cmds_per_s",
              "fanout": "median_s", "fanout_set": "median_s", "storm": "storm_s"},
    "mtls": {"density": "bytes_per_connection", "storm": "storm_s"},
}


class BenchSmoke(unittest.TestCase):
    def test_every_scenario_produces_numbers(self):
        # Not built is a failure, not a skip: a skipped smoke would look passed.
        self.assertTrue(os.access(os.path.join(BUILD, "tests", "bench", "fleetlink-rigsim"), os.X_OK),
                        f"the benchmarks are not built under {BUILD}: configure it with "
                        "-DFLEETLINK_BUILD_BENCH=ON (scripts/test.sh does)")
        with tempfile.TemporaryDirectory(prefix="fleetlink-bench-smoke-") as out:
            proc = subprocess.run(
                [sys.executable, os.path.join(SOURCE, "tests", "bench", "run"), "--smoke",
                 "--build-dir", BUILD, "--out", out, "--ca-dir", os.path.join(out, "ca")],
                capture_output=True, text=True, timeout=240)
            self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
            files = glob.glob(os.path.join(out, "bench-*.json"))
            self.assertEqual(len(files), 1, proc.stdout[-2000:])
            with open(files[0]) as f:
                report = json.load(f)
            # compare: a run against itself is the same everywhere (ratio 1.00).
            cmp = subprocess.run(
                [sys.executable, os.path.join(SOURCE, "tests", "bench", "compare"), "--base", files[0],
                 "--new", files[0], "--size", "200"], capture_output=True, text=True, timeout=60)
            self.assertEqual(cmp.returncode, 0, cmp.stderr)
            self.assertRegex(cmp.stdout, r"\| idle bytes/conn, plain \| [\d,]+ \| [\d,]+ \| 1\.00 \|")
            bad = subprocess.run(
                [sys.executable, os.path.join(SOURCE, "tests", "bench", "compare"), "--base", files[0],
                 "--new", os.path.join(SOURCE, "README.md")], capture_output=True, text=True, timeout=60)
            self.assertNotEqual(bad.returncode, 0)
            self.assertIn("README.md", bad.stderr)
        results = report["results"]["200"]
        for transport, scenarios in EXPECTED.items():
            for scenario, key in scenarios.items():
                with self.subTest(transport=transport, scenario=scenario):
                    r = results.get(transport, {}).get(scenario)
                    self.assertIsNotNone(r, f"{transport}/{scenario} missing: {results.get(transport)}")
                    self.assertNotIn("error", r, r)
                    self.assertIsInstance(r.get(key), (int, float), r)
                    self.assertGreater(r[key], 0, r)
                    if "complete" in r:
                        self.assertTrue(r["complete"], r)
        self.assertEqual(results["plain"]["storm"]["registered"], 200)
        self.assertEqual(results["mtls"]["storm"]["registered"], 200)



class CrossBrokerSmoke(unittest.TestCase):
    def test_cross_broker_bench_produces_numbers(self):
        rigsim = os.path.join(BUILD, "tests", "bench", "fleetlink-rigsim")
        self.assertTrue(os.access(rigsim, os.X_OK),
                        f"{rigsim} not built: configure with -DFLEETLINK_BUILD_BENCH=ON")
        with tempfile.TemporaryDirectory(prefix="fleetlink-cross-smoke-") as out:
            proc = subprocess.run(
                [sys.executable, os.path.join(SOURCE, "tests", "bench", "cross_broker"), "--smoke",
                 "--build-dir", BUILD, "--out", out, "--ca-dir", os.path.join(out, "ca")],
                capture_output=True, text=True, timeout=240)
            self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
            files = glob.glob(os.path.join(out, "cross-broker-*.json"))
            self.assertEqual(len(files), 1, proc.stdout[-2000:])
            with open(files[0]) as f:
                summary = json.load(f)["routing"]["summary"]
        for name, key in (("rtt_same", "p50_ms"), ("rtt_cross", "p50_ms"),
                          ("pipe_same", "cmds_per_s"), ("pipe_cross", "cmds_per_s")):
            with self.subTest(run=name):
                self.assertIsInstance(summary[name][key], (int, float), summary)
                self.assertGreater(summary[name][key], 0, summary)


class RealAgentsSmoke(unittest.TestCase):
    def test_real_agents_bench_runs_every_command_once(self):
        with tempfile.TemporaryDirectory(prefix="fleetlink-real-agents-smoke-") as out:
            proc = subprocess.run(
                [sys.executable, os.path.join(SOURCE, "tests", "bench", "real_agents"), "--agents", "5",
                 "--rounds", "1", "--round-trips", "20", "--build-dir", BUILD, "--out", out],
                capture_output=True, text=True, timeout=240)
            self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
            files = glob.glob(os.path.join(out, "real-agents-*.json"))
            self.assertEqual(len(files), 1, proc.stdout[-2000:])
            with open(files[0]) as f:
                report = json.load(f)
        self.assertEqual(len(report["rounds"]), 1)
        self.assertEqual(report["rounds"][0]["states"], {"succeeded": 5})
        self.assertGreater(report["summary"]["all_done_s"], 0)
        self.assertGreaterEqual(report["summary"]["all_done_s"], report["summary"]["all_acked_s"])
        self.assertEqual(report["round_trip"]["count"], 20)
        self.assertGreater(report["round_trip"]["ack_p50_ms"], 0)


class TlsPeersSmoke(unittest.TestCase):
    def test_tls_peers_measures_floor_fleetlink_and_nginx(self):
        with tempfile.TemporaryDirectory(prefix="fleetlink-tls-peers-smoke-") as out:
            proc = subprocess.run(
                [sys.executable, os.path.join(SOURCE, "tests", "bench", "tls_peers"), "--n", "100",
                 "--rounds", "1", "--speed-seconds", "1", "--build-dir", BUILD, "--out", out,
                 "--ca-dir", os.path.join(out, "ca")],
                capture_output=True, text=True, timeout=300)
            self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
            files = glob.glob(os.path.join(out, "tls-peers-*.json"))
            self.assertEqual(len(files), 1, proc.stdout[-2000:])
        # A figure is printed "4,515" or, below 1,000 (a slow or busy machine), "714.3".
        number = r"[\d,]+(?:\.\d+)?"
        self.assertRegex(proc.stdout, r"\| full mTLS 1.3 handshakes per server CPU-second \(\w+\) \| "
                         + r" \| ".join([number] * 3) + r" \|")


class AgentAckSmoke(unittest.TestCase):
    def test_agent_ack_bench_measures_the_ack_latency(self):
        proc = subprocess.run(
            [sys.executable, os.path.join(SOURCE, "tests", "bench", "agent_ack"), "--smoke", "--no-write",
             "--build-dir", BUILD], capture_output=True, text=True, timeout=240)
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
        self.assertRegex(proc.stdout, r"p50")


class PeersScript(unittest.TestCase):
    def test_says_what_is_missing_instead_of_measuring_nothing(self):
        proc = subprocess.run(
            [sys.executable, os.path.join(SOURCE, "tests", "bench", "peers"), "--peers", "/nonexistent-peers",
             "--build-dir", BUILD], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("no peer instrument at /nonexistent-peers", proc.stderr)


if __name__ == "__main__":
    unittest.main()
