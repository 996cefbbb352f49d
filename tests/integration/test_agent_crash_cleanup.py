"""An agent killed with -9 leaves nothing running, and floods of warnings are
counted, not written (issue 15 point 6). Real broker, real agents, real suites.

- A suite that ignores SIGTERM (so PR_SET_PDEATHSIG does not end it) and has a
  child, writing a heartbeat: after kill -9 of the agent it runs on as an
  orphan; the next agent process on the same state directory finds its recorded
  process group, stops it (SIGTERM, its kill grace, SIGKILL) before it connects,
  and the command ends `interrupted` on the broker.
- The same for an executable plugin (fleetlink-<kind>) that ignores SIGTERM.
- A suite that does not ignore SIGTERM dies with the agent (PDEATHSIG); the child
  it started lives on in its process group until the next start stops it.
- The broker, with a frozen rig whose outbox is full, writes `log-repeat-limit`
  "enqueue refused" lines and then one line counting the rest; a frozen rig closed
  by keepalive and thawed (once a line per command: unacknowledged, answers and
  results for commands of the old connection) is a few lines and counts; the agent
  counts a reconnect loop's "connection ... failed" the same way.
"""
import json
import os
import re
import signal
import time
import unittest

from harness import LabTestCase, free_port, wait_for


def read_int(path):
    with open(path) as f:
        return int(f.read().split()[0])


