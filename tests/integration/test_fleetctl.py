"""fleetctl against a real broker and real agents on loopback: tables, send --wait,
exit codes (unknown rig, unresponsive rig, unreachable API, timeout, auth), reconnect,
status, events."""
import json
import os
import signal
import subprocess
import time
import unittest

import harness


class FleetctlCase(harness.LabTestCase):
    def fleetctl(self, *args, broker=None, env=None, timeout=60, control=None):
        """Run fleetctl; returns CompletedProcess (text)."""
        url = control or (broker or self.broker).control_url
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
        full_env.update(env or {})
        return subprocess.run([harness.binary("fleetctl"), "--control", url, *args],
                              capture_output=True, text=True, timeout=timeout, env=full_env)

    def start(self, rigs=("rig-a", "rig-b"), **broker_opts):
        self.broker = self.lab.broker(**broker_opts)
        self.agents = {r: self.lab.agent(r, self.broker) for r in rigs}
        self.broker.wait_rigs(rigs)


class TestFleetctlBasics(FleetctlCase):
    def test_rigs_table_lists_live_rigs(self):
        self.start()
        r = self.fleetctl("rigs")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0].split(),
                         ["RIG", "STATE", "BOOT_ID", "VERSION", "LAST_ACK", "AGE", "OUTBOX",
                          "UNACKED", "LAST_SEEN"])
        rows = {line.split()[0]: line.split() for line in lines[1:]}
        self.assertEqual(set(rows), {"rig-a", "rig-b"})
        api = self.broker.rigs()
        for rig_id, cols in rows.items():
            self.assertEqual(cols[1], "connected")
            self.assertEqual(cols[2], api[rig_id]["boot_id"])
            self.assertEqual(cols[6], f"0/{api[rig_id]['outbox_capacity']}")

        r = self.fleetctl("rigs", "--rig", "rig-b")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([line.split()[0] for line in r.stdout.splitlines()[1:]], ["rig-b"])
        r = self.fleetctl("rigs", "--state", "unresponsive")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(r.stdout.splitlines()), 1)  # header only

        r = self.fleetctl("--json", "rigs")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual({x["rig_id"] for x in json.loads(r.stdout)["rigs"]}, {"rig-a", "rig-b"})

        # An agent stops: its rig stays listed, offline, with the time since it was last seen.
        self.agents["rig-b"].stop()
        self.broker.wait_rig_gone("rig-b")
        r = self.fleetctl("rigs", "--state", "offline")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [line.split() for line in r.stdout.splitlines()[1:]]
        self.assertEqual([row[0] for row in rows], ["rig-b"], r.stdout)
        self.assertEqual(rows[0][1], "offline")
        self.assertEqual(rows[0][-1], "ago", r.stdout)
        self.assertRegex(rows[0][-2], r"^\d+s$", r.stdout)
        r = self.fleetctl("rigs")
        self.assertEqual({line.split()[0]: line.split()[-1] for line in r.stdout.splitlines()[1:]},
                         {"rig-a": "now", "rig-b": "ago"}, r.stdout)

    def test_send_with_an_idempotency_key_or_cmd_id_twice_is_one_command(self):
        self.start()
        first = self.fleetctl("send", "rig-a", "dmesg", "--lines", "1", "--idempotency-key", "deploy-42")
        self.assertEqual(first.returncode, 0, first.stderr)
        again = self.fleetctl("send", "rig-a", "dmesg", "--lines", "1", "--idempotency-key", "deploy-42")
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(again.stdout.strip(), first.stdout.strip())
        ms = int(time.time() * 1000)
        own = f"{ms >> 16:08x}-{ms & 0xFFFF:04x}-7000-8000-00000000abcd"  # a UUIDv7 of now
        for _ in range(2):
            r = self.fleetctl("send", "rig-a", "dmesg", "--lines", "1", "--cmd-id", own)
            self.assertEqual((r.returncode, r.stdout.strip()), (0, own), r.stderr)
        status, body = self.broker.api("GET", "/v1/commands?rig=rig-a")
        self.assertEqual(status, 200)
        ids = [c["cmd_id"] for c in body["commands"]]
        self.assertEqual(sorted(ids), sorted([first.stdout.strip(), own]), body)
        # A rig never seen: refused, unless held.
        r = self.fleetctl("send", "rig-new", "dmesg")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("never connected", r.stderr)
        r = self.fleetctl("--json", "send", "rig-new", "dmesg", "--hold")
        self.assertEqual(r.returncode, 0, r.stderr)
        held = json.loads(r.stdout)
        self.assertTrue(held["held"], r.stdout)
        # Still queued: a cancel withdraws it, and says so.
        r = self.fleetctl("cancel", held["cmd_id"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"cancelled {held['cmd_id']} before it reached its rig", r.stdout)
        r = self.fleetctl("send", "--rig-glob", "rig-*", "dmesg", "--idempotency-key", "k")
        self.assertNotEqual(r.returncode, 0)

    def test_send_wait_prints_the_output_and_status_shows_it(self):
        self.start()
        r = self.fleetctl("send", "rig-a", "dmesg", "--lines", "5", "--wait")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("cmd_id", r.stderr)
        cmd_id = r.stderr.split("cmd_id ")[1].split()[0]
        cmd = self.broker.command(cmd_id)
        self.assertEqual(cmd["state"], "succeeded")
        self.assertEqual(cmd["rig_id"], "rig-a")
        self.assertEqual(cmd["args"], {"lines": "5"})
        self.assertEqual(r.stdout, cmd["result"]["output"])
        self.assertEqual(cmd["result"]["status"], "ok")

        s = self.fleetctl("status", cmd_id)
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertRegex(s.stdout, r"state:\s+succeeded")
        self.assertRegex(s.stdout, r"status:\s+ok")

        # Without --wait: only the cmd_id, at once.
        r = self.fleetctl("send", "rig-b", "dmesg", "--arg", "lines=2")
        self.assertEqual(r.returncode, 0, r.stderr)
        cmd_id = r.stdout.strip()
        self.assertEqual(len(cmd_id), 36)
        done = self.broker.wait_command(cmd_id)
        self.assertEqual(done["args"], {"lines": "2"})

    def test_rig_detail(self):
        self.start(rigs=("rig-a",))
        self.assertEqual(self.fleetctl("send", "rig-a", "dmesg", "--lines", "1", "--wait").returncode, 0)
        r = self.fleetctl("rig", "rig-a")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"rig:\s+rig-a")
        self.assertRegex(r.stdout, r"last_ack:\s+seq 1 at 20")
        self.assertRegex(r.stdout, r"unacked:\s+0")

    def test_unknown_rig_exits_3(self):
        self.start(rigs=("rig-a",))
        r = self.fleetctl("send", "rig-zzz", "dmesg", "--lines", "5", "--wait")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("unknown rig rig-zzz", r.stderr)
        self.assertEqual(self.fleetctl("rig", "rig-zzz").returncode, 3)
        self.assertEqual(self.fleetctl("reconnect", "rig-zzz").returncode, 3)

    def test_unsupported_kind_fails(self):
        self.start(rigs=("rig-a",))
        r = self.fleetctl("send", "rig-a", "no-such-kind", "--wait")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("unsupported_kind", r.stderr)

    def test_unreachable_api_exits_2(self):
        port = harness.free_port()
        r = self.fleetctl("rigs", control=f"http://127.0.0.1:{port}")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("unreachable", r.stderr)
        # The environment variable is honoured too.
        r = subprocess.run([harness.binary("fleetctl"), "health"], capture_output=True, text=True,
                           timeout=30, env={**os.environ, "FLEETCTL_CONTROL": f"http://127.0.0.1:{port}"})
        self.assertEqual(r.returncode, 2, r.stderr)

    def test_health(self):
        self.start(rigs=())
        r = self.fleetctl("health")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("healthz: ok", r.stdout)
        self.assertIn("ready", r.stdout)

    def test_help_documents_exit_codes(self):
        r = subprocess.run([harness.binary("fleetctl"), "--help"], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0)
        for code in ("0 ", "1 ", "2 ", "3 ", "4 ", "5 "):
            self.assertIn("\n  " + code, r.stdout)
        self.assertIn("unreachable", r.stdout)
        r = subprocess.run([harness.binary("fleetctl"), "send"], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 64)


