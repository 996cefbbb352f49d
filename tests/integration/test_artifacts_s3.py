"""Artifacts in an S3-compatible store (issue 18, point 2, the optional part).

A real broker configured with --artifact-s3-*, a real agent, and a real S3
server: s3rver (npm, installed by scripts/install-deps.sh into tests/s3 with
`npm ci`) on loopback with a bucket in a temporary directory. The agent asks the
broker where each artifact goes, PUTs it to the presigned URL the broker
answers, and the broker HEADs the object before it lists it; operators fetch it
through the broker (a 307 to a presigned GET) with fleetctl.

s3rver checks that the access key id is one of its accounts and that a
presigned URL has not expired, but it does not verify SigV4 signatures (its
source says "Signature version 4 calculation is unimplemented"). The
signatures themselves are checked against AWS's published example in
tests/unit/broker/s3/test_sigv4.cpp.
"""
import hashlib
import json
import os
import subprocess
import time
import unittest
import urllib.error
import urllib.request

import harness
from test_artifacts import RigHttps, read_answer, read_bytes

BUCKET = "fleet-artifacts"
S3RVER_JS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "s3", "node_modules", "s3rver", "bin",
                         "s3rver.js")


class S3Server:
    """s3rver on 127.0.0.1 with one bucket, its data in the lab."""

    def __init__(self, lab):
        if not os.path.exists(S3RVER_JS):
            raise AssertionError(f"s3rver is not installed ({S3RVER_JS} is missing): run scripts/install-deps.sh "
                                 "(npm ci in tests/s3)")
        self.dir = lab.path("s3-data")
        os.makedirs(self.dir)
        self.port = harness.free_port()
        self.proc = harness.Process(lab, "s3rver", ["node", S3RVER_JS, "-d", self.dir, "-a", "127.0.0.1",
                                                    "-p", str(self.port), "--configure-bucket", BUCKET,
                                                    "--no-vhost-buckets"])
        self.proc.wait_log(r"S3rver listening on", timeout=30)
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def object_file(self, key):
        """The file s3rver keeps an object's bytes in (filesystem store: <bucket>/<key>._S3rver_object)."""
        return os.path.join(self.dir, BUCKET, key + "._S3rver_object")

    def objects(self):
        out = []
        for root, _, files in os.walk(os.path.join(self.dir, BUCKET)):
            for f in files:
                if f.endswith("._S3rver_object"):
                    rel = os.path.relpath(os.path.join(root, f), os.path.join(self.dir, BUCKET))
                    out.append(rel[:-len("._S3rver_object")])
        return sorted(out)


class S3ArtifactLab:
    def __init__(self, lab):
        self.cwd = lab.path("suite-cwd")
        os.makedirs(self.cwd)
        suites = {
            "junit": {"argv": ["/bin/sh", "-c",
                               "echo first line; mkdir -p out; "
                               "printf '<testsuite tests=\"1\"/>' > out/junit.xml; "
                               "head -c 300000 /dev/urandom > out/core.dump; echo last line"],
                      "cwd": self.cwd, "artifacts": ["out/*.xml", "out/core.*"]},
            # 2 MiB: over a 1 MiB --artifact-max-mib.
            "oversize": {"argv": ["/bin/sh", "-c", "mkdir -p big; head -c 2097152 /dev/urandom > big/huge.bin; "
                                  "echo wrote it"],
                         "cwd": self.cwd, "artifacts": ["big/huge.bin"]},
            "long": {"argv": ["/bin/sh", "-c", "echo started; exec sleep 600"], "timeout_s": 600},
            "one": {"argv": ["/bin/sh", "-c", "echo just the log"]},
        }
        self.path = lab.path("suites.json")
        with open(self.path, "w") as f:
            json.dump({"suites": suites}, f)