def pid_gone(pid):
    """Gone, or a zombie waiting for its new parent: dead either way."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


class AgentCrashCleanupTest(LabTestCase):
    def setUp(self):
        super().setUp()
        self.files = {}
        suites = {}
        for name, ignore_term in (("stubborn", True), ("polite", False), ("plugin", True)):
            f = {k: self.lab.path(f"{name}.{k}") for k in ("leader", "child", "heartbeat")}
            self.files[name] = f
            trap = "trap '' TERM; " if ignore_term else ""
            # The child (a sleep in the suite's process group) inherits the ignored TERM.
            script = (f"{trap}echo $$ > {f['leader']}; sleep 300 & echo $! > {f['child']}; "
                      f"while :; do date +%s%N > {f['heartbeat']}; sleep 0.1; done")
            if name == "plugin":
                continue
            suites[name] = {"argv": ["/bin/sh", "-c", script], "timeout_s": 600, "kill_grace_s": 2}
        self.suites = self.lab.path("suites.json")
        with open(self.suites, "w") as f:
            json.dump({"suites": suites}, f)
        # An executable plugin (kind "stubborn") that does the same as the stubborn suite.
        self.plugins = self.lab.path("plugins")
        os.makedirs(self.plugins)
        prog = os.path.join(self.plugins, "fleetlink-stubborn")
        with open(prog, "w") as f:
            f.write("#!/bin/sh\nread -r request\n" + script + "\n")
        os.chmod(prog, 0o755)
        self.state = self.lab.path("state-rig-c")
        # The agent's own report decides, long before the broker's reconcile grace would.
        self.broker = self.lab.broker(reconcile_grace_ms=120000)

    def agent(self, name):
        return self.lab.agent("rig-c", self.broker, name=name, suites=self.suites, state_dir=self.state,
                              plugin_dir=self.plugins, plugin_kill_grace_s=2)

    def start_suite(self, suite):
        a = self.agent("agent-rig-c")
        self.broker.wait_rigs(["rig-c"])
        if suite == "plugin":
            status, body = self.broker.send("rig-c", "stubborn")
        else:
            status, body = self.broker.send("rig-c", "suite", {"suite": suite})
        self.assertEqual(status, 202, body)
        cmd = body["cmd_id"]
        f = self.files[suite]
        wait_for(lambda: all(os.path.exists(p) and os.path.getsize(p) > 0 for p in f.values()), 15,
                 what="the suite started")
        self.broker.wait_command(cmd, ("acked", "running"))
        leader, child = read_int(f["leader"]), read_int(f["child"])
        # Recorded in the state directory while it runs.
        with open(os.path.join(self.state, "process-groups", str(leader))) as rec:
            record = rec.read()
        self.assertIn(f"pgid={leader}\n", record)
        self.assertIn(f"cmd_id={cmd}\n", record)
        self.assertIn("kill_grace_ms=2000\n", record)
        return a, cmd, leader, child

    def heartbeat_moves(self, suite, within=1.5):
        path = self.files[suite]["heartbeat"]
        before = read_int(path)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            time.sleep(0.1)
            if read_int(path) != before:
                return True
        return False

    def assert_interrupted(self, cmd, old_boot):
        v = self.broker.wait_command(cmd, ("interrupted",), timeout=20)
        self.assertEqual(v["state"], "interrupted", v)
        self.assertEqual(v["result"]["detail"], f"interrupted: accepted by an earlier agent process "
                                                f"(boot_id {old_boot}) that ended before it finished")
        self.assertEqual(os.listdir(os.path.join(self.state, "process-groups")), [])

    def test_kill_9_orphan_ignoring_term_is_stopped_at_the_next_start_and_ends_interrupted(self):
        a, cmd, leader, child = self.start_suite("stubborn")
        old_boot = self.broker.rigs()["rig-c"]["boot_id"]
        a.kill()
        # An orphan now: its TERM from PR_SET_PDEATHSIG was ignored, it goes on.
        self.assertTrue(self.heartbeat_moves("stubborn"), "the orphaned suite kept running")
        self.assertFalse(pid_gone(leader))
        self.assertFalse(pid_gone(child))
        self.assertNotEqual(os.getppid(), leader)

        t0 = time.monotonic()
        a2 = self.agent("agent-rig-c-2")
        m = a2.wait_log(rf"cmd={cmd}: process group {leader} \(/bin/sh\) of agent boot_id={old_boot} outlived it: "
                        r"(\d+) process\(es\) stopped \(SIGTERM, then SIGKILL after its grace\)", timeout=20)
        took = time.monotonic() - t0
        self.assertGreaterEqual(int(m.group(1)), 2)  # the shell and its sleep
        self.assertTrue(pid_gone(leader), "the suite's shell is gone")
        self.assertTrue(pid_gone(child), "the process it started is gone")
        self.assertFalse(self.heartbeat_moves("stubborn"), "no heartbeat after the stop")
        self.assertGreaterEqual(took, 2.0, "its 2 s kill grace was given")
        # Stopped before the new process connected, and before it reported the command.
        log = a2.log()
        self.assertLess(log.index("outlived it"), log.index(f"cmd={cmd} interrupted: accepted by boot_id={old_boot}"))
        self.assertLess(log.index("outlived it"), log.index("welcome broker="))
        self.assert_interrupted(cmd, old_boot)

    def test_kill_9_suite_dies_with_the_agent_and_its_child_is_stopped_at_the_next_start(self):
        a, cmd, leader, child = self.start_suite("polite")
        old_boot = self.broker.rigs()["rig-c"]["boot_id"]
        a.kill()
        # PR_SET_PDEATHSIG: the suite's own process goes with the agent, at once.
        wait_for(lambda: pid_gone(leader), 5, what="the suite's shell gone with the agent")
        # What it started is still in its process group, orphaned.
        time.sleep(0.5)
        self.assertFalse(pid_gone(child), "the suite's child outlives the agent until the next start")

        a2 = self.agent("agent-rig-c-2")
        a2.wait_log(rf"cmd={cmd}: process group {leader} \(/bin/sh\) of agent boot_id={old_boot} outlived it: "
                    r"1 process\(es\) stopped \(SIGTERM\)", timeout=20)
        self.assertTrue(pid_gone(child))
        self.assert_interrupted(cmd, old_boot)

    def test_kill_9_orphaned_executable_plugin_is_stopped_at_the_next_start_and_ends_interrupted(self):
        a, cmd, leader, child = self.start_suite("plugin")
        old_boot = self.broker.rigs()["rig-c"]["boot_id"]
        a.kill()
        self.assertTrue(self.heartbeat_moves("plugin"), "the orphaned plugin kept running")
        a2 = self.agent("agent-rig-c-2")
        prog = os.path.join(self.plugins, "fleetlink-stubborn")
        a2.wait_log(rf"cmd={cmd}: process group {leader} \({re.escape(prog)}\) of agent boot_id={old_boot} "
                    r"outlived it: \d+ process\(es\) stopped \(SIGTERM, then SIGKILL after its grace\)", timeout=20)
        self.assertTrue(pid_gone(leader) and pid_gone(child))
        self.assertFalse(self.heartbeat_moves("plugin"))
        self.assert_interrupted(cmd, old_boot)

    def test_a_stopped_agent_leaves_no_record_and_the_next_start_stops_nothing(self):
        a, cmd, leader, child = self.start_suite("polite")
        self.assertEqual(a.stop(), 0)
        self.assertTrue(pid_gone(leader) and pid_gone(child))
        self.assertEqual(os.listdir(os.path.join(self.state, "process-groups")), [])
        a2 = self.agent("agent-rig-c-2")
        a2.wait_log(r"welcome broker=")
        self.assertNotIn("outlived it", a2.log())


class RepeatedWarningsTest(LabTestCase):
    def test_broker_counts_a_frozen_rigs_refused_commands_instead_of_a_line_each(self):
        broker = self.lab.broker(outbox_capacity=4, log_repeat_limit=3, log_repeat_interval_s=2)
        agents = {r: self.lab.agent(r, broker) for r in ("rig-frozen", "rig-ok")}
        broker.wait_rigs(list(agents))
        agents["rig-frozen"].signal(signal.SIGSTOP)
        try:
            for _ in range(4):
                status, body = broker.send("rig-frozen", "dmesg", {"lines": 1})
                self.assertEqual(status, 202, body)
            refused = 0
            t0 = time.monotonic()
            for _ in range(40):
                status, body = broker.send("rig-frozen", "dmesg", {"lines": 1})
                self.assertEqual(status, 503, body)
                refused += 1
            self.assertLess(time.monotonic() - t0, 2.0, "the flood fits in one interval")
            m = broker.wait_log(r"enqueue refused rig=rig-frozen: suppressed (\d+) similar lines in the last 2 s",
                                timeout=10)
            lines = re.findall(r"WARN  enqueue refused rig=rig-frozen: outbox full", broker.log())
            self.assertEqual(len(lines), 3, "the first three are written")
            self.assertEqual(int(m.group(1)), refused - 3, "every other one is counted")
        finally:
            agents["rig-frozen"].signal(signal.SIGCONT)

    def test_a_thawed_frozen_rig_is_a_few_lines_and_counts_not_a_line_per_command(self):
        broker = self.lab.broker(ping_interval_ms=300, pong_timeout_ms=300, max_missed_pongs=2,
                                 log_repeat_limit=3, log_repeat_interval_s=600)
        agent = self.lab.agent("rig-f", broker)
        broker.wait_rigs(["rig-f"])
        agent.signal(signal.SIGSTOP)
        try:
            cmds = []
            for _ in range(40):
                status, body = broker.send("rig-f", "dmesg", {"lines": 1})
                self.assertEqual(status, 202, body)
                cmds.append(body["cmd_id"])
            broker.wait_rig_gone("rig-f", timeout=15)  # closed 4002: all 40 left unacknowledged
        finally:
            agent.signal(signal.SIGCONT)
        for c in cmds:
            self.assertEqual(broker.wait_command(c, timeout=30)["state"], "succeeded")
        self.assertEqual(broker.stop(), 0)  # the counts of intervals still running are written at exit
        log = broker.log()
        self.assertEqual(len(re.findall(r"INFO  command unacknowledged rig=rig-f ", log)), 3)
        self.assertIn("INFO  commands unacknowledged rig=rig-f: suppressed 37 similar lines", log)
        # Whatever the thaw brings (answers on the old connection's commands, late results):
        # at most 3 lines of each kind about this rig, the rest counted.
        per_kind = {}
        for line in re.findall(r"WARN  (rig=rig-f \S+ \S+|enqueue refused rig=rig-f)", log):
            per_kind[line] = per_kind.get(line, 0) + 1
        self.assertTrue(all(n <= 3 for n in per_kind.values()), per_kind)

    def test_agent_counts_a_reconnect_loops_failures(self):
        url = f"wss://127.0.0.1:{free_port()}/agent"  # nothing listens there
        t0 = time.monotonic()
        a = self.lab.agent("rig-lonely", url, backoff_base_ms=20, backoff_cap_ms=40, log_level="info",
                           log_repeat_limit=2, log_repeat_interval_s=1)
        m = a.wait_log(r"session: connection to: suppressed (\d+) similar lines? in the last 1 s", timeout=15)
        self.assertGreater(int(m.group(1)), 0)
        time.sleep(1.5)
        self.assertEqual(a.stop(), 0)
        elapsed = time.monotonic() - t0
        log = a.log()
        failures = len(re.findall(r"WARN  connection to \S+ failed", log))
        counted = sum(int(n) for n in re.findall(r"session: connection to: suppressed (\d+) similar", log))
        # At most 2 lines in each second (and one interval begun at each end); the rest counted.
        self.assertLessEqual(failures, 2 * (int(elapsed) + 2), log[-3000:])
        self.assertGreater(counted, failures, "most failures were counted, not written")

if __name__ == "__main__":
    unittest.main()
