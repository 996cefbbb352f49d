"""tests/run-on-poisoned-host, which scripts/test.sh runs the whole suite under
(issue 16 point 5): it must really plant the poison, really catch a write to the
host's directories without letting it reach the host, and the agent must really
trip over the poison unless it is told --config ''. Then a config-sensitive
module (test_agent_cli) passes under it.

Needs root (a mount namespace with overlays); without root the tests fail and
say so.
"""
import os
import subprocess
import sys
import unittest

import harness

TOOL = os.path.join(harness.SOURCE_DIR, "tests", "run-on-poisoned-host")


def poisoned(*argv, timeout=120):
    return subprocess.run([TOOL, *argv], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


class PoisonedHost(unittest.TestCase):
    def setUp(self):
        self.assertEqual(os.geteuid(), 0, "run-on-poisoned-host needs root (mount namespace, overlayfs)")

    def test_the_poison_is_there_and_the_host_is_untouched(self):
        had_etc_fleetlink = os.path.exists("/etc/fleetlink")
        r = poisoned("/bin/sh", "-c", "cat /etc/fleetlink/agent.conf /etc/fleetlink/broker.conf; "
                     "test -d /var/lib/fleetlink && test -d /var/lib/fleetlink-broker")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("read-the-hosts-etc-fleetlink-agent-conf", r.stdout)
        self.assertIn("read-the-hosts-etc-fleetlink-broker-conf", r.stdout)
        self.assertEqual(os.path.exists("/etc/fleetlink"), had_etc_fleetlink)  # the poison stayed inside

    def test_a_write_under_etc_var_lib_or_usr_fails_the_run_and_stays_out_of_the_host(self):
        marker = f"fleetlink-poisoned-host-test-{os.getpid()}"
        r = poisoned("/bin/sh", "-c", f"touch /etc/{marker} /usr/{marker} && mkdir /var/lib/fleetlink/{marker}")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        for path in (f"/etc/{marker}", f"/usr/{marker}", f"/var/lib/fleetlink/{marker}"):
            self.assertIn(path, r.stderr)
            self.assertFalse(os.path.exists(path), f"{path} reached the host")
        # A command that failed keeps its own status.
        self.assertEqual(poisoned("/bin/sh", "-c", "exit 7").returncode, 7)

    def test_the_agent_trips_over_the_poison_unless_given_an_empty_config(self):
        agent = harness.binary("fleetlink-agent")
        r = poisoned(agent, "--rig-id", "rig-a", "--check-config", timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("/etc/fleetlink/agent.conf", r.stderr)
        self.assertIn("read-the-hosts-etc-fleetlink-agent-conf", r.stderr)
        r = poisoned(agent, "--config", "", "--rig-id", "rig-a", "--check-config", timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)  # no broker, no certificates ...
        self.assertNotIn("/etc/fleetlink", r.stderr)            # ... but nothing from the host's file
        self.assertIn("--broker", r.stderr)

    def test_the_agent_cli_tests_pass_on_the_poisoned_host(self):
        here = os.path.dirname(os.path.abspath(__file__))
        r = subprocess.run([TOOL, sys.executable, os.path.join(here, "run_module.py"), "test_agent_cli"],
                           capture_output=True, text=True, timeout=240, cwd=here, stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])


if __name__ == "__main__":
    unittest.main()
