"""Scoped credentials (issue 15 point 5): rig tokens and the agent's allow-kinds.

A real broker with --rig-token required and keys made by packaging/fleetlink-rig-token
(the operators' tool, so it is exercised too); real agents with --token-file. A
kind the rig's token does not grant is refused 403 at the control API and never
sent; a rig without a token, or with another rig's, is closed 4401 with the
reason; a renewed token file is used from the next connection on; on the rig,
allow-kinds refuses a command with a NACK that says why.
"""
import asyncio
import json
import os
import subprocess
import sys
import time
import unittest

import harness

MINT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "packaging", "fleetlink-rig-token")


class TokenLab:
    def __init__(self, lab):
        self.lab = lab
        self.keys = lab.path("rig-token-keys")
        os.makedirs(self.keys)
        for name, kind in (("lab-ed", "ed25519"), ("lab-ec", "es256")):
            subprocess.run([sys.executable, MINT, "keygen", "--kind", kind, name], cwd=self.keys, check=True,
                           capture_output=True)
            # The private key stays with whoever mints: only the public one is the broker's.
            os.rename(os.path.join(self.keys, name + ".key"), lab.path(name + ".key"))
        self.suites = lab.path("suites.json")
        with open(self.suites, "w") as f:
            json.dump({"suites": {"pass": {"argv": ["/bin/sh", "-c", "echo suite ran; exit 0"]}}}, f)

    def mint(self, rig, kinds, key="lab-ed", lifetime=3600, **extra):
        argv = [sys.executable, MINT, "mint", "--key", self.lab.path(key + ".key"), "--rig", rig,
                "--kinds", ",".join(kinds), "--lifetime", str(lifetime)]
        for k, v in extra.items():
            argv += ["--" + k.replace("_", "-"), str(v)]
        return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()

    def token_file(self, rig, token):
        path = self.lab.path(f"{rig}.token")
        with open(path + ".new", "w") as f:
            f.write(token + "\n")
        os.chmod(path + ".new", 0o600)
        os.replace(path + ".new", path)  # as a renewal would: never a half-written file
        return path


