"""TLS 1.3 session resumption across a broker restart (--tls-ticket-key-file).

Rigs simulated by fleetlink-rigsim keep the session ticket the broker gives them and
offer it when they reconnect. A broker restarted with the same ticket key file
resumes those sessions (no certificate exchange), yet still knows each rig's
identity from the certificate carried in the ticket: a rig whose certificate does
not match its rig id is refused 4401 on a resumed session too."""
import json
import os
import re
import subprocess
import shutil
import stat
import unittest

from harness import LabTestCase, binary, free_port, wait_for


class RigSimStatus:
    """The JSON status lines a rigsim process prints (its log is stdout + stderr)."""

    def __init__(self, proc):
        self.proc = proc

    def last(self):
        for line in reversed(self.proc.log().splitlines()):
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    continue
        return {}

    def wait(self, predicate, timeout, what):
        return wait_for(lambda: (lambda s: s if s and predicate(s) else None)(self.last()),
                        timeout, interval=0.05, what=what)


def refused_4401(status):
    return status.get("close_codes", {}).get("4401", 0)


class TlsResumption(LabTestCase):
    def setUp(self):
        super().setUp()
        help_text = subprocess.run([binary("fleetlink-broker"), "--help"], capture_output=True,
                                   text=True, timeout=30).stdout
        self.assertIn("--tls-ticket-key-file", help_text, "this fleetlink-broker has no --tls-ticket-key-file")

    def cert_dir(self, good, impostor=None):
        """A rigsim --cert-dir: good rigs with their own certificates; the impostor rig id
        gets another rig's certificate and key."""
        d = self.lab.path("rigsim-certs")
        os.makedirs(d, exist_ok=True)
        for rig in good:
            crt, key = self.lab.certs.rig(rig)
            shutil.copy(crt, os.path.join(d, f"{rig}.crt"))
            shutil.copy(key, os.path.join(d, f"{rig}.key"))
        if impostor:
            rig, other = impostor
            crt, key = self.lab.certs.rig(other)
            shutil.copy(crt, os.path.join(d, f"{rig}.crt"))
            shutil.copy(key, os.path.join(d, f"{rig}.key"))
        return d

    def rigsim(self, broker, count, cert_dir):
        # Not built: binary() fails the test, saying so (never a skip).
        proc = self.lab.process("rigsim", [
            binary("fleetlink-rigsim"), "--url", broker.url, "--count", str(count),
            "--cert-dir", cert_dir, "--status-ms", "100", "--backoff-base-ms", "100",
            "--backoff-cap-ms", "400", "--max-seconds", "90"])
        return RigSimStatus(proc)

    def test_restart_with_the_same_key_resumes_and_still_checks_identity(self):
        key_file = self.lab.path("ticket.key")
        port = free_port()
        opts = dict(listen_port=port, tls_ticket_key_file=key_file, accept_rate=1000, accept_burst=100)
        broker = self.lab.broker(**opts)
        st = os.stat(key_file)
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o600)
        self.assertEqual(st.st_size, 80)

        # rig-00000 and rig-00001 are genuine; rig-00002 presents rig-intruder's certificate.
        sim = self.rigsim(broker, 3, self.cert_dir(["rig-00000", "rig-00001"], ("rig-00002", "rig-intruder")))
        before = sim.wait(lambda s: s["connected"] == 2 and refused_4401(s) >= 2, 20,
                          "two rigs connected, the impostor refused twice")
        # The impostor's second refusal was on a resumed session already.
        self.assertGreaterEqual(before["tls_resumed"], 1, before)

        broker.kill()
        sim.wait(lambda s: s["connected"] == 0, 10, "rigs notice the broker is gone")
        down = sim.last()
        broker = self.lab.broker(name="broker-2", **opts)
        after = sim.wait(lambda s: s["connected"] == 2 and refused_4401(s) >= refused_4401(down) + 2, 20,
                         "rigs back on the restarted broker, the impostor refused again")
        # Every handshake with the new broker was a resumption: no full handshake since the kill.
        self.assertEqual(after["tls_full"], down["tls_full"], after)
        self.assertGreaterEqual(after["tls_resumed"] - down["tls_resumed"], 4, after)
        # The refused rig's identity came from the certificate restored from its ticket.
        log = broker.log()
        self.assertRegex(log, r"hello refused rig=rig-00002 .*subject=\S*rig-intruder")
        self.assertEqual(set(broker.rigs()), {"rig-00000", "rig-00001"})
        # The broker's own count says the same (what an operator watches after a restart).
        status, text = broker.api("GET", "/metrics")
        self.assertEqual(status, 200)
        counts = {k: int(v) for k, v in re.findall(
            r"^fleetlink_broker_tls_handshakes_(full|resumed)_total (\d+)$", text, re.M)}
        self.assertEqual(counts["full"], 0, counts)
        self.assertGreaterEqual(counts["resumed"], 4, counts)

    def test_a_real_agent_resumes_after_a_broker_restart(self):
        key_file = self.lab.path("ticket.key")
        port = free_port()
        broker = self.lab.broker(listen_port=port, tls_ticket_key_file=key_file)
        agent = self.lab.agent("rig-a", broker)
        broker.wait_rigs(["rig-a"])
        agent.wait_log(r"tls full handshake with 127\.0\.0\.1:%d" % port)
        mark = agent.log_size()
        broker.kill()
        broker = self.lab.broker(name="broker-2", listen_port=port, tls_ticket_key_file=key_file)
        broker.wait_rigs(["rig-a"], timeout=20)
        agent.wait_log(r"tls session resumed with 127\.0\.0\.1:%d" % port, start=mark)
        self.assertEqual(broker.run("rig-a", "dmesg", {"lines": "5"})["state"], "succeeded")

    def test_a_restarted_agent_resumes_unless_its_certificate_changed(self):
        key_file = self.lab.path("ticket.key")
        port = free_port()
        broker = self.lab.broker(listen_port=port, tls_ticket_key_file=key_file)
        state = self.lab.path("state-rig-a")
        sessions = os.path.join(state, "tls-sessions")
        agent = self.lab.agent("rig-a", broker, state_dir=state)
        broker.wait_rigs(["rig-a"])
        agent.wait_log(r"tls full handshake with 127\.0\.0\.1:%d" % port)
        wait_for(lambda: os.path.exists(sessions), 10, what="the agent's tls-sessions file")
        self.assertEqual(stat.S_IMODE(os.stat(sessions).st_mode), 0o600)

        def restart(name):
            self.assertEqual(self.lab_agent.stop(), 0)
            wait_for(lambda: "rig-a" not in broker.rigs(), 10, what="rig-a gone")
            self.lab_agent = self.lab.agent("rig-a", broker, state_dir=state, name=name)
            broker.wait_rigs(["rig-a"], timeout=20)
            return self.lab_agent

        # A restart (an upgrade, a reboot) offers the session kept in the state directory.
        self.lab_agent = agent
        again = restart("agent-rig-a-2")
        again.wait_log(r"tls session resumed with 127\.0\.0\.1:%d" % port)
        self.assertEqual(broker.run("rig-a", "dmesg", {"lines": "5"})["state"], "succeeded")

        # A rig whose certificate was replaced does not offer a session of the old one.
        crt, key = self.lab.certs.rig("rig-a")
        os.rename(crt, crt + ".old")
        os.rename(key, key + ".old")
        self.lab.certs.rig("rig-a")
        third = restart("agent-rig-a-3")
        third.wait_log(r"tls full handshake with 127\.0\.0\.1:%d" % port)
        self.assertNotRegex(third.log(), r"tls session resumed")
        self.assertEqual(broker.run("rig-a", "dmesg", {"lines": "5"})["state"], "succeeded")

    def test_a_long_lived_connection_gets_a_fresh_ticket(self):
        # Lifetime 60 s: the ticket from the handshake is due for renewal after 30 s, and
        # the next ping carries a new one (a rig connected for days can still resume).
        key_file = self.lab.path("ticket.key")
        broker = self.lab.broker(tls_ticket_key_file=key_file, tls_ticket_lifetime_s=60,
                                 ping_interval_ms=1000, pong_timeout_ms=800)
        sim = self.rigsim(broker, 1, self.cert_dir(["rig-00000"]))
        first = sim.wait(lambda s: s["connected"] == 1 and s["tls_tickets"] >= 1, 20, "rig connected")
        self.assertEqual(first["tls_tickets"], 1, first)
        later = sim.wait(lambda s: s["tls_tickets"] >= 2, 45, "a second ticket on the same connection")
        self.assertEqual(later["connects"], first["connects"], later)   # same connection
        self.assertEqual(later["connected"], 1, later)
        # ... and the rig resumes with it after a restart.
        port = broker.listen_port
        broker.kill()
        sim.wait(lambda s: s["connected"] == 0, 10, "rig notices the broker is gone")
        self.lab.broker(name="broker-2", listen_port=port, tls_ticket_key_file=key_file,
                        tls_ticket_lifetime_s=60)
        back = sim.wait(lambda s: s["connected"] == 1, 20, "rig back")
        self.assertEqual(back["tls_resumed"], 1, back)

    def test_without_a_key_file_no_session_is_resumed(self):
        port = free_port()
        broker = self.lab.broker(listen_port=port)
        sim = self.rigsim(broker, 2, self.cert_dir(["rig-00000", "rig-00001"]))
        sim.wait(lambda s: s["connected"] == 2, 20, "rigs connected")
        broker.kill()
        sim.wait(lambda s: s["connected"] == 0, 10, "rigs notice the broker is gone")
        broker = self.lab.broker(name="broker-2", listen_port=port)
        after = sim.wait(lambda s: s["connected"] == 2, 20, "rigs back")
        self.assertEqual(after["tls_resumed"], 0, after)

    def test_a_key_file_readable_by_others_is_refused(self):
        key_file = self.lab.path("ticket.key")
        with open(key_file, "wb") as f:
            f.write(os.urandom(80))
        os.chmod(key_file, 0o644)
        proc = self.lab.process("broker-bad", [
            binary("fleetlink-broker"), "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0",
            "--cert", self.lab.certs.broker_cert, "--key", self.lab.certs.broker_key,
            "--ca", self.lab.certs.ca, "--tls-ticket-key-file", key_file,
            "--state-dir", self.lab.path("broker-bad-state")])
        wait_for(lambda: not proc.alive(), 10, what="broker exits")
        self.assertNotEqual(proc.proc.returncode, 0)
        self.assertIn("chmod 600", proc.log())


if __name__ == "__main__":
    unittest.main()
