"""Reloading the broker's trust without a restart (issue 15 point 1), with a real
broker and real agents on loopback over mutual TLS, and certificates and CRLs
made by the test (fleetlink-lab-ca, on the openssl command line).

SIGHUP, POST /v1/admin/reload and `fleetctl reload` re-read the CA bundle, the
CRLs (--crl), the broker's certificate and key and the operators file. Healthy
connections stay (the same connection: no new WELCOME, the same connected_at);
a rig whose certificate is now revoked, or no longer chains to the CA bundle, is
closed 4401 within seconds and cannot come back (not even by resuming a TLS
session ticket it holds); a reload that fails changes nothing and says why."""
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time

import harness
from harness import LAB_CA, LabTestCase, wait_for

ALICE = "alice-reload-token-51"   # operator
VIEWER = "viewer-reload-token-77"  # viewer
CAROL = "carol-reload-token-93"   # added by a reload


def hash_token(token):
    r = subprocess.run([harness.binary("fleetlink-broker"), "--hash-token"], input=token + "\n",
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def lab_ca(*args):
    subprocess.run([LAB_CA, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)


def der_of(pem_path):
    with open(pem_path) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


class BrokerReload(LabTestCase):
    def setUp(self):
        super().setUp()
        certs = self.lab.certs
        # The broker's own copies: the test rewrites them as an operator would.
        self.tls = self.lab.path("broker-tls")
        os.makedirs(self.tls)
        self.cert = os.path.join(self.tls, "broker.crt")
        self.key = os.path.join(self.tls, "broker.key")
        self.ca = os.path.join(self.tls, "ca.crt")
        shutil.copy(certs.broker_cert, self.cert)
        shutil.copy(certs.broker_key, self.key)
        shutil.copy(certs.ca, self.ca)
        # The lab CA's revocation list, empty for now.
        lab_ca("crl", certs.dir)
        self.crl = os.path.join(certs.dir, "crl.pem")

    # ---- helpers -------------------------------------------------------------
    def broker(self, **kw):
        opts = {"cert": self.cert, "key": self.key, "ca": self.ca, "crl": self.crl,
                "tls_ticket_key_file": self.lab.path("ticket.key")}
        opts.update(kw)
        return self.lab.broker(**opts)

    def agents(self, broker, *rig_ids):
        agents = {r: self.lab.agent(r, broker) for r in rig_ids}
        broker.wait_rigs(rig_ids, timeout=30)
        for a in agents.values():
            a.wait_log(r"welcome broker=", timeout=30)
        return agents

    @staticmethod
    def welcomes(agent):
        return len(re.findall(r"welcome broker=", agent.log()))

    def connections(self, broker, agents):
        """What shows a connection is the same one: its connected_at and the agent's WELCOME count."""
        rigs = broker.rigs()
        return {r: (rigs[r]["connected_at"], self.welcomes(a)) for r, a in agents.items() if r in rigs}

    def metric(self, broker, name):
        status, text = broker.api("GET", "/metrics")
        self.assertEqual(status, 200, text)
        m = re.search(r"^fleetlink_broker_" + re.escape(name) + r" (\S+)$", text, re.M)
        self.assertIsNotNone(m, f"{name} not in /metrics")
        return float(m.group(1))

    def served_certificate(self, broker):
        """The DER certificate a new TLS connection to the rig port is shown."""
        crt, key = self.lab.certs.rig("probe")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # the test compares the certificate itself
        ctx.load_cert_chain(crt, key)
        with socket.create_connection(("127.0.0.1", broker.listen_port), timeout=10) as raw:
            with ctx.wrap_socket(raw) as s:
                return s.getpeercert(binary_form=True)

    def fleetctl(self, broker, *args, token=None):
        argv = [harness.binary("fleetctl"), "--control", broker.control_url]
        if token:
            argv += ["--token", token]
        return subprocess.run(argv + list(args), capture_output=True, text=True, timeout=60)

    # ---- the tests -----------------------------------------------------------
    def test_sighup_with_a_revoked_rig_closes_it_4401_and_it_cannot_return_the_others_stay(self):
        broker = self.broker(drain_window_ms=200)
        agents = self.agents(broker, "rig-1", "rig-2", "rig-3")
        # rig-2 holds a session ticket from its connection (agents keep it in their state
        # directory): after the revocation it must not get back in by resuming it.
        wait_for(lambda: self.metric(broker, "tls_handshakes_full_total") >= 3, 10, what="3 full handshakes")
        # That ticket works while nothing is revoked: a forced reconnect resumes.
        status, body = broker.api("POST", "/v1/rigs/rig-2/reconnect")
        self.assertEqual(status, 200, body)
        wait_for(lambda: self.metric(broker, "tls_handshakes_resumed_total") >= 1, 15, what="rig-2 resumed")
        agents["rig-2"].wait_log(r"(?s)welcome broker=.*welcome broker=", timeout=15)
        broker.wait_rigs(["rig-2"], timeout=15)
        resumed = self.metric(broker, "tls_handshakes_resumed_total")
        before = self.connections(broker, agents)

        lab_ca("revoke", self.lab.certs.dir, "rig-2")
        mark = broker.log_size()
        t0 = time.monotonic()
        broker.signal(signal.SIGHUP)
        agents["rig-2"].wait_log(r"disconnected code=4401 \(identity_mismatch\) "
                                 r"reason=certificate no longer trusted: certificate revoked", timeout=10)
        self.assertLess(time.monotonic() - t0, 10)
        broker.wait_log(r"reload \(SIGHUP\): CRLs from .*crl\.pem: 1 listing 1 revoked serial", start=mark)
        broker.wait_log(r"closing rig=rig-2 .*code=4401 \(identity_mismatch\) certificate no longer trusted: "
                        r"certificate revoked", start=mark)
        self.assertTrue(broker.alive(), "SIGHUP must not stop the broker")

        # It keeps trying (backoff capped at 1 s) and is refused at the handshake every time.
        broker.wait_log(r"client certificate refused: /O=fleetlink/CN=rig-2 \(certificate revoked\)",
                        start=mark, timeout=10)
        time.sleep(3)
        self.assertNotIn("rig-2", broker.rigs())
        self.assertEqual(self.metric(broker, "tls_handshakes_resumed_total"), resumed)
        # The others: the very same connections.
        after = self.connections(broker, agents)
        for rig in ("rig-1", "rig-3"):
            self.assertEqual(after[rig], before[rig], f"{rig} was reconnected")
        self.assertEqual(self.metric(broker, "rigs_distrusted_total"), 1)
        self.assertEqual(self.metric(broker, 'reloads_total{result="ok"}'), 1)
        self.assertEqual(self.metric(broker, "reload_last_successful"), 1)

        # And it stays out across a restart of the broker too (the CRL is read at start-up).
        broker.stop()
        broker2 = self.broker(name="broker2", listen_port=broker.listen_port)
        broker2.wait_rigs(["rig-1", "rig-3"], timeout=30)
        broker2.wait_log(r"client certificate refused: /O=fleetlink/CN=rig-2 \(certificate revoked\)", timeout=10)
        self.assertNotIn("rig-2", broker2.rigs())

    def test_a_handshake_done_before_the_reload_is_checked_when_its_websocket_opens_after_it(self):
        """A connection whose TLS handshake was verified under the old CRL, and whose
        WebSocket upgrade comes after the reload, is not among the connections the
        reload re-checks: it is checked when it opens, and closed 4401."""
        broker = self.broker()
        crt, key = self.lab.certs.rig("rig-late")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(self.lab.certs.ca)
        ctx.check_hostname = False
        ctx.load_cert_chain(crt, key)
        with socket.create_connection(("127.0.0.1", broker.listen_port), timeout=10) as raw:
            with ctx.wrap_socket(raw) as tls:
                time.sleep(0.5)  # the broker has read and verified the certificate by now
                lab_ca("revoke", self.lab.certs.dir, "rig-late")
                mark = broker.log_size()
                broker.signal(signal.SIGHUP)
                broker.wait_log(r"reload \(SIGHUP\): CRLs from", start=mark)
                tls.sendall(("GET /agent HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                             "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                             "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: fleetlink.v1\r\n\r\n").encode())
                data = b""
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    head, sep, rest = data.partition(b"\r\n\r\n")
                    if sep and len(rest) >= 2 and len(rest) >= 2 + (rest[1] & 0x7F):
                        break
                    chunk = tls.recv(4096)
                    if not chunk:
                        break
                    data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 101"), data[:200])
        self.assertGreaterEqual(len(rest), 4, data)
        self.assertEqual(rest[0], 0x88, "a close frame")
        payload = rest[2:2 + (rest[1] & 0x7F)]
        self.assertEqual(int.from_bytes(payload[:2], "big"), 4401)
        self.assertEqual(payload[2:].decode(), "certificate no longer trusted: certificate revoked")
        self.assertEqual(self.metric(broker, "rigs_distrusted_total"), 1)

    def test_a_ca_bundle_without_the_rigs_ca_closes_every_rig_and_fleetctl_reload_brings_them_back(self):
        broker = self.broker(crl=None)
        agents = self.agents(broker, "rig-a", "rig-b")
        other = self.lab.path("other-ca")
        lab_ca("init", other, "--name", "another lab CA")
        shutil.copy(os.path.join(other, "ca.crt"), self.ca)

        status, body = broker.api("POST", "/v1/admin/reload")
        self.assertEqual(status, 200, body)
        self.assertTrue(body["reloaded"])
        self.assertTrue(any(line.startswith("CA bundle ") for line in body["changed"]), body)
        self.assertEqual(body["rigs_to_check"], 2)
        for a in agents.values():
            # (The agent sends its CA along with its certificate: that CA is no anchor now.)
            a.wait_log(r"disconnected code=4401 \(identity_mismatch\) reason=certificate no longer trusted: "
                       r"(unable to get local issuer certificate|self-signed certificate in certificate chain)",
                       timeout=10)
        wait_for(lambda: not broker.rigs(), 10, what="no rig connected")
        self.assertEqual(self.metric(broker, "rigs_distrusted_total"), 2)

        # The lab CA back, by fleetctl: the rigs return.
        shutil.copy(self.lab.certs.ca, self.ca)
        r = self.fleetctl(broker, "reload")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("reloaded:", r.stdout)
        self.assertIn("CA bundle ", r.stdout)
        broker.wait_rigs(["rig-a", "rig-b"], timeout=30)
        # Nothing changed: said so.
        r = self.fleetctl(broker, "reload")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("reloaded: nothing changed", r.stdout)
        self.assertEqual(self.metric(broker, 'reloads_total{result="ok"}'), 3)

    def test_a_failed_reload_keeps_everything_and_says_why_a_viewer_may_not_reload(self):
        operators = self.lab.path("operators")
        with open(operators, "w") as f:
            f.write(f"alice operator {hash_token(ALICE)}\ngrafana viewer {hash_token(VIEWER)}\n")
        broker = self.broker(operators_file=operators)
        broker.token = ALICE  # the harness's calls (rigs, metrics) are alice's
        agents = self.agents(broker, "rig-1")
        before = self.connections(broker, agents)
        original = self.served_certificate(broker)
        self.assertEqual(original, der_of(self.cert))

        # A viewer may not; nothing is reloaded, and the refusal is audited.
        status, body = broker.api("POST", "/v1/admin/reload", token=VIEWER)
        self.assertEqual(status, 403, body)
        self.assertEqual(body["error"], "forbidden")
        broker.wait_log(r'audit: .*operator=grafana role=viewer .*request="POST /v1/admin/reload" .*status=403')
        self.assertEqual(self.metric(broker, 'reloads_total{result="ok"}'), 0)

        # The key of another certificate.
        rig_crt, rig_key = self.lab.certs.rig("rig-1")
        shutil.copy(rig_key, self.key)
        mark = broker.log_size()
        status, body = broker.api("POST", "/v1/admin/reload", token=ALICE)
        self.assertEqual(status, 500, body)
        self.assertEqual(body["error"], "reload_failed")
        self.assertIn("is not the private key of --cert", body["detail"])
        broker.wait_log(r"reload \(POST /v1/admin/reload by alice\) failed, nothing changed .*"
                        r"is not the private key of --cert", start=mark)
        broker.wait_log(r'audit: .*operator=alice .*request="POST /v1/admin/reload" .*status=500 '
                        r'result=error:reload_failed', start=mark)
        self.assertEqual(self.metric(broker, 'reloads_total{result="failed"}'), 1)
        self.assertEqual(self.metric(broker, "reload_last_successful"), 0)
        # fleetctl says so too, and SIGHUP fails the same way.
        r = self.fleetctl(broker, "reload", token=ALICE)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("reload failed, the broker changed nothing: --key", r.stderr)
        broker.signal(signal.SIGHUP)
        broker.wait_log(r"reload \(SIGHUP\) failed", start=mark)

        # A CRL that is not one: refused as well (the key is still wrong: fix it first).
        shutil.copy(self.lab.certs.broker_key, self.key)
        with open(self.crl, "w") as f:
            f.write("-----BEGIN X509 CRL-----\nnot base64 at all\n-----END X509 CRL-----\n")
        status, body = broker.api("POST", "/v1/admin/reload", token=ALICE)
        self.assertEqual(status, 500, body)
        self.assertIn("is not PEM CRL(s)", body["detail"])
        self.assertEqual(self.metric(broker, 'reloads_total{result="failed"}'), 4)

        # Through all of it: the same certificate served, the same rig connection,
        # and a new rig still gets in under the old CRL.
        self.assertEqual(self.served_certificate(broker), original)
        self.assertEqual(self.connections(broker, agents), before)
        self.lab.agent("rig-new", broker)
        broker.wait_rigs(["rig-new"], timeout=30)

        # Fixed, and an operator added: the reload takes both.
        lab_ca("crl", self.lab.certs.dir)
        with open(operators, "a") as f:
            f.write(f"carol operator {hash_token(CAROL)}\n")
        self.assertEqual(broker.api("GET", "/v1/rigs", token=CAROL)[0], 401)
        status, body = broker.api("POST", "/v1/admin/reload", token=ALICE)
        self.assertEqual(status, 200, body)
        self.assertTrue(any("added carol" in line for line in body["changed"]), body)
        self.assertEqual(broker.api("GET", "/v1/rigs", token=CAROL)[0], 200)
        self.assertEqual(self.metric(broker, "reload_last_successful"), 1)
        self.assertEqual(self.connections(broker, agents), before)

    def test_the_control_token_file_is_read_again(self):
        token_file = self.lab.path("control-token")
        with open(token_file, "w") as f:
            f.write("first-token-0123\n")
        broker = self.broker(control_token_file=token_file)
        self.assertEqual(broker.api("GET", "/v1/rigs", token="first-token-0123")[0], 200)
        with open(token_file, "w") as f:
            f.write("  second-token-4567\n")
        status, body = broker.api("POST", "/v1/admin/reload", token="first-token-0123")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["changed"], ["operators: 1 operator(s) (was 1); new token for token"])
        self.assertEqual(broker.api("GET", "/v1/rigs", token="first-token-0123")[0], 401)
        self.assertEqual(broker.api("GET", "/v1/rigs", token="second-token-4567")[0], 200)
        # Emptied by mistake: refused, the token in use stays (an empty one would open the API).
        open(token_file, "w").close()
        status, body = broker.api("POST", "/v1/admin/reload", token="second-token-4567")
        self.assertEqual(status, 500, body)
        self.assertIn("is empty", body["detail"])
        self.assertEqual(broker.api("GET", "/v1/rigs", token="second-token-4567")[0], 200)

    def test_a_rotated_broker_certificate_is_served_to_new_connections(self):
        broker = self.broker()
        agents = self.agents(broker, "rig-1")
        before = self.connections(broker, agents)
        self.assertEqual(self.served_certificate(broker), der_of(self.cert))

        lab_ca("broker", self.lab.certs.dir, "broker-next")
        shutil.copy(os.path.join(self.lab.certs.dir, "broker-next.crt"), self.cert)
        shutil.copy(os.path.join(self.lab.certs.dir, "broker-next.key"), self.key)
        mark = broker.log_size()
        broker.signal(signal.SIGHUP)
        broker.wait_log(r"reload \(SIGHUP\): broker certificate .*CN=broker-next serial", start=mark)
        self.assertEqual(self.served_certificate(broker), der_of(self.cert))
        # The CAs did not change: nobody was re-checked or closed, and rig-1 kept its connection.
        self.assertEqual(self.connections(broker, agents), before)
        self.assertEqual(self.metric(broker, "rigs_distrusted_total"), 0)
        # A new rig verifies the new certificate (same lab CA) and gets in.
        self.lab.agent("rig-2", broker)
        broker.wait_rigs(["rig-1", "rig-2"], timeout=30)

    def test_check_config_refuses_a_crl_of_another_ca_or_an_expired_one_and_reads_a_crl_directory(self):
        other = self.lab.path("other-ca")
        lab_ca("init", other, "--name", "another lab CA")
        lab_ca("crl", other)
        foreign = os.path.join(other, "crl.pem")
        r = subprocess.run([harness.binary("fleetlink-broker"), "--cert", self.cert, "--key", self.key,
                            "--ca", self.ca, "--crl", foreign, "--state-dir", self.lab.path("st"),
                            "--check-config"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("error: --crl: CRL in '" + foreign + "' is issued by /O=fleetlink/CN=another lab CA, "
                      "which is not a CA of --ca", r.stderr)
        # A CRL past its nextUpdate: every rig of its CA would be refused.
        d = self.lab.certs.dir
        cnf = self.lab.path("expired-crl.cnf")
        with open(cnf, "w") as f:
            f.write(f"[ca]\ndefault_ca = lab\n[lab]\ndatabase = {d}/index.txt\ncrlnumber = {d}/crlnumber\n"
                    "default_md = sha256\n")
        expired = self.lab.path("expired-crl.pem")
        subprocess.run(["openssl", "ca", "-batch", "-config", cnf, "-keyfile", os.path.join(d, "ca.key"),
                        "-cert", os.path.join(d, "ca.crt"), "-gencrl", "-crlsec", "1", "-out", expired],
                       check=True, capture_output=True, timeout=60)
        time.sleep(2)
        r = subprocess.run([harness.binary("fleetlink-broker"), "--cert", self.cert, "--key", self.key,
                            "--ca", self.ca, "--crl", expired, "--state-dir", self.lab.path("st"),
                            "--check-config"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertRegex(r.stderr, r"error: --crl: CRL in '.*expired-crl\.pem' \(issuer /O=fleetlink/CN=fleetlink "
                                   r"lab CA\) expired at \S+ \(its nextUpdate\)")
        # A directory of CRLs: the lab's is read, a README beside it is not.
        d = self.lab.path("crl.d")
        os.makedirs(d)
        shutil.copy(self.crl, os.path.join(d, "lab.pem"))
        with open(os.path.join(d, "README"), "w") as f:
            f.write("CRLs of the lab CA\n")
        r = subprocess.run([harness.binary("fleetlink-broker"), "--cert", self.cert, "--key", self.key,
                            "--ca", self.ca, "--crl", d, "--state-dir", self.lab.path("st"),
                            "--check-config"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        broker = self.broker(crl=d)
        broker.wait_log(r"rig TLS: 1 CRL\(s\) from .*crl\.d, 0 revoked serial\(s\)")
        self.agents(broker, "rig-1")


if __name__ == "__main__":
    import unittest
    unittest.main()