def s3_broker(lab, s3, access_key="S3RVER", secret_key="S3RVER", **extra):
    ak = lab.path(f"s3-access-key-{access_key}")
    sk = lab.path(f"s3-secret-key-{access_key}")
    for path, value in ((ak, access_key), (sk, secret_key)):
        with open(path, "w") as f:
            f.write(value + "\n")
        os.chmod(path, 0o600)
    return lab.broker(artifact_s3_endpoint=s3.endpoint, artifact_s3_bucket=BUCKET,
                      artifact_s3_access_key_file=ak, artifact_s3_secret_key_file=sk,
                      artifact_s3_prefix="lab1", **extra)


class S3ArtifactsTest(harness.LabTestCase):
    def setUp(self):
        super().setUp()
        self.s3 = S3Server(self.lab)
        self.alab = S3ArtifactLab(self.lab)

    def fleetctl(self, broker, *args):
        return subprocess.run([harness.binary("fleetctl"), "--control", broker.control_url, *args],
                              capture_output=True, text=True, timeout=60)

    def test_suite_output_and_globbed_files_land_in_the_s3_store_byte_identical(self):
        broker = s3_broker(self.lab, self.s3)
        broker.wait_log(r"artifacts: rigs upload to the S3 store http://127\.0\.0\.1:\d+/" + BUCKET)
        agent = self.lab.agent("rig-s3", broker, suites=self.alab.path)
        broker.wait_rigs(["rig-s3"])
        v = broker.run("rig-s3", "suite", {"suite": "junit"}, timeout=60)
        self.assertEqual(v["state"], "succeeded", v)
        self.assertNotIn("not stored", v["result"].get("detail", ""), v)
        arts = {a["name"]: a for a in v["artifacts"]}
        self.assertEqual(set(arts), {"output.log", "junit.xml", "core.dump"}, v)
        expected = {
            "junit.xml": read_bytes(os.path.join(self.alab.cwd, "out", "junit.xml")),
            "core.dump": read_bytes(os.path.join(self.alab.cwd, "out", "core.dump")),
            "output.log": b"first line\nlast line\n",
        }
        cmd = v["cmd_id"]
        # The bytes are in the S3 server's directory, under <prefix>/<cmd_id>/<name>, byte-identical.
        self.assertEqual(self.s3.objects(), sorted(f"lab1/{cmd}/{n}" for n in expected))
        for name, data in expected.items():
            self.assertEqual(arts[name]["size"], len(data), name)
            self.assertEqual(arts[name]["sha256"], hashlib.sha256(data).hexdigest(), name)
            self.assertEqual(hashlib.sha256(read_bytes(self.s3.object_file(f"lab1/{cmd}/{name}"))).hexdigest(),
                             arts[name]["sha256"], name)
        # The broker keeps only its records of them, no bytes.
        kept = os.listdir(os.path.join(broker.state_dir, "artifacts", cmd))
        self.assertEqual(sorted(kept), sorted(f".{n}.json" for n in expected), kept)
        status, listing = broker.api("GET", f"/v1/commands/{cmd}/artifacts")
        self.assertEqual(status, 200)
        self.assertEqual({a["name"]: a["store"] for a in listing["artifacts"]}, {n: "s3" for n in expected})
        # The agent's log says where each went; the broker HEADed each before recording it.
        agent_log = agent.log()
        for name in expected:
            self.assertRegex(agent_log, rf"artifact {name} of {cmd} stored in the S3 store")
            broker.wait_log(rf"artifact recorded cmd={cmd} name={name} bytes={len(expected[name])} rig=rig-s3 "
                            rf"in the S3 store as lab1/{cmd}/{name}")

        # The control API answers 307 to a presigned GET (no token goes there).
        status, body = broker.api("GET", f"/v1/commands/{cmd}/artifacts/junit.xml")
        self.assertEqual(status, 307, body)
        self.assertTrue(body["location"].startswith(f"{self.s3.endpoint}/{BUCKET}/lab1/{cmd}/junit.xml?"), body)
        self.assertIn("X-Amz-Signature=", body["location"])
        with urllib.request.urlopen(body["location"], timeout=30) as r:
            self.assertEqual(r.read(), expected["junit.xml"])
        # ?location (the dashboard's way): the same URL as JSON, no redirect.
        status, body = broker.api("GET", f"/v1/commands/{cmd}/artifacts/core.dump?location=1")
        self.assertEqual(status, 200, body)
        with urllib.request.urlopen(body["location"], timeout=30) as r:
            self.assertEqual(r.read(), expected["core.dump"])
        # fleetctl lists them and fetches them back through the broker, digests checked.
        r = self.fleetctl(broker, "artifacts", cmd)
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in expected:
            self.assertIn(arts[name]["sha256"], r.stdout)
        for name in ("core.dump", "output.log"):
            out = self.lab.path(f"fetched-{name}")
            r = self.fleetctl(broker, "fetch", cmd, name, "-o", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("(checked)", r.stderr)
            self.assertEqual(read_bytes(out), expected[name], name)

    def test_over_the_limit_is_refused_before_any_upload(self):
        broker = s3_broker(self.lab, self.s3, artifact_max_mib=1)
        self.lab.agent("rig-s3", broker, suites=self.alab.path)
        broker.wait_rigs(["rig-s3"])
        v = broker.run("rig-s3", "suite", {"suite": "oversize"}, timeout=60)
        self.assertEqual(v["state"], "succeeded", v)
        detail = v["result"].get("detail", "")
        self.assertIn("artifact huge.bin not stored: the broker answered HTTP 413", detail)
        self.assertIn("too_large", detail)
        self.assertIn("1048576-byte limit per artifact", detail)
        self.assertEqual([a["name"] for a in v["artifacts"]], ["output.log"], v)
        # Nothing of it reached the store.
        self.assertEqual(self.s3.objects(), [f"lab1/{v['cmd_id']}/output.log"])

    def test_wrong_credentials_fail_the_upload_clearly_and_the_command_still_ends(self):
        broker = s3_broker(self.lab, self.s3, access_key="NOT-AN-ACCOUNT", secret_key="whatever")
        self.lab.agent("rig-s3", broker, suites=self.alab.path)
        broker.wait_rigs(["rig-s3"])
        v = broker.run("rig-s3", "suite", {"suite": "junit"}, timeout=60)
        self.assertEqual(v["state"], "succeeded", v)
        self.assertEqual(v["artifacts"], [], v)
        detail = v["result"].get("detail", "")
        for name in ("output.log", "junit.xml", "core.dump"):
            self.assertIn(f"artifact {name} not stored: the S3 store answered HTTP 403", detail)
        self.assertIn("InvalidAccessKeyId", detail)
        self.assertEqual(self.s3.objects(), [])
        status, listing = broker.api("GET", f"/v1/commands/{v['cmd_id']}/artifacts")
        self.assertEqual(listing["artifacts"], [])

    def test_a_store_that_is_down_is_retried_then_said_and_the_command_still_ends(self):
        broker = s3_broker(self.lab, self.s3)
        agent = self.lab.agent("rig-s3", broker, suites=self.alab.path)
        broker.wait_rigs(["rig-s3"])
        self.s3.proc.stop()
        v = broker.run("rig-s3", "suite", {"suite": "one"}, timeout=90)
        self.assertEqual(v["state"], "succeeded", v)
        self.assertEqual(v["artifacts"], [], v)
        self.assertIn("artifact output.log not stored: upload failed: ", v["result"]["detail"])
        self.assertIn("(the S3 store)", v["result"]["detail"])
        # Each attempt asked the broker again (a fresh URL), three in all.
        self.assertEqual(len(broker.log().split(f"artifact output.log of {v['cmd_id']} goes to the S3 store")) - 1, 3)
        self.assertRegex(agent.log(), r"artifact output\.log of " + v["cmd_id"] + r": attempt 2 failed")

    def test_the_broker_records_only_what_the_store_holds(self):
        broker = s3_broker(self.lab, self.s3)
        self.lab.agent("rig-s3", broker, suites=self.alab.path)
        self.lab.agent("rig-other", broker)
        broker.wait_rigs(["rig-s3", "rig-other"])
        status, body = broker.send("rig-s3", "suite", {"suite": "long"})
        self.assertEqual(status, 202, body)
        running = body["cmd_id"]
        broker.wait_command(running, states=("running",), timeout=30)
        rig = RigHttps(self.lab, broker, "rig-s3")
        data = os.urandom(100_000)
        sha = hashlib.sha256(data).hexdigest()

        def target(cmd, name, size, sha_hex, uploaded=False, who=rig):
            s = who.connect()
            try:
                q = f"sha256={sha_hex}&size={size}" + ("&uploaded=1" if uploaded else "")
                s.sendall(f"POST /v1/artifact-targets/{cmd}/{name}?{q} HTTP/1.1\r\nHost: x\r\n"
                          "Content-Length: 0\r\n\r\n".encode())
                return read_answer(s)
            finally:
                s.close()

        # Another rig's certificate gets no URL for this rig's command.
        st, ans = target(running, "x.bin", len(data), sha, who=RigHttps(self.lab, broker, "rig-other"))
        self.assertEqual((st, ans["error"]), (403, "wrong_rig"), ans)
        # "It is there" before it is: refused, nothing listed.
        st, ans = target(running, "x.bin", len(data), sha, uploaded=True)
        self.assertEqual((st, ans["error"]), (409, "not_uploaded"), ans)
        # A presigned PUT of the declared size, then the record.
        st, ans = target(running, "x.bin", len(data), sha)
        self.assertEqual((st, ans["store"], ans["method"]), (200, "s3", "PUT"), ans)
        self.assertEqual(ans["headers"]["content-length"], str(len(data)))
        req = urllib.request.Request(ans["url"], data=data, method="PUT",
                                     headers={"x-amz-meta-fleetlink-sha256": sha})
        with urllib.request.urlopen(req, timeout=30) as r:
            self.assertEqual(r.status, 200)
        # Declared with another size than the object has: the HEAD finds it out.
        st, ans = target(running, "x.bin", len(data) + 1, sha, uploaded=True)
        self.assertEqual((st, ans["error"]), (409, "size_mismatch"), ans)
        # ... or another digest than the object carries.
        other_sha = hashlib.sha256(b"other").hexdigest()
        st, ans = target(running, "x.bin", len(data), other_sha, uploaded=True)
        self.assertEqual((st, ans["error"]), (409, "digest_mismatch"), ans)
        st, listing = broker.api("GET", f"/v1/commands/{running}/artifacts")
        self.assertEqual(listing["artifacts"], [])
        st, ans = target(running, "x.bin", len(data), sha, uploaded=True)
        self.assertEqual((st, ans["size"], ans["store"]), (201, len(data), "s3"), ans)
        st, listing = broker.api("GET", f"/v1/commands/{running}/artifacts")
        self.assertEqual([(a["name"], a["store"]) for a in listing["artifacts"]], [("x.bin", "s3")])
        # Over the per-artifact limit (1 GiB by default): no URL.
        st, ans = target(running, "huge.bin", (1 << 30) + 1, sha)
        self.assertEqual((st, ans["error"]), (413, "too_large"), ans)
        # Finished: no more.
        st, _ = broker.api("POST", f"/v1/commands/{running}/cancel")
        self.assertIn(st, (200, 202))
        broker.wait_command(running, timeout=30)
        st, ans = target(running, "late.bin", len(data), sha)
        self.assertEqual((st, ans["error"]), (409, "command_finished"), ans)


if __name__ == "__main__":
    unittest.main()
