"""HTTP/1.1 pipelining on the control port: requests written back to back in
one write on a kept-alive raw socket. lws 4.1.6 cannot read the body of a
pipelined request (it used to spin the shared event loop at 100% CPU); the
broker answers pipelined bodiless requests in order and refuses a pipelined
request with a body with 503 "pipelined_request" + Connection: close. Either
way the broker must stay responsive, not burn CPU, and keep serving rigs."""
import json
import os
import re
import socket
import time

import harness


def get(path):
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()


def post(path, body):
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
            ).encode() + data


def cpu_seconds(pid):
    """User+system CPU time of a process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parse_responses(raw):
    """Complete HTTP/1.1 responses in raw: [(status, headers text, body)]."""
    out = []
    while True:
        head_end = raw.find(b"\r\n\r\n")
        if head_end < 0:
            return out
        head = raw[:head_end].decode("latin-1")
        m = re.search(r"(?im)^content-length:\s*(\d+)", head)
        length = int(m.group(1)) if m else 0
        if len(raw) < head_end + 4 + length:
            return out
        out.append((int(head.split(" ", 2)[1]), head,
                    raw[head_end + 4:head_end + 4 + length].decode("utf-8", "replace")))
        raw = raw[head_end + 4 + length:]


def exchange(broker, data, expect, timeout=3.0):
    """Writes data in one sendall; reads until `expect` responses arrived, the
    server closed, or the timeout. Returns (responses, closed)."""
    sock = socket.create_connection((broker.control_host, broker.control_port), timeout=timeout)
    raw = b""
    closed = False
    try:
        sock.sendall(data)
        sock.settimeout(0.2)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(parse_responses(raw)) < expect:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                closed = True
                break
            raw += chunk
        if not closed and parse_responses(raw) and parse_responses(raw)[-1][0] == 503:
            # After a refusal the broker hangs up: see it.
            sock.settimeout(2.0)
            try:
                closed = sock.recv(65536) == b""
            except socket.timeout:
                closed = False
    finally:
        sock.close()
    return parse_responses(raw), closed


class TestControlPipelining(harness.LabTestCase):
    def assert_broker_healthy(self, broker, cpu_before, what):
        # Answers promptly...
        started = time.monotonic()
        self.assertEqual(broker.api("GET", "/healthz", timeout=2), (200, "ok"), what)
        self.assertLess(time.monotonic() - started, 1.0, what)
        # ...and does not burn CPU (a spinning loop uses ~2 s of CPU in 2 s).
        time.sleep(2.0)
        used = cpu_seconds(broker.pid) - cpu_before
        self.assertLess(used, 0.5, f"{what}: broker used {used:.2f}s CPU in ~2s")
        self.assertTrue(broker.alive(), what)

    def test_pipelined_requests_do_not_stall_the_broker(self):
        broker = self.lab.broker()
        self.lab.agent("rig-p", broker)
        broker.wait_rigs(["rig-p"])
        cmd = {"kind": "dmesg", "args": {"lines": "1"}}

        cases = [
            # (name, bytes, answers expected, statuses that are acceptable)
            ("GET+GET", get("/healthz") + get("/readyz"), 2, [[200, 200]]),
            ("POST+GET", post("/v1/rigs/no-such-rig/commands", cmd) + get("/healthz"), 2,
             [[404, 200]]),
            ("GET+POST", get("/healthz") + post("/v1/rigs/rig-p/commands", cmd), 2,
             [[200, 202], [200, 503]]),
            ("POST+POST", post("/v1/rigs/rig-p/commands", cmd)
             + post("/v1/rigs/rig-p/commands", cmd), 2, [[202, 202], [202, 503]]),
            ("GET+GET+POST", get("/healthz") + get("/healthz")
             + post("/v1/rigs/rig-p/commands", cmd), 3, [[200, 200, 202], [200, 200, 503]]),
        ]
        for name, data, expect, acceptable in cases:
            with self.subTest(name):
                cpu_before = cpu_seconds(broker.pid)
                responses, closed = exchange(broker, data, expect)
                statuses = [r[0] for r in responses]
                self.assertIn(statuses, acceptable, f"{name}: {responses!r}")
                if statuses[-1] == 503:
                    # Refused, not processed: says so, and closes the connection.
                    _, head, body = responses[-1]
                    self.assertEqual(json.loads(body)["error"], "pipelined_request")
                    self.assertRegex(head, r"(?im)^connection: close")
                    self.assertTrue(closed, f"{name}: connection left open after the 503")
                self.assert_broker_healthy(broker, cpu_before, name)

        # Pipelined GETs on a connection that carries on afterwards.
        responses, closed = exchange(broker, get("/healthz") * 5, 5)
        self.assertEqual([r[0] for r in responses], [200] * 5)
        self.assertFalse(closed)

        # The rig still gets and runs commands.
        view = broker.run("rig-p", "dmesg", {"lines": 2})
        self.assertEqual(view["state"], "succeeded")
        self.assertEqual(view["result"]["status"], "ok")

    def test_sequential_keep_alive_posts_are_not_refused(self):
        # Requests that wait for their answer are not pipelined: never refused.
        broker = self.lab.broker()
        sock = socket.create_connection((broker.control_host, broker.control_port), timeout=5)
        try:
            for i in range(10):
                sock.sendall(post("/v1/rigs/nobody/commands", {"kind": "dmesg"}))
                raw = b""
                while not parse_responses(raw):
                    chunk = sock.recv(65536)
                    self.assertTrue(chunk, f"closed at request {i}")
                    raw += chunk
                self.assertEqual(parse_responses(raw)[0][0], 404, raw)
        finally:
            sock.close()


if __name__ == "__main__":
    import unittest
    unittest.main()