class TestFleetctlUnresponsive(FleetctlCase):
    def test_full_outbox_exits_4_then_reconnect_recovers(self):
        capacity = 4
        self.start(outbox_capacity=capacity)
        frozen = self.agents["rig-b"]
        frozen.signal(signal.SIGSTOP)
        try:
            accepted = 0
            refused = None
            for _ in range(capacity * 4):
                status, body = self.broker.send("rig-b", "dmesg", {"lines": 1})
                if status == 202:
                    accepted += 1
                    continue
                refused = (status, body)
                break
            self.assertIsNotNone(refused, "the outbox never filled up")
            self.assertEqual(accepted, capacity)
            status, body = refused
            self.assertEqual(status, 503)
            self.assertEqual(set(body), {"error", "rig_id", "detail", "last_ack_seq",
                                         "last_ack_at", "suggested_action"})
            self.assertEqual(body["error"], "rig_unresponsive")
            self.assertEqual(body["rig_id"], "rig-b")
            self.assertEqual(body["suggested_action"], "force_reconnect")
            self.assertIn(f"({capacity}/{capacity})", body["detail"])

            r = self.fleetctl("send", "rig-b", "dmesg", "--lines", "1", "--wait")
            self.assertEqual(r.returncode, 4, r.stderr)
            self.assertIn("unresponsive", r.stderr)
            self.assertIn("outbox full", r.stderr)
            self.assertIn("fleetctl reconnect rig-b", r.stderr)

            # The other rig is unaffected.
            r = self.fleetctl("send", "rig-a", "dmesg", "--lines", "1", "--wait")
            self.assertEqual(r.returncode, 0, r.stderr)

            # The operator sees the stuck commands ...
            r = self.fleetctl("rig", "rig-b")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, rf"unacked:\s+{capacity}")
            self.assertIn("CMD_ID", r.stdout)

            # ... and forces a reconnect.
            r = self.fleetctl("reconnect", "rig-b")
            self.assertEqual(r.returncode, 0, r.stderr)
        finally:
            frozen.signal(signal.SIGCONT)
        harness.wait_for(lambda: self.broker.rigs().get("rig-b", {}).get("outbox_depth", 1) == 0
                         and self.broker.rigs()["rig-b"]["unacked"] == 0,
                         timeout=20, what="rig-b back with an empty outbox")
        r = self.fleetctl("send", "rig-b", "dmesg", "--lines", "1", "--wait")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_wait_timeout_exits_5(self):
        self.start(rigs=("rig-a",))
        agent = self.agents["rig-a"]
        agent.signal(signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            r = self.fleetctl("send", "rig-a", "dmesg", "--wait", "--timeout", "1")
            self.assertEqual(r.returncode, 5, r.stderr)
            self.assertLess(time.monotonic() - t0, 10)
            self.assertIn("timed out", r.stderr)
        finally:
            agent.signal(signal.SIGCONT)


class TestRigHealth(FleetctlCase):
    def test_a_frozen_rig_is_unresponsive_at_once_and_an_offline_one_listed_with_last_seen(self):
        capacity = 4
        self.start(rigs=("rig-a", "rig-b", "rig-c"), outbox_capacity=capacity, unresponsive_after_ms=1000)
        frozen = self.agents["rig-b"]
        frozen.signal(signal.SIGSTOP)
        try:
            for _ in range(capacity):
                status, body = self.broker.send("rig-b", "dmesg", {"lines": 1})
                self.assertEqual(status, 202, body)
            # Long before a pong is missed (20 s pings), its unacknowledged commands say so.
            t0 = time.monotonic()
            harness.wait_for(lambda: self.broker.rigs()["rig-b"]["state"] == "unresponsive", 5,
                             what="rig-b unresponsive")
            self.assertLess(time.monotonic() - t0, 3)
            rig = self.broker.rigs()["rig-b"]
            self.assertIn("oldest unacknowledged command", rig["unresponsive_because"])
            self.assertEqual(rig["missed_pongs"], 0)
            # The depth shown is the one the next POST is refused at.
            self.assertEqual((rig["outbox_depth"], rig["outbox_capacity"]), (capacity, capacity))
            status, body = self.broker.send("rig-b", "dmesg", {"lines": 1})
            self.assertEqual((status, body["error"]), (503, "rig_unresponsive"))
            status, listed = self.broker.api("GET", "/v1/rigs?state=unresponsive")
            self.assertEqual([r["rig_id"] for r in listed["rigs"]], ["rig-b"])
            r = self.fleetctl("rigs", "--state", "unresponsive")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, rf"rig-b\s+unresponsive\s.*\s{capacity}/{capacity}\s")
            self.assertNotIn("rig-a", r.stdout)
            r = self.fleetctl("rig", "rig-b")
            self.assertRegex(r.stdout, r"state:\s+unresponsive \(its oldest unacknowledged command has waited")
        finally:
            frozen.signal(signal.SIGCONT)
        harness.wait_for(lambda: self.broker.rigs()["rig-b"]["state"] == "connected", 10, what="rig-b healthy again")
        # An offline rig stays listed, with when it was last seen.
        self.agents["rig-c"].stop()
        self.broker.wait_rig_gone("rig-c")
        rig = self.broker.rigs(connected_only=False)["rig-c"]
        self.assertEqual(rig["state"], "offline")
        self.assertIsNotNone(rig["last_seen_at"])
        r = self.fleetctl("rigs")
        self.assertRegex(r.stdout, r"rig-c\s+offline\s.*\s\d+s ago")


