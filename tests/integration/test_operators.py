"""Operators and roles of the control API (issue 14 point 6), with a real broker
and agent on loopback: tokens from an operators file (stored hashed), viewer vs
operator, the operator recorded on commands and jobs, the audit log, refusing an
open API beyond loopback, HTTPS on the control port (with fleetctl --ca), and
/metrics left open by --metrics-open."""
import asyncio
import http.client
import json
import os
import re
import ssl
import subprocess
import unittest

import websockets

import harness
from test_control_stream import exchange, send

ALICE = "alice-token-7f3c"   # operator
VIEWER = "grafana-token-19ab"  # viewer


def hash_token(token):
    r = subprocess.run([harness.binary("fleetlink-broker"), "--hash-token"], input=token + "\n",
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


class TestOperators(harness.LabTestCase):
    def setUp(self):
        super().setUp()
        self.operators = self.lab.path("operators")
        with open(self.operators, "w") as f:
            f.write("# name role hash\n\n")
            f.write(f"alice   operator {hash_token(ALICE)}\n")
            f.write(f"grafana\tviewer\t{hash_token(VIEWER)}  # dashboards\n")
        self.audit = self.lab.path("audit.log")

    def audit_lines(self):
        if not os.path.exists(self.audit):
            return []
        with open(self.audit) as f:
            return [line.rstrip("\n") for line in f]

    def start(self, **kw):
        opts = {"operators_file": self.operators, "audit_log": self.audit}
        opts.update(kw)
        return self.lab.broker(**opts)

    def test_hash_token_prints_the_sha256_and_the_file_keeps_only_hashes(self):
        h = hash_token("test")
        # SHA-256("test"), a known vector.
        self.assertEqual(h, "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
        with open(self.operators) as f:
            text = f.read()
        self.assertNotIn(ALICE, text)
        self.assertNotIn(VIEWER, text)
        r = subprocess.run([harness.binary("fleetlink-broker"), "--hash-token"], input="",
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("no token", r.stderr)

    def test_viewer_reads_but_gets_403_on_a_post_and_a_wrong_token_401(self):
        broker = self.start()
        self.lab.agent("rig-a", broker)
        harness.wait_for(
            lambda: "rig-a" in {r["rig_id"] for r in broker.api("GET", "/v1/rigs", token=ALICE)[1]["rigs"]},
            15, what="rig-a")
        status, body = broker.api("GET", "/v1/rigs", token=VIEWER)
        self.assertEqual(status, 200, body)
        self.assertEqual(broker.api("GET", "/metrics", token=VIEWER)[0], 200)
        status, body = broker.api("POST", "/v1/rigs/rig-a/commands", {"kind": "dmesg"}, token=VIEWER)
        self.assertEqual(status, 403, body)
        self.assertEqual(body, {"error": "forbidden",
                                "detail": "operator grafana has role viewer; this needs operator"})
        for path in ("/v1/admin/drain", "/v1/rigs/rig-a/reconnect", "/v1/jobs"):
            self.assertEqual(broker.api("POST", path, {}, token=VIEWER)[0], 403, path)
        status, body = broker.api("GET", "/v1/rigs", token="not-a-token")
        self.assertEqual(status, 401, body)
        self.assertEqual(body["reason"], "bad_token")
        status, body = broker.api("GET", "/v1/rigs", token="")
        self.assertEqual(status, 401, body)
        self.assertEqual(body["reason"], "missing_token")
        # The refused POSTs are audited too, with who tried.
        lines = self.audit_lines()
        forbidden = [l for l in lines if "status=403" in l]
        self.assertEqual(len(forbidden), 4, lines)
        self.assertIn('operator=grafana role=viewer peer=127.0.0.1 request="POST /v1/rigs/rig-a/commands" '
                      'target=rig:rig-a status=403 result=error:forbidden', forbidden[0])
        self.assertTrue(broker.alive())

    def test_an_operators_command_and_job_record_the_name_and_the_audit_log_says_so(self):
        broker = self.start()
        self.lab.agent("rig-a", broker)
        harness.wait_for(lambda: broker.api("GET", "/v1/rigs/rig-a", token=ALICE)[0] == 200, 15, what="rig-a")
        status, body = broker.api("POST", "/v1/rigs/rig-a/commands", {"kind": "dmesg", "args": {"lines": "1"}},
                                  token=ALICE)
        self.assertEqual(status, 202, body)
        cmd_id = body["cmd_id"]
        status, cmd = broker.api("GET", f"/v1/commands/{cmd_id}", token=VIEWER)
        self.assertEqual(status, 200, cmd)
        self.assertEqual(cmd["operator"], "alice")
        line = harness.wait_for(lambda: next((l for l in self.audit_lines() if cmd_id in l), None), 5,
                                what="the audit line")
        self.assertRegex(line, r"^time=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z operator=alice role=operator "
                               r"peer=127\.0\.0\.1 request=\"POST /v1/rigs/rig-a/commands\" target=rig:rig-a "
                               r"status=202 result=cmd_id:" + re.escape(cmd_id) + "$")
        # A job: its record and each of its commands.
        status, job = broker.api("POST", "/v1/jobs", {"kind": "dmesg", "targets": {"ids": ["rig-a"]}},
                                 token=ALICE)
        self.assertEqual(status, 202, job)
        self.assertEqual(job["operator"], "alice")
        job_cmd = job["rigs"][0]["cmd_id"]
        self.assertEqual(broker.api("GET", f"/v1/commands/{job_cmd}", token=ALICE)[1]["operator"], "alice")
        self.assertEqual(broker.api("GET", f"/v1/jobs/{job['job_id']}", token=VIEWER)[1]["operator"], "alice")
        harness.wait_for(lambda: any(f"result=job_id:{job['job_id']}" in l for l in self.audit_lines()), 5,
                         what="the job's audit line")
        # The control stream is the operator's too, and audited per send.
        lines = asyncio.run(exchange(broker, [send("s1", "rig-a", "dmesg") + "\n"],
                                     lambda ls: any(l["op"] == "done" for l in ls), token=ALICE))
        stream_cmd = by_op(lines, "queued")["cmd_id"]
        self.assertEqual(broker.api("GET", f"/v1/commands/{stream_cmd}", token=ALICE)[1]["operator"], "alice")
        line = harness.wait_for(lambda: next((l for l in self.audit_lines() if stream_cmd in l), None), 5,
                                what="the stream's audit line")
        self.assertIn('operator=alice role=operator peer=127.0.0.1 request="stream send" target=rig:rig-a '
                      f'status=queued result=cmd_id:{stream_cmd}', line)
        # A viewer cannot open the stream (it sends commands).
        uri = f"ws://{broker.control_host}:{broker.control_port}/v1/stream"

        async def viewer_stream():
            async with websockets.connect(uri, subprotocols=["fleetlink-stream"], open_timeout=5,
                                          extra_headers={"Authorization": f"Bearer {VIEWER}"}) as ws:
                await ws.send(send("v", "rig-a", "dmesg") + "\n")
                return await asyncio.wait_for(ws.recv(), 5)

        with self.assertRaises((websockets.exceptions.InvalidHandshake, websockets.exceptions.ConnectionClosed,
                                OSError, EOFError)):
            asyncio.run(viewer_stream())
        # GETs are not audited: every line is a mutating call.
        for l in self.audit_lines():
            self.assertRegex(l, r'request="(POST |stream send)')

    def test_the_old_control_token_is_operator_token(self):
        broker = self.lab.broker(control_token="s3cret")  # no audit file: the broker's log
        self.lab.agent("rig-a", broker)
        broker.wait_rigs(["rig-a"])
        status, body = broker.send("rig-a", "dmesg", {"lines": 1})
        self.assertEqual(status, 202, body)
        self.assertEqual(broker.command(body["cmd_id"])["operator"], "token")
        broker.wait_log(r"audit: time=\S+ operator=token role=operator peer=127\.0\.0\.1 "
                        r"request=\"POST /v1/rigs/rig-a/commands\" target=rig:rig-a status=202 result=cmd_id:"
                        + body["cmd_id"], timeout=5)

    def test_an_open_api_has_no_operator(self):
        broker = self.lab.broker()
        self.lab.agent("rig-a", broker)
        broker.wait_rigs(["rig-a"])
        status, body = broker.send("rig-a", "dmesg", {"lines": 1})
        self.assertEqual(status, 202, body)
        self.assertIsNone(broker.command(body["cmd_id"])["operator"])
        broker.wait_log(r"audit: time=\S+ operator=- role=- peer=127\.0\.0\.1 ", timeout=5)

    def test_an_open_api_beyond_loopback_is_refused_unless_control_open(self):
        base = [harness.binary("fleetlink-broker"), "--listen", "127.0.0.1:0", "--cert", self.lab.certs.broker_cert,
                "--key", self.lab.certs.broker_key, "--ca", self.lab.certs.ca,
                "--state-dir", self.lab.path("open-state"), "--control", "0.0.0.0:0"]
        for extra in ([], ["--check-config"]):
            r = subprocess.run(base + extra, capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, (extra, r.stdout, r.stderr))
            self.assertIn("0.0.0.0:0 refused: it is not loopback and the control API has no token", r.stderr)
            self.assertIn("control-open", r.stderr)
        # Only checked (no socket is opened beyond loopback by this test).
        r = subprocess.run(base + ["--control-open", "--check-config"], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("warning:", r.stderr)
        r = subprocess.run(base + ["--operators-file", self.operators, "--check-config"], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_a_malformed_operators_file_stops_the_broker_naming_file_and_line(self):
        bad = self.lab.path("bad-operators")
        with open(bad, "w") as f:
            f.write(f"alice operator {hash_token(ALICE)}\n# fine\nbob admin {hash_token('x')}\ncarol viewer md5:00\n")
        r = subprocess.run([harness.binary("fleetlink-broker"), "--cert", self.lab.certs.broker_cert,
                            "--key", self.lab.certs.broker_key, "--ca", self.lab.certs.ca,
                            "--state-dir", self.lab.path("bad-state"), "--operators-file", bad, "--check-config"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"{bad}:3: role 'admin' is not viewer or operator", r.stderr)
        self.assertIn(f"{bad}:4: the token hash must start with 'sha256:'", r.stderr)

    def test_https_control_with_fleetctl_ca(self):
        broker = self.start(control_cert=self.lab.certs.broker_cert, control_key=self.lab.certs.broker_key)
        self.lab.agent("rig-a", broker)
        ctx = ssl.create_default_context(cafile=self.lab.certs.ca)

        def get(path, token):
            conn = http.client.HTTPSConnection("127.0.0.1", broker.control_port, context=ctx, timeout=10)
            try:
                conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
                resp = conn.getresponse()
                return resp.status, json.loads(resp.read())
            finally:
                conn.close()

        harness.wait_for(lambda: get("/v1/rigs/rig-a", VIEWER)[0] == 200, 15, what="rig-a over HTTPS")
        # Plain HTTP on that port is not served.
        with self.assertRaises((http.client.HTTPException, ConnectionError, OSError)):
            status, _ = broker.api("GET", "/healthz")
            if status >= 400:
                raise ConnectionError(status)
        url = f"https://127.0.0.1:{broker.control_port}"
        fleetctl = harness.binary("fleetctl")
        r = subprocess.run([fleetctl, "--control", url, "--token", ALICE, "--ca", self.lab.certs.ca,
                            "send", "rig-a", "dmesg", "--wait"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, (r.stdout, r.stderr))
        r = subprocess.run([fleetctl, "--control", url, "--token", ALICE, "--ca", self.lab.certs.ca, "rigs"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("rig-a", r.stdout)
        # Without the CA the broker's certificate is not trusted.
        r = subprocess.run([fleetctl, "--control", url, "--token", ALICE, "rigs"], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "SSL_CERT_FILE": os.devnull, "SSL_CERT_DIR": os.devnull})
        self.assertNotEqual(r.returncode, 0, r.stdout)
        # fleetctl's POST over HTTPS, audited with its operator and peer.
        self.assertTrue(any('operator=alice role=operator peer=127.0.0.1 request="POST /v1/rigs/rig-a/commands"' in l
                            for l in self.audit_lines()), self.audit_lines())

    def test_metrics_needs_a_token_unless_metrics_open(self):
        broker = self.start()
        self.assertEqual(broker.api("GET", "/metrics", token="")[0], 401)
        self.assertEqual(broker.api("GET", "/metrics", token=VIEWER)[0], 200)
        broker.stop()
        broker = self.start(metrics_open=True, name="broker2")
        status, text = broker.api("GET", "/metrics", token="")
        self.assertEqual(status, 200)
        self.assertIn("fleetlink_", text)
        # Only /metrics: the rest still needs a token.
        self.assertEqual(broker.api("GET", "/v1/rigs", token="")[0], 401)


def by_op(lines, op):
    return next(l for l in lines if l["op"] == op)


if __name__ == "__main__":
    unittest.main()