class TestRigTokensRequired(harness.LabTestCase):
    def setUp(self):
        super().setUp()
        self.t = TokenLab(self.lab)
        self.broker = self.lab.broker(rig_token="required", rig_token_keys=self.t.keys, rig_token_leeway_s=0)

    def agent(self, rig, token=None, **kw):
        if token is not None:
            kw["token_file"] = self.t.token_file(rig, token)
        return self.lab.agent(rig, self.broker, suites=self.t.suites, **kw)

    def test_kinds_the_token_grants_run_others_are_refused_403_and_never_sent(self):
        a = self.agent("rig-a", self.t.mint("rig-a", ["dmesg"]))                # EdDSA
        self.agent("rig-b", self.t.mint("rig-b", ["dmesg", "suite"], key="lab-ec"))  # ES256
        self.broker.wait_rigs(["rig-a", "rig-b"])

        self.assertEqual(self.broker.run("rig-a", "dmesg", {"lines": 2})["state"], "succeeded")
        status, body = self.broker.send("rig-a", "suite", {"suite": "pass"})
        self.assertEqual(status, 403, body)
        self.assertEqual(body["error"], "kind_not_allowed")
        self.assertEqual(body["rig_id"], "rig-a")
        self.assertIn("'suite'", body["detail"])
        ran = self.broker.run("rig-b", "suite", {"suite": "pass"})
        self.assertEqual(ran["state"], "succeeded", ran)

        # A job: the rig whose token does not grant the kind is refused by name, the other runs it.
        status, job = self.broker.api("POST", "/v1/jobs", {"kind": "suite", "args": {"suite": "pass"},
                                                           "targets": {"ids": ["rig-a", "rig-b"]}})
        self.assertEqual(status, 202, job)
        final = harness.wait_for(
            lambda: (lambda j: j if j.get("finished_at") else None)(
                self.broker.api("GET", f"/v1/jobs/{job['job_id']}")[1]), 30, what="job finished")
        rigs = {r["rig_id"]: r for r in final["rigs"]}
        self.assertEqual(rigs["rig-a"]["error"], "kind_not_allowed", final)
        self.assertEqual(rigs["rig-b"]["state"], "succeeded", final)

        # The control stream: refused by name as well.
        from test_control_stream import exchange, send  # noqa: E402 - its helpers, only here
        lines = asyncio.run(exchange(self.broker, [send("no", "rig-a", "suite", args={"suite": "pass"}) + "\n" +
                                                   send("ok", "rig-a", "dmesg", args={"lines": "1"})],
                                     lambda ls: any(l.get("ref") == "ok" and l["op"] == "done" for l in ls)))
        refused = [l for l in lines if l.get("ref") == "no"]
        self.assertEqual([(l["op"], l["error"]) for l in refused], [("refused", "kind_not_allowed")], lines)

        # Nothing of kind suite ever reached rig-a.
        self.assertNotIn("kind=suite", a.log())
        status, listed = self.broker.api("GET", "/v1/commands?rig=rig-a")
        self.assertEqual(status, 200, listed)
        self.assertEqual({c["kind"] for c in listed["commands"]}, {"dmesg"})

    def test_no_token_or_another_rigs_token_is_closed_4401_with_the_reason(self):
        bare = self.agent("rig-c")
        bare.wait_log(r"disconnected code=4401 .*rig token required", timeout=20)
        stolen = self.agent("rig-d", self.t.mint("rig-x", ["dmesg"]))
        stolen.wait_log(r"disconnected code=4401 .*rig token is for 'rig-x'", timeout=20)
        expired = self.agent("rig-e", self.t.mint("rig-e", ["dmesg"], issued_at=int(time.time()) - 600, lifetime=60))
        expired.wait_log(r"disconnected code=4401 .*rig token refused: expired", timeout=20)
        self.assertEqual(set(self.broker.rigs()), set())
        self.broker.wait_log(r"rig token required", timeout=5)

    def test_a_renewed_token_file_is_read_at_the_next_connection(self):
        a = self.agent("rig-a", self.t.mint("rig-a", ["dmesg"], lifetime=4))
        self.broker.wait_rigs(["rig-a"])
        self.assertEqual(self.broker.send("rig-a", "suite", {"suite": "pass"})[0], 403)
        # Its token runs out: the broker closes the connection, and the same token is refused after.
        a.wait_log(r"disconnected code=4401 .*rig token expired", timeout=20)
        at = a.log_size()
        a.wait_log(r"disconnected code=4401 .*rig token refused: expired", timeout=20, start=at)
        # The renewal only rewrites the file.
        self.t.token_file("rig-a", self.t.mint("rig-a", ["dmesg", "suite"]))
        self.broker.wait_rigs(["rig-a"], timeout=20)
        ran = self.broker.run("rig-a", "suite", {"suite": "pass"})
        self.assertEqual(ran["state"], "succeeded", ran)


class TestAllowKinds(harness.LabTestCase):
    def test_allow_kinds_nacks_a_command_the_rig_does_not_allow_with_the_reason(self):
        t = TokenLab(self.lab)
        broker = self.lab.broker()
        # Held for a rig never seen: the broker cannot know its kinds yet, so the rig itself refuses it.
        status, body = broker.api("POST", "/v1/rigs/rig-n/commands",
                                  {"kind": "suite", "args": {"suite": "pass"}, "hold": True})
        self.assertEqual(status, 202, body)
        agent = self.lab.agent("rig-n", broker, suites=t.suites, allow_kinds="dmesg")
        done = broker.wait_command(body["cmd_id"], timeout=20)
        self.assertEqual(done["state"], "rejected", done)
        self.assertIn("not_allowed", done["detail"])
        self.assertIn("allow-kinds (dmesg)", done["detail"])
        # HELLO listed only what it allows: the next one is refused at the API already.
        self.assertEqual(broker.rigs()["rig-n"]["kinds"], ["dmesg"])
        self.assertEqual(broker.send("rig-n", "suite", {"suite": "pass"})[0], 422)
        self.assertEqual(broker.run("rig-n", "dmesg", {"lines": 1})["state"], "succeeded")
        agent.stop()
        # The older name still works.
        old = self.lab.agent("rig-o", broker, suites=t.suites, args=["--allow", "dmesg"])
        broker.wait_rigs(["rig-o"])
        self.assertEqual(broker.rigs()["rig-o"]["kinds"], ["dmesg"])
        old.stop()


if __name__ == "__main__":
    unittest.main()