class TestFleetctlAuth(FleetctlCase):
    def test_token_required_when_configured(self):
        token = "lab-token-123"
        self.start(rigs=("rig-a",), control_token=token)
        r = self.fleetctl("rigs")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("unauthorized", r.stderr)
        # No token and a wrong one are told apart, by the broker and by fleetctl.
        self.assertIn("none was given", r.stderr)
        self.assertIn("--token, --token-file or FLEETCTL_TOKEN", r.stderr)
        r = self.fleetctl("--token", "wrong", "rigs")
        self.assertEqual(r.returncode, 1)
        self.assertIn("the broker refused the token", r.stderr)
        self.assertIn("check --token / FLEETCTL_TOKEN", r.stderr)
        self.assertNotIn("none was given", r.stderr)
        wrong_file = self.lab.path("wrong-token")
        with open(wrong_file, "w") as f:
            f.write("not-it\n")
        r = self.fleetctl("--token-file", wrong_file, "rigs")
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"check --token-file {wrong_file}", r.stderr)
        self.assertEqual(self.broker.api("GET", "/v1/rigs", token="")[1]["reason"], "missing_token")
        self.assertEqual(self.broker.api("GET", "/v1/rigs", token="wrong")[1]["reason"], "bad_token")

        r = self.fleetctl("--token", token, "rigs")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("rig-a", r.stdout)

        token_file = self.lab.path("token")
        with open(token_file, "w") as f:
            f.write(token + "\n")
        self.assertEqual(self.fleetctl("--token-file", token_file, "rigs").returncode, 0)
        self.assertEqual(self.fleetctl("rigs", env={"FLEETCTL_TOKEN": token}).returncode, 0)
        r = self.fleetctl("send", "rig-a", "dmesg", "--lines", "1", "--wait",
                          env={"FLEETCTL_TOKEN": token})
        self.assertEqual(r.returncode, 0, r.stderr)


