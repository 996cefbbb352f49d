"""fleetlink-agent command line: --version, --check-config and refusing bad config."""
import os
import subprocess
import unittest

from harness import LabTestCase, agent_command


class AgentCliTest(LabTestCase):
    def run_agent(self, *args, timeout=20):
        return subprocess.run(agent_command(*args), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def good_flags(self, rig="rig-a", **over):
        crt, key = self.lab.certs.rig(rig)
        flags = {"--broker": "wss://127.0.0.1:9/agent", "--rig-id": rig, "--cert": crt,
                 "--key": key, "--ca": self.lab.certs.ca,
                 "--state-dir": self.lab.path(f"state-{rig}")}
        flags.update(over)
        out = []
        for k, v in flags.items():
            if v is not None:
                out += [k, v]
        return out

    def test_version(self):
        r = self.run_agent("--version")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"fleetlink-agent \d+\.\d+\.\d+")

    def test_check_config_accepts_a_good_config(self):
        r = self.run_agent(*self.good_flags(), "--check-config")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("valid", r.stdout)
        # run_agent passes --config '': flags only, whatever the host's /etc/fleetlink holds.
        self.assertIn("(no config file; flags only)", r.stdout)

    def test_help_and_version_answer_with_a_config_that_does_not_parse(self):
        # A broken config (the host's /etc/fleetlink/agent.conf, say) does not stop
        # --help or --version; anything else names the file and fails.
        bad = self.lab.path("broken.conf")
        with open(bad, "w") as f:
            f.write("no-such-key = 1\n")
        for flag in ("--help", "-h"):
            r = self.run_agent("--config", bad, flag)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("Usage: fleetlink-agent", r.stdout)
            self.assertIn("--config", r.stdout)
        r = self.run_agent("--config", bad, "--version")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^fleetlink-agent \d+\.\d+\.\d+")
        r = self.run_agent("--config", bad, "--check-config")
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn(bad, r.stderr)
        self.assertIn("no-such-key", r.stderr)

    def test_check_config_explains_each_error_with_its_key(self):
        crt_b, _ = self.lab.certs.rig("rig-b")
        r = self.run_agent(*self.good_flags(**{
            "--rig-id": "rig-b",                               # cert is rig-a's
            "--broker": "http://127.0.0.1/agent",
            "--plugin-dir": self.lab.path("no-such-dir"),
            "--suites": self.lab.path("no-such-suites.json"),
        }), "--check-config")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        err = r.stderr
        self.assertIn("--broker", err)
        self.assertIn("--plugin-dir", err)
        self.assertIn("--suites", err)
        # With the broker URL fixed, the identity mismatch is reported.
        r = self.run_agent(*self.good_flags(**{"--rig-id": "rig-b"}), "--check-config")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--rig-id", r.stderr)
        self.assertIn("4401", r.stderr)
        _, key_b = self.lab.certs.rig("rig-b")
        r = self.run_agent(*self.good_flags(**{"--key": key_b}), "--check-config")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--key", r.stderr)
        self.assertIn("not the private key", r.stderr)
        r = self.run_agent(*self.good_flags(**{"--cert": self.lab.path("missing.crt")}),
                           "--check-config")
        self.assertEqual(r.returncode, 2)
        self.assertIn("missing.crt", r.stderr)

    def test_config_file_errors_name_the_file_and_key(self):
        crt, key = self.lab.certs.rig("rig-a")
        conf = self.lab.path("agent.conf")
        with open(conf, "w") as f:
            f.write(f"broker = wss://127.0.0.1:9/agent\nrig-id = rig-a\ncert = {crt}\n"
                    f"key = {key}\nca = {self.lab.certs.ca}\n"
                    f"state-dir = {self.lab.path('state')}\nplugin-dir = /no/such/plugins\n")
        r = self.run_agent("--config", conf, "--check-config")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(f"{conf}: key 'plugin-dir'", r.stderr)
        # A typo in a key is an error too, naming the file.
        with open(conf, "a") as f:
            f.write("reboot-comand = oops\n")
        r = self.run_agent("--config", conf, "--check-config")
        self.assertEqual(r.returncode, 2)
        self.assertIn(conf, r.stderr)

    def test_explicit_missing_config_file_is_an_error(self):
        missing = self.lab.path("nope.conf")
        r = self.run_agent("--config", missing, "--check-config")
        self.assertEqual(r.returncode, 2)
        self.assertIn(missing, r.stderr)

    def test_bad_config_never_starts_a_half_working_agent(self):
        r = self.run_agent(*self.good_flags(**{"--ca": self.lab.path("missing-ca.crt")}))
        self.assertEqual(r.returncode, 2)
        self.assertIn("refusing to start", r.stderr)
        r = self.run_agent(*self.good_flags(), "--allow", "teleport")
        self.assertEqual(r.returncode, 2)
        self.assertIn("teleport", r.stderr)

    def test_journald_prefixes_when_journal_stream_is_set(self):
        env = dict(os.environ, JOURNAL_STREAM="8:12345")
        r = subprocess.run(agent_command(*self.good_flags(
            **{"--ca": self.lab.path("missing-ca.crt")})), capture_output=True, text=True,
            timeout=20, env=env)
        self.assertEqual(r.returncode, 2)
        self.assertTrue(r.stderr.startswith("<3>"), r.stderr)


if __name__ == "__main__":
    unittest.main()
