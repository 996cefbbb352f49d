"""Artifacts (issue 18): big output off the command channel.

A real broker and real agents with certificates made by the test. A suite's full
output (output.log) and the files its `artifacts` globs match are uploaded by the
agent over HTTPS with its client certificate to the broker's artifact endpoint on
the rig port, never over the command WebSocket; the RESULT names them (name, size,
sha256) and operators read them from the control API and fleetctl. A 100 MB log
arrives byte-identical while the rig's other commands keep flowing. Bad uploads
(over the limit, another rig's certificate, an unknown or finished command, a cut
off body, a wrong digest, a full disk) get a clear answer and leave nothing
half-stored, and a full disk keeps commands flowing.
"""
import hashlib
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
import unittest

import harness
from broker_rawclient import uuid7

BIG_PIECES = 25                      # the big suite writes its ~100 MB in pieces over a few seconds
BIG_PIECE_RANDOM = 3 * 1024 * 1024   # base64 makes 4 MiB (and newlines) of each


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def download(broker, path, out_path):
    """GET path from the control API into out_path, streamed; (status, headers)."""
    conn = http.client.HTTPConnection(broker.control_host, broker.control_port, timeout=60)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        with open(out_path, "wb") as f:
            while True:
                block = resp.read(1 << 20)
                if not block:
                    break
                f.write(block)
        return resp.status, dict(resp.getheaders())
    finally:
        conn.close()


class RigHttps:
    """A raw HTTPS client on the rig port, holding a rig's certificate."""

    def __init__(self, lab, broker, rig_id):
        cert, key = lab.certs.rig(rig_id)
        self.ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=lab.certs.ca)
        self.ctx.check_hostname = False
        self.ctx.load_cert_chain(cert, key)
        self.port = broker.listen_port

    def connect(self):
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=20)
        return self.ctx.wrap_socket(raw)

    def post(self, cmd_id, name, body, sha=None, declared=None, send=None):
        """(status, parsed answer). declared: the Content-Length to claim; send: how much of body to write."""
        sha = sha or hashlib.sha256(body).hexdigest()
        declared = len(body) if declared is None else declared
        s = self.connect()
        try:
            head = (f"POST /v1/artifacts/{cmd_id}/{name}?sha256={sha} HTTP/1.1\r\n"
                    f"Host: 127.0.0.1\r\nContent-Length: {declared}\r\n"
                    "Content-Type: application/octet-stream\r\n\r\n").encode()
            s.sendall(head)
            try:
                s.sendall(body if send is None else body[:send])
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                pass  # refused before the body: the answer is already on its way
            return read_answer(s)
        finally:
            s.close()


def read_answer(s):
    data = b""
    s.settimeout(20)
    while True:
        try:
            block = s.recv(65536)
        except (ConnectionResetError, ssl.SSLError, socket.timeout):
            break
        if not block:
            break
        data += block
        if b"\r\n\r\n" in data:
            head, _, rest = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v.strip())
            if len(rest) >= length:
                break
    if not data:
        return None, None
    head, _, rest = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    try:
        return status, json.loads(rest)
    except ValueError:
        return status, rest


def incoming_files(broker):
    d = os.path.join(broker.state_dir, "artifacts", ".incoming")
    return os.listdir(d) if os.path.isdir(d) else []


class ArtifactLab:
    def __init__(self, lab):
        self.cwd = lab.path("suite-cwd")
        os.makedirs(self.cwd)
        self.truth = lab.path("big-truth.log")
        self.suites = {
            "junit": {"argv": ["/bin/sh", "-c",
                               "echo first line; mkdir -p out; "
                               "printf '<testsuite tests=\"1\"/>' > out/junit.xml; "
                               "head -c 3000 /dev/urandom > out/core.dump; echo last line"],
                      "cwd": self.cwd, "artifacts": ["out/*.xml", "out/core.*"]},
            "big": {"argv": ["/bin/sh", "-c",
                             f"for i in $(seq {BIG_PIECES}); do head -c {BIG_PIECE_RANDOM} /dev/urandom "
                             f"| base64 -w 76; sleep 0.2; done | tee {self.truth}"],
                    "timeout_s": 600},
            "long": {"argv": ["/bin/sh", "-c", "echo started; exec sleep 600"], "timeout_s": 600},
            "nolog": {"argv": ["/bin/sh", "-c", "echo nothing kept"], "output_artifact": False},
        }
        self.path = lab.path("suites.json")
        with open(self.path, "w") as f:
            json.dump({"suites": self.suites}, f)