class TestFleetctlEvents(FleetctlCase):
    def test_events_stream_shows_reconnects_and_commands(self):
        self.start(rigs=("rig-a",))
        log = open(self.lab.path("events.out"), "w+")
        proc = subprocess.Popen([harness.binary("fleetctl"), "--control", self.broker.control_url,
                                 "events", "--count", "4"], stdout=log, stderr=subprocess.STDOUT)
        try:
            time.sleep(0.5)  # let the stream open
            self.broker.run("rig-a", "dmesg", {"lines": 1})
            self.assertEqual(self.fleetctl("reconnect", "rig-a").returncode, 0)
            proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log.seek(0)
        out = log.read()
        self.assertEqual(proc.returncode, 0, out)
        lines = out.strip().splitlines()
        self.assertEqual(len(lines), 4, out)
        self.assertEqual([line.split()[1] for line in lines],
                         ["command_acked", "command_done", "rig_disconnected", "rig_connected"])
        self.assertIn("rig=rig-a", lines[0])



class TestFleetctlCommandLine(harness.LabTestCase):
    """What fleetctl says about itself and its arguments, without a broker."""

    def run_fleetctl(self, *args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
        return subprocess.run([harness.binary("fleetctl"), "--control", "http://127.0.0.1:9", *args],
                              capture_output=True, text=True, timeout=30, env=env)

    def test_version(self):
        r = self.run_fleetctl("--version")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^fleetctl \d+\.\d+\.\d+")

    def test_bad_numbers_are_said_in_plain_words(self):
        cases = [
            (("send", "rig-a", "dmesg", "--timeout", "-1"), "--timeout: must be a positive number (got '-1')"),
            (("send", "rig-a", "dmesg", "--lines", "-3"), "--lines: must be a whole number from 0 to"),
            (("send", "rig-a", "dmesg", "--deliver-within", "0"),
             "--deliver-within: must be a whole number from 1 to 604800 (got '0')"),
            (("jobs", "--limit", "lots"), "--limit: must be a whole number from 1 to 1000 (got 'lots')"),
            (("drain", "--window-ms", "-5"), "--window-ms: must be a whole number, 0 or more (got '-5')"),
            (("job", "J", "--timeout", "0"), "--timeout: must be a positive number (got '0')"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                r = self.run_fleetctl(*args)
                self.assertEqual(r.returncode, 64, r.stderr)
                self.assertIn(message, r.stderr)
                self.assertNotIn("1.79769e+308", r.stderr)
                self.assertNotIn("ValidationError", r.stderr)


if __name__ == "__main__":
    unittest.main()
