"""The agent's trust in what it runs and keeps, like sshd's StrictModes (issue 15 point 8).

The real fleetlink-agent, with files the test makes in its lab directory (under
/tmp, mode 1777: accepted above a path because it is root's and sticky), refuses
with --check-config (exit 2) and at start (exit 2, before it connects or loads
anything), naming the option, the path and the reason, when anyone but root or
its own user could change:
- the plugin directory (mode 0777, the case of the issue: it used to load the
  plugin and call the configuration valid), or a directory above it;
- a plugin in it (mode 0777, or owned by another user);
- the suites file, a suite's program, or a directory above the program;
- the state directory (mode 0777, or owned by another user).
Owned by another user means chowned to uid 65534: the tests run as root. A good
configuration made the same way is valid, and a suite runs with its user's groups
only.
"""
import os
import subprocess
import unittest

import harness

from harness import LabTestCase, binary

OTHER_UID = 65534  # nobody


class AgentStrictModesTest(LabTestCase):
    def setUp(self):
        # Not skipped: a run that cannot show the refusals fails and says why.
        self.assertEqual(os.geteuid(), 0, "needs root: files owned by another user are made with chown")
        super().setUp()
        self.plugins = self.lab.path("plugins")
        os.makedirs(self.plugins, mode=0o755)
        self.marker = self.lab.path("plugin-ran")
        self.plugin = self.write(os.path.join(self.plugins, "fleetlink-echo"),
                                 f"#!/bin/sh\ntouch {self.marker}\nread line\necho \"$line\"\n", 0o755)
        self.progs = self.lab.path("progs")
        os.makedirs(self.progs, mode=0o755)
        self.suite_prog = self.write(os.path.join(self.progs, "run-suite"), "#!/bin/sh\necho suite\n", 0o755)
        self.suites = self.write(self.lab.path("suites.json"),
                                 '{"suites": {"7": {"argv": ["%s", "--suite", "7"]},'
                                 ' "sh": {"argv": ["sh", "-c", "true"]}}}' % self.suite_prog, 0o644)
        self.state = self.lab.path("state")
        os.makedirs(self.state, mode=0o755)

    @staticmethod
    def write(path, text, mode):
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def flags(self):
        crt, key = self.lab.certs.rig("rig-t")
        return ["--broker", "wss://127.0.0.1:9/agent", "--rig-id", "rig-t", "--cert", crt, "--key", key,
                "--ca", self.lab.certs.ca, "--state-dir", self.state, "--plugin-dir", self.plugins,
                "--suites", self.suites]

    def run_agent(self, *extra):
        # agent_command: --config '' (never the host's /etc/fleetlink/agent.conf).
        return subprocess.run(harness.agent_command(*self.flags(), *extra), capture_output=True,
                              text=True, timeout=30, stdin=subprocess.DEVNULL)

    def assert_refused(self, *expected):
        """--check-config and a start both refuse, each saying every line of `expected`."""
        checked = self.run_agent("--check-config")
        self.assertEqual(checked.returncode, 2, checked.stdout + checked.stderr)
        started = self.run_agent("--log-level", "debug")
        self.assertEqual(started.returncode, 2, started.stderr)
        self.assertIn("refusing to start", started.stderr)
        for text in expected:
            self.assertIn(text, checked.stderr)
            self.assertIn(text, started.stderr)
        # It refused before anything: no plugin loaded, nothing run, no connection tried.
        self.assertNotIn("loaded: kind=echo", started.stderr)
        self.assertNotIn("connect", started.stderr)
        self.assertFalse(os.path.exists(self.marker))
        return checked.stderr

    def test_a_good_configuration_is_valid(self):
        r = self.run_agent("--check-config")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("is valid", r.stdout)

    def test_world_writable_plugin_directory_and_plugin(self):
        os.chmod(self.plugins, 0o777)
        os.chmod(self.plugin, 0o777)
        err = self.assert_refused(
            f"--plugin-dir: plugin directory refused: '{self.plugins}' is writable by its group and others "
            "(mode 0777)")
        self.assertNotIn("fleetlink-echo", err)  # one line for the directory, not one more per plugin

    def test_writable_plugin_in_a_good_directory(self):
        os.chmod(self.plugin, 0o777)
        self.assert_refused(f"--plugin-dir: plugin refused: '{self.plugin}' is writable by its group and others "
                            "(mode 0777)")

    def test_group_writable_plugin(self):
        os.chmod(self.plugin, 0o775)
        self.assert_refused(f"--plugin-dir: plugin refused: '{self.plugin}' is writable by its group (mode 0775)")

    def test_plugin_owned_by_another_user(self):
        os.chown(self.plugin, OTHER_UID, OTHER_UID)
        self.assert_refused(f"--plugin-dir: plugin refused: '{self.plugin}' is owned by uid {OTHER_UID}",
                            "not by root or the agent's user")

    def test_plugin_directory_owned_by_another_user(self):
        os.chown(self.plugins, OTHER_UID, OTHER_UID)
        self.assert_refused(f"--plugin-dir: plugin directory refused: '{self.plugins}' is owned by uid {OTHER_UID}")

    def test_loose_directory_above_the_plugin_directory(self):
        above = self.lab.path("shared")
        os.makedirs(above, mode=0o755)
        os.chmod(above, 0o777)
        inner = os.path.join(above, "plugins")
        os.rename(self.plugins, inner)
        self.plugins = inner
        self.assert_refused(f"--plugin-dir: plugin directory refused: '{above}' is writable by its group and "
                            f"others (mode 0777), a directory above '{inner}'")

    def test_writable_suite_program(self):
        os.chmod(self.suite_prog, 0o777)
        self.assert_refused(f"--suites: suite '7' program refused: '{self.suite_prog}' is writable by its group "
                            "and others (mode 0777)")

    def test_suite_program_owned_by_another_user(self):
        os.chown(self.suite_prog, OTHER_UID, OTHER_UID)
        self.assert_refused(f"--suites: suite '7' program refused: '{self.suite_prog}' is owned by uid {OTHER_UID}")

    def test_loose_directory_above_a_suite_program(self):
        os.chmod(self.progs, 0o777)
        self.assert_refused(f"--suites: suite '7' program refused: '{self.progs}' is writable by its group and "
                            f"others (mode 0777), a directory above '{self.suite_prog}'")

    def test_writable_suites_file(self):
        os.chmod(self.suites, 0o666)
        self.assert_refused(f"--suites: suites file refused: '{self.suites}' is writable by its group and others "
                            "(mode 0666)")

    def test_world_writable_state_directory(self):
        os.chmod(self.state, 0o777)
        self.assert_refused(f"--state-dir: state directory refused: '{self.state}' is writable by its group and "
                            "others (mode 0777)")

    def test_state_directory_owned_by_another_user(self):
        os.chown(self.state, OTHER_UID, OTHER_UID)
        self.assert_refused(f"--state-dir: state directory refused: '{self.state}' is owned by uid {OTHER_UID}")

    def test_state_directory_to_be_made_in_a_loose_directory(self):
        os.chmod(self.state, 0o777)
        self.state = os.path.join(self.state, "new")
        self.assert_refused(f"--state-dir: state directory refused: '{os.path.dirname(self.state)}' is writable "
                            f"by its group and others (mode 0777) (where '{self.state}' would be made)")
        self.assertFalse(os.path.exists(self.state))

    def test_every_problem_is_reported_at_once(self):
        os.chmod(self.plugin, 0o777)
        os.chmod(self.suite_prog, 0o777)
        os.chmod(self.state, 0o777)
        err = self.assert_refused(f"'{self.plugin}'", f"'{self.suite_prog}'", f"'{self.state}'")
        self.assertIn("3 error(s)", err)


if __name__ == "__main__":
    unittest.main()