class ArtifactsTest(harness.LabTestCase):
    def setUp(self):
        super().setUp()
        self.alab = ArtifactLab(self.lab)
        self.broker = self.lab.broker()
        self.agent = self.lab.agent("rig-art", self.broker, suites=self.alab.path)
        self.other = self.lab.agent("rig-other", self.broker)
        self.broker.wait_rigs(["rig-art", "rig-other"])

    def test_suite_output_and_globbed_files_arrive_with_their_digests(self):
        v = self.broker.run("rig-art", "suite", {"suite": "junit"}, timeout=30)
        self.assertEqual(v["state"], "succeeded", v)
        arts = {a["name"]: a for a in v["artifacts"]}
        self.assertEqual(set(arts), {"output.log", "junit.xml", "core.dump"}, v)
        expected = {
            "junit.xml": read_bytes(os.path.join(self.alab.cwd, "out", "junit.xml")),
            "core.dump": read_bytes(os.path.join(self.alab.cwd, "out", "core.dump")),
            "output.log": b"first line\nlast line\n",
        }
        for name, data in expected.items():
            self.assertEqual(arts[name]["size"], len(data), name)
            self.assertEqual(arts[name]["sha256"], hashlib.sha256(data).hexdigest(), name)
            self.assertEqual(arts[name]["rig_id"], "rig-art")
            out = self.lab.path(f"got-{name}")
            status, headers = download(self.broker, arts[name]["href"], out)
            self.assertEqual(status, 200)
            self.assertEqual(read_bytes(out), data, name)
            self.assertEqual(headers.get("X-Fleetlink-Sha256"), arts[name]["sha256"])
        # The list route says the same; the agent kept nothing of its own once uploaded.
        status, listing = self.broker.api("GET", f"/v1/commands/{v['cmd_id']}/artifacts")
        self.assertEqual(status, 200)
        self.assertEqual(sorted(a["name"] for a in listing["artifacts"]), sorted(arts))
        self.assertFalse(os.path.exists(os.path.join(self.agent.state_dir, "artifacts", v["cmd_id"], "output.log")))
        # The bytes went beside the WebSocket, not through it: the agent's log names the upload.
        self.agent.wait_log(r"artifact output.log of " + v["cmd_id"] + r" stored")
        # Unknown names answer 404, and a suite that keeps no log attaches none.
        status, _ = self.broker.api("GET", f"/v1/commands/{v['cmd_id']}/artifacts/none.txt")
        self.assertEqual(status, 404)
        n = self.broker.run("rig-art", "suite", {"suite": "nolog"}, timeout=30)
        self.assertEqual(n["artifacts"], [])

        # fleetctl lists them and fetches one, checking its digest.
        def fleetctl(*args):
            return subprocess.run([harness.binary("fleetctl"), "--control", self.broker.control_url, *args],
                                  capture_output=True, text=True, timeout=60)
        r = fleetctl("artifacts", v["cmd_id"])
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in arts:
            self.assertIn(name, r.stdout)
            self.assertIn(arts[name]["sha256"], r.stdout)
        out = self.lab.path("fetched-core.dump")
        r = fleetctl("fetch", v["cmd_id"], "core.dump", "-o", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("(checked)", r.stderr)
        self.assertEqual(read_bytes(out), expected["core.dump"])
        r = fleetctl("fetch", v["cmd_id"], "nope.bin", "-o", out + "2")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("no artifact named nope.bin", r.stderr)
        self.assertFalse(os.path.exists(out + "2"))

    def test_a_100mb_log_arrives_byte_identical_while_commands_flow(self):
        status, body = self.broker.send("rig-art", "suite", {"suite": "big"})
        self.assertEqual(status, 202, body)
        big = body["cmd_id"]
        # While the suite streams and its log uploads, the rig answers other commands.
        latencies = []
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            d = self.broker.run("rig-art", "dmesg", {"lines": "5"}, timeout=60)
            latencies.append(time.monotonic() - t0)
            self.assertEqual(d["state"], "succeeded", d)
            if self.broker.command(big)["state"] not in ("queued", "sent", "acked", "running"):
                break
            time.sleep(0.2)
        v = self.broker.wait_command(big, timeout=600)
        self.assertEqual(v["state"], "succeeded", v)
        self.assertGreaterEqual(len(latencies), 3, "the big suite ended before other commands could be timed")
        self.assertLess(max(latencies), 30, latencies)
        log = {a["name"]: a for a in v["artifacts"]}["output.log"]
        truth_sha = sha256_file(self.alab.truth)
        self.assertEqual(log["size"], os.path.getsize(self.alab.truth))
        self.assertGreater(log["size"], 99 * 1024 * 1024)
        self.assertEqual(log["sha256"], truth_sha)
        out = self.lab.path("downloaded.log")
        status, _ = download(self.broker, log["href"], out)
        self.assertEqual(status, 200)
        self.assertEqual(sha256_file(out), truth_sha)
        # Only a 64 KiB head travelled in the RESULT.
        self.assertLessEqual(len(v["result"]["output"]), 64 * 1024 * 4 // 3 + 4)

    def test_bad_uploads_are_refused_and_leave_nothing(self):
        status, body = self.broker.send("rig-art", "suite", {"suite": "long"})
        self.assertEqual(status, 202, body)
        running = body["cmd_id"]
        self.broker.wait_command(running, states=("running",), timeout=30)
        art = RigHttps(self.lab, self.broker, "rig-art")
        other = RigHttps(self.lab, self.broker, "rig-other")
        data = os.urandom(200_000)
        # Another rig's certificate cannot add to this rig's command.
        st, ans = other.post(running, "x.bin", data)
        self.assertEqual((st, ans["error"]), (403, "wrong_rig"), ans)
        # An unknown command, a bad name, a bad digest.
        st, ans = art.post(uuid7(), "x.bin", data)
        self.assertEqual((st, ans["error"]), (404, "unknown_command"), ans)
        st, ans = art.post(running, ".hidden", data)
        self.assertEqual((st, ans["error"]), (400, "bad_name"), ans)
        st, ans = art.post(running, "x.bin", data, sha=hashlib.sha256(b"other").hexdigest())
        self.assertEqual((st, ans["error"]), (422, "digest_mismatch"), ans)
        # Over the per-artifact limit (1 GiB by default): refused before the body is read.
        st, ans = art.post(running, "huge.bin", b"", declared=(1 << 30) + 1)
        self.assertEqual((st, ans["error"]), (413, "too_large"), ans)
        # Cut off midway: nothing stored, nothing left in .incoming.
        s = art.connect()
        s.sendall((f"POST /v1/artifacts/{running}/cut.bin?sha256={hashlib.sha256(data).hexdigest()} HTTP/1.1\r\n"
                   f"Host: x\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data[:50_000])
        time.sleep(0.5)
        s.close()
        harness.wait_for(lambda: not incoming_files(self.broker), 10, what=".incoming empty")
        self.broker.wait_log(r"artifact upload cut off cmd=" + running + r" name=cut.bin")
        st, listing = self.broker.api("GET", f"/v1/commands/{running}/artifacts")
        self.assertEqual(listing["artifacts"], [])
        # A good one for the running command goes in; once the command is finished, no more.
        st, ans = art.post(running, "good.bin", data)
        self.assertEqual((st, ans["size"]), (201, len(data)), ans)
        st, _ = self.broker.api("POST", f"/v1/commands/{running}/cancel")
        self.assertIn(st, (200, 202))
        self.broker.wait_command(running, timeout=30)
        st, ans = art.post(running, "late.bin", data)
        self.assertEqual((st, ans["error"]), (409, "command_finished"), ans)
        # The cancelled suite's own log came before its RESULT, so it is there too.
        st, listing = self.broker.api("GET", f"/v1/commands/{running}/artifacts")
        self.assertEqual([a["name"] for a in listing["artifacts"]], ["good.bin", "output.log"])
        # A plain (non-TLS) client is never asked: the rig port needs a certificate.
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.lab.certs.ca)
        ctx.check_hostname = False
        raw = socket.create_connection(("127.0.0.1", self.broker.listen_port), timeout=5)
        with self.assertRaises((ssl.SSLError, ConnectionResetError, OSError)):
            with ctx.wrap_socket(raw) as t:
                t.sendall(b"POST /v1/artifacts/x/y HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
                if not t.recv(100):
                    raise ConnectionResetError("closed")
        raw.close()


class FullDiskTest(harness.LabTestCase):
    """The artifact directory on a 2 MiB tmpfs: an upload that fills it is refused
    507 with nothing half-stored, and the broker keeps serving commands."""

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            self.fail("this test mounts a small tmpfs and needs root (CI runs as root)")
        self.mnt = self.lab.path("small-disk")
        os.makedirs(self.mnt)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", self.mnt], check=True)
        self.addCleanup(lambda: subprocess.run(["umount", "-l", self.mnt], check=False))
        self.alab = ArtifactLab(self.lab)
        self.broker = self.lab.broker(artifact_dir=self.mnt)
        self.agent = self.lab.agent("rig-full", self.broker, suites=self.alab.path)
        self.broker.wait_rigs(["rig-full"])

    def test_full_disk_refuses_uploads_and_keeps_serving_commands(self):
        status, body = self.broker.send("rig-full", "suite", {"suite": "long"})
        self.assertEqual(status, 202, body)
        running = body["cmd_id"]
        self.broker.wait_command(running, states=("running",), timeout=30)
        art = RigHttps(self.lab, self.broker, "rig-full")
        small = os.urandom(500_000)
        st, ans = art.post(running, "fits.bin", small)
        self.assertEqual(st, 201, ans)
        big = os.urandom(3 * 1024 * 1024)
        st, ans = art.post(running, "too-big-for-the-disk.bin", big)
        self.assertEqual((st, ans["error"]), (507, "store_full"), ans)
        self.assertEqual(os.listdir(os.path.join(self.mnt, ".incoming")), [])
        st, listing = self.broker.api("GET", f"/v1/commands/{running}/artifacts")
        self.assertEqual([a["name"] for a in listing["artifacts"]], ["fits.bin"])
        # Commands keep flowing on the same broker and rig.
        for _ in range(3):
            d = self.broker.run("rig-full", "dmesg", {"lines": "3"}, timeout=30)
            self.assertEqual(d["state"], "succeeded", d)


if __name__ == "__main__":
    unittest.main()
