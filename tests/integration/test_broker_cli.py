"""fleetlink-broker command line: --version, --check-config, defaults in --help,
unknown config keys refused, plain error messages, and fleetlink_build_info."""
import os
import re
import subprocess
import unittest

import harness
from harness import LabTestCase, binary


class BrokerCliTest(LabTestCase):
    def run_broker(self, *args, timeout=20):
        return subprocess.run([binary("fleetlink-broker"), *args], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def good_flags(self, **over):
        flags = {"--cert": self.lab.certs.broker_cert, "--key": self.lab.certs.broker_key,
                 "--ca": self.lab.certs.ca, "--listen": "127.0.0.1:0", "--control": "127.0.0.1:0",
                 "--state-dir": self.lab.path("broker-state")}
        flags.update(over)
        out = []
        for k, v in flags.items():
            if v is not None:
                out += [k, v]
        return out

    def write_conf(self, text, name="broker.conf"):
        path = self.lab.path(name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_version(self):
        r = self.run_broker("--version")
        self.assertEqual(r.returncode, 0, r.stderr)
        m = re.match(r"fleetlink-broker (\d+\.\d+\.\d+)", r.stdout)
        self.assertIsNotNone(m, r.stdout)
        with open(os.path.join(harness.SOURCE_DIR, "CMakeLists.txt")) as f:
            project = re.search(r"project\(fleetlink\s+VERSION\s+([0-9.]+)", f.read()).group(1)
        self.assertEqual(m.group(1), project)  # the same version as the agent's and the packages'
        agent = subprocess.run(harness.agent_command("--version"), capture_output=True, text=True,
                               timeout=20)
        self.assertIn(f"fleetlink-agent {project}", agent.stdout)

    def test_check_config_accepts_a_good_config_and_opens_nothing(self):
        state = self.lab.path("broker-state")
        r = self.run_broker(*self.good_flags(), "--check-config")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("is valid", r.stdout)
        self.assertFalse(os.path.exists(state), "--check-config must not create the store")
        # The same from a file.
        conf = self.write_conf(f"cert = {self.lab.certs.broker_cert}\nkey = {self.lab.certs.broker_key}\n"
                               f"ca = {self.lab.certs.ca}\nstate-dir = {state}\nlisten = 127.0.0.1:0\n")
        r = self.run_broker("--config", conf, "--check-config")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"configuration {conf} is valid", r.stdout)
        self.assertFalse(os.path.exists(state))

    def test_check_config_reports_every_error_with_file_line_and_key(self):
        _, rig_key = self.lab.certs.rig("rig-a")
        empty_token = self.write_conf("", name="token")
        conf = self.write_conf(
            "# a broken broker.conf\n"
            f"cert = {self.lab.certs.broker_cert}\n"
            f"key = {rig_key}\n"                              # 3: not the certificate's key
            f"ca = {self.lab.path('no-such-ca.crt')}\n"        # 4
            "listen = 0.0.0.0:84x3\n"                         # 5
            "ping_interval_ms = 5000\n"                       # 6: misspelt
            "accept-rate = -1\n"                              # 7
            "max-missed-pongs = 0\n"                          # 8
            "registry-refresh-ms = 40000\n"                   # 9: over half the TTL
            f"control-token-file = {empty_token}\n"           # 10
            f"state-dir = {self.lab.path('state')}\n")
        r = self.run_broker("--config", conf, "--check-config", "--rig-rate", "0")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        err = r.stderr
        expected = [
            f"{conf}:3: key 'key': '{rig_key}' is not the private key of '{self.lab.certs.broker_cert}'",
            f"{conf}:4: key 'ca': '{self.lab.path('no-such-ca.crt')}' does not exist",
            f"{conf}:5: key 'listen': must be HOST:PORT",
            f"{conf}:6: unknown key 'ping_interval_ms': not an option (did you mean 'ping-interval-ms'?)",
            f"{conf}:7: key 'accept-rate': must be a positive number (got -1)",
            f"{conf}:8: key 'max-missed-pongs': must be 1 to 1000 (got 0)",
            f"{conf}:9: key 'registry-refresh-ms': 40000 must be at most half of registry-ttl-ms (60000)",
            f"{conf}:10: key 'control-token-file': '{empty_token}' is empty",
            "--rig-rate: must be a positive number (got 0)",
        ]
        for e in expected:
            self.assertIn(e, err)
        self.assertIn(f"configuration {conf} has {len(expected)} error(s)", err)
        self.assertNotIn("1.79769e+308", err)
        self.assertNotIn("INI was not able to parse", err)
        self.assertFalse(os.path.exists(self.lab.path("state")))

    def test_unknown_key_refuses_to_start(self):
        conf = self.write_conf(f"cert = {self.lab.certs.broker_cert}\nkey = {self.lab.certs.broker_key}\n"
                               f"ca = {self.lab.certs.ca}\nstate-dir = {self.lab.path('state')}\n"
                               "listen = 127.0.0.1:0\ncontrol = 127.0.0.1:0\npong-timout-ms = 500\n")
        r = self.run_broker("--config", conf)  # no --check-config: a real start
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(f"{conf}:7: unknown key 'pong-timout-ms': not an option (did you mean 'pong-timeout-ms'?)",
                      r.stderr)
        self.assertIn("refusing to start: 1 configuration error(s)", r.stderr)
        self.assertNotIn("ready", r.stdout)
        self.assertFalse(os.path.exists(self.lab.path("state")))

    def test_bad_values_on_the_command_line_are_plain(self):
        r = self.run_broker(*self.good_flags(), "--accept-rate", "-1", "--ws-rx-buffer-bytes", "many",
                            "--store", "mysql", "--no-such-flag")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--accept-rate: must be a positive number (got -1)", r.stderr)
        self.assertIn("--ws-rx-buffer-bytes: must be a whole number from 128 to 65536 (got 'many')", r.stderr)
        self.assertIn("--store: must be one of sqlite, redis, none (got 'mysql')", r.stderr)
        self.assertIn("unexpected argument '--no-such-flag'", r.stderr)
        self.assertNotIn("1.79769e+308", r.stderr)

    def test_help_shows_every_default(self):
        r = self.run_broker("--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        options = set(re.findall(r"^\s+--([a-z][a-z0-9-]*)", r.stdout, re.M)) - {"help", "version", "config",
                                                                                  "check-config", "hash-token",
                                                                                  "strict"}
        shown = set(re.findall(r"^\s+--([a-z][a-z0-9-]*) [A-Z]+(?::\{[^}]*\}|:[A-Z]+)?=\S", r.stdout, re.M))
        # Options whose default is "none" say so in words.
        # CLI11 puts the description of a long option on the next line.
        by_words = {o for o in options - shown
                    if re.search(rf"^\s+--{o} [^\n]*(\n {{20,}}[^\n]*)?\((default: [^)]*|required[^)]*)\)",
                                 r.stdout, re.M)}
        self.assertEqual(sorted(options - shown - by_words), [])
        self.assertIn("--ping-interval-ms UINT=20000", r.stdout)
        self.assertNotIn("1.79769e+308", r.stdout)

    def test_build_info_on_metrics(self):
        broker = self.lab.broker()
        status, text = broker.api("GET", "/metrics")
        self.assertEqual(status, 200)
        version = re.match(r"fleetlink-broker (\S+)", self.run_broker("--version").stdout).group(1)
        m = re.search(r'^fleetlink_build_info\{program="fleetlink-broker",version="([^"]+)"'
                      r'(?:,commit="([0-9a-f]+(?:-dirty)?)")?,protocol="1"\} 1$', text, re.M)
        self.assertIsNotNone(m, text[:2000])
        self.assertEqual(m.group(1), version)
        if os.path.exists(os.path.join(harness.SOURCE_DIR, ".git")):
            self.assertIsNotNone(m.group(2), "a build from a git checkout knows its commit")
            # A commit of this repository (HEAD when the build ran; a later commit needs a rebuild).
            commit = m.group(2).removesuffix("-dirty")
            known = subprocess.run(["git", "-C", harness.SOURCE_DIR, "cat-file", "-e", commit + "^{commit}"],
                                   capture_output=True, text=True, timeout=20)
            self.assertEqual(known.returncode, 0, f"{commit} is not a commit of {harness.SOURCE_DIR}")
        self.assertIn("# TYPE fleetlink_build_info gauge", text)


if __name__ == "__main__":
    unittest.main()
