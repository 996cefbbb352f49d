"""The broker's control API over real HTTP: health/readiness, Prometheus metrics,
keep-alive, error answers, auth, SSE, the dashboard page, and drain."""
import http.client
import json
import os
import re
import signal
import socket
import time
import unittest

import harness


def raw_request(broker, method, path, body=None, headers=None):
    """One request on a fresh connection; (status, headers, raw body)."""
    conn = http.client.HTTPConnection(broker.control_host, broker.control_port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def open_events(broker, query=""):
    """A raw GET /v1/events (so the test sees exactly what the broker writes)."""
    sock = socket.create_connection((broker.control_host, broker.control_port), timeout=10)
    sock.sendall(f"GET /v1/events{query} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n".encode())
    return sock


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def close_wait_sockets(port):
    """Sockets on this local port whose peer hung up and that nobody closed (CLOSE_WAIT)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, _, state = line.split()[1:4]
                if int(local.rsplit(":", 1)[1], 16) == port and state == "08":
                    count += 1
    return count


def read_until(sock, marker, timeout=10.0):
    """Bytes from sock until marker was seen (or the timeout, or EOF); then closes it."""
    data = b""
    deadline = time.monotonic() + timeout
    while marker not in data and time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    return data


class TestControlApi(harness.LabTestCase):
    def test_health_ready_and_metrics(self):
        broker = self.lab.broker()
        self.lab.agent("rig-a", broker)
        self.lab.agent("rig-b", broker)
        broker.wait_rigs(["rig-a", "rig-b"])
        broker.run("rig-a", "dmesg", {"lines": 2})

        self.assertEqual(broker.api("GET", "/healthz"), (200, "ok"))
        self.assertEqual(broker.api("GET", "/readyz"), (200, {"ready": True}))

        status, headers, raw = raw_request(broker, "GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertTrue(headers["content-type"].startswith("text/plain; version=0.0.4"))
        text = raw.decode()
        samples = {}
        for line in text.splitlines():
            if line.startswith("#"):
                self.assertRegex(line, r"^# (HELP|TYPE) (fleetlink_broker_\w+|fleetlink_build_info) ")
                continue
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
            # Every series is the broker's, but the build's, named for every fleetlink program.
            self.assertTrue(name.startswith("fleetlink_broker_") or name.startswith("fleetlink_build_info{"), line)
        self.assertEqual(samples["fleetlink_broker_connections_open"], 2)
        self.assertEqual(samples["fleetlink_broker_rigs_registered"], 2)
        self.assertGreaterEqual(samples['fleetlink_broker_hellos_total{outcome="accepted"}'], 2)
        self.assertGreaterEqual(samples["fleetlink_broker_commands_enqueued_total"], 1)
        self.assertGreaterEqual(samples["fleetlink_broker_commands_acked_total"], 1)
        self.assertGreaterEqual(samples["fleetlink_broker_ack_latency_seconds_count"], 1)
        self.assertEqual(samples['fleetlink_broker_ack_latency_seconds_bucket{le="+Inf"}'],
                         samples["fleetlink_broker_ack_latency_seconds_count"])
        self.assertIn("# TYPE fleetlink_broker_outbox_depth histogram", text)
        # The command went to the store: its row, in at least one commit.
        self.assertGreaterEqual(samples["fleetlink_broker_store_commits_total"], 1)
        self.assertGreaterEqual(samples["fleetlink_broker_store_rows_written_total"],
                                samples["fleetlink_broker_commands_enqueued_total"])
        self.assertGreater(samples["fleetlink_broker_process_resident_memory_bytes"], 1e6)
        self.assertGreater(samples["fleetlink_broker_process_open_fds"], 3)
        # Aggregated only: no series names a rig.
        self.assertNotIn("rig-a", text)
        self.assertNotIn("rig-b", text)

    def test_keep_alive_serves_many_requests_on_one_connection(self):
        broker = self.lab.broker()
        self.lab.agent("rig-a", broker)
        broker.wait_rigs(["rig-a"])
        conn = http.client.HTTPConnection(broker.control_host, broker.control_port, timeout=10)
        conn.connect()
        sock = conn.sock
        started = time.monotonic()
        for i in range(500):
            if i % 2:
                conn.request("GET", "/v1/rigs/rig-a")
            else:
                conn.request("GET", "/healthz")
            resp = conn.getresponse()
            resp.read()
            self.assertEqual(resp.status, 200)
        elapsed = time.monotonic() - started
        self.assertIs(conn.sock, sock, "the server closed a keep-alive connection")
        conn.close()
        self.assertLess(elapsed, 10.0)

    def test_error_answers(self):
        broker = self.lab.broker()
        self.lab.agent("rig-a", broker)
        broker.wait_rigs(["rig-a"])
        status, body = broker.api("GET", "/v1/nothing")
        self.assertEqual((status, body["error"]), (404, "not_found"))
        status, body = broker.api("GET", "/v1/rigs/rig-zzz")
        self.assertEqual((status, body["error"], body["rig_id"]), (404, "unknown_rig", "rig-zzz"))
        status, body = broker.api("GET", "/v1/commands/01a00000-0000-7000-8000-000000000000")
        self.assertEqual((status, body["error"]), (404, "unknown_command"))
        status, body = broker.api("DELETE", "/v1/rigs")
        self.assertEqual((status, body["error"]), (405, "method_not_allowed"))

        status, _, raw = raw_request(broker, "POST", "/v1/rigs/rig-a/commands", body=b"{not json",
                                     headers={"Content-Type": "application/json"})
        self.assertEqual(status, 400)
        body = json.loads(raw)
        self.assertEqual(body["error"], "bad_request")
        self.assertIn("JSON", body["detail"])

        status, body = broker.api("POST", "/v1/rigs/rig-a/commands", {"args": {}})
        self.assertEqual((status, body["error"]), (400, "bad_request"))
        self.assertIn("kind", body["detail"])

        status, _, raw = raw_request(broker, "POST", "/v1/rigs/rig-a/commands",
                                     body=b'{"kind":"dmesg","pad":"' + b"x" * 70000 + b'"}')
        self.assertEqual(status, 413)
        self.assertEqual(json.loads(raw)["error"], "payload_too_large")

        status, body = broker.api("POST", "/v1/rigs/rig-a/commands", {"kind": "no-such-kind"})
        self.assertEqual((status, body["error"]), (422, "unsupported_kind"))

        # The broker keeps serving after all of that.
        self.assertEqual(broker.run("rig-a", "dmesg", {"lines": 1})["state"], "succeeded")

    def test_post_can_wait_for_the_ack_or_the_result(self):
        broker = self.lab.broker()
        agent = self.lab.agent("rig-a", broker)
        broker.wait_rigs(["rig-a"])
        conn = http.client.HTTPConnection(broker.control_host, broker.control_port, timeout=20)
        body = json.dumps({"kind": "dmesg", "args": {"lines": "1"}})
        conn.request("POST", "/v1/rigs/rig-a/commands?wait=acked", body=body)
        resp = conn.getresponse()
        answer = json.loads(resp.read())
        self.assertEqual(resp.status, 202)
        self.assertIn(answer["state"], ("acked", "running", "succeeded"))
        self.assertEqual(set(answer), {"cmd_id", "rig_id", "seq", "state"})

        conn.request("POST", "/v1/rigs/rig-a/commands?wait=done", body=body)
        resp = conn.getresponse()
        answer = json.loads(resp.read())
        self.assertEqual((resp.status, answer["state"]), (202, "succeeded"))
        self.assertEqual(broker.command(answer["cmd_id"])["result"]["status"], "ok")

        # A frozen rig: the wait ends at the timeout with the state reached so far.
        agent.signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            conn.request("POST", "/v1/rigs/rig-a/commands?wait=acked&timeout_ms=300", body=body)
            resp = conn.getresponse()
            answer = json.loads(resp.read())
            self.assertEqual(resp.status, 202)
            self.assertIn(answer["state"], ("queued", "sent"))
            self.assertLess(time.monotonic() - started, 5)
            # ... and the same kept-alive connection goes on working.
            conn.request("GET", "/healthz")
            resp = conn.getresponse()
            self.assertEqual((resp.status, resp.read()), (200, b"ok"))
        finally:
            agent.signal(signal.SIGCONT)
        conn.close()

    def test_auth(self):
        broker = self.lab.broker(control_token="s3cret")
        self.assertEqual(broker.api("GET", "/v1/rigs")[0], 200)  # the harness sends the token
        status, body = broker.api("GET", "/v1/rigs", token="")
        self.assertEqual((status, body["error"]), (401, "unauthorized"))
        self.assertEqual(broker.api("GET", "/v1/rigs", token="wrong")[0], 401)
        self.assertEqual(broker.api("GET", "/metrics", token="")[0], 401)
        self.assertEqual(broker.api("POST", "/v1/admin/drain", {}, token="")[0], 401)
        self.assertEqual(broker.api("GET", "/healthz", token=""), (200, "ok"))
        self.assertTrue(broker.alive())

    def test_events_stream(self):
        broker = self.lab.broker()
        self.lab.agent("rig-a", broker)
        broker.wait_rigs(["rig-a"])
        sock = open_events(broker)
        time.sleep(0.3)
        broker.run("rig-a", "dmesg", {"lines": 1})
        text = read_until(sock, b"command_done").decode()
        self.assertIn("200 OK", text.split("\r\n")[0])
        self.assertIn("text/event-stream", text)
        events = re.findall(r"event: (\w+)\ndata: (\{.*\})\n\n", text)
        kinds = [e[0] for e in events]
        self.assertIn("command_acked", kinds)
        self.assertIn("command_done", kinds)
        done = json.loads(dict(events)["command_done"])
        self.assertEqual(done["rig_id"], "rig-a")

    def test_events_stream_filtered_by_type(self):
        broker = self.lab.broker()
        self.lab.agent("rig-a", broker)
        broker.wait_rigs(["rig-a"])
        # Two streams: one wants only command_done, the other everything. The
        # filtered one must see the RESULT's event and nothing else.
        only_done = open_events(broker, "?types=command_done")
        everything = open_events(broker)
        time.sleep(0.3)
        broker.run("rig-a", "dmesg", {"lines": 1})
        time.sleep(0.3)  # anything sent after the RESULT's event is read too

        def read_until_done(sock):
            return re.findall(r"event: (\w+)\n", read_until(sock, b"command_done").decode())

        self.assertEqual(read_until_done(only_done), ["command_done"])
        kinds = read_until_done(everything)
        self.assertIn("command_acked", kinds)
        self.assertIn("command_done", kinds)
        status, body = broker.api("GET", "/v1/events?types=command_acked,nonsense")
        self.assertEqual(status, 400)
        self.assertIn("nonsense", body["detail"])

    def test_clients_that_hang_up_are_let_go(self):
        # lws does not read a connection whose answer to a bodiless request is
        # still open (an event stream), yet keeps polling it: a client that left
        # one used to spin the broker at 100% CPU until a heartbeat's write
        # failed. A held POST (lws still reads it: it had a body) is closed by
        # lws itself; it is here so that both kinds of open answer are covered.
        broker = self.lab.broker()
        rig = self.lab.agent("rig-a", broker)
        broker.wait_rigs(["rig-a"])
        rig.stop()
        broker.wait_rig_gone("rig-a")

        stream = open_events(broker)
        self.assertIn(b"200 OK", stream.recv(4096))
        held = socket.create_connection((broker.control_host, broker.control_port), timeout=10)
        body = json.dumps({"kind": "dmesg", "args": {"lines": 1}}).encode()
        held.sendall(b"POST /v1/rigs/rig-a/commands?wait=acked&timeout_ms=60000 HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
                     b"\r\n\r\n" + body)
        time.sleep(0.5)  # held: its rig is offline
        held.setblocking(False)
        with self.assertRaises(BlockingIOError):
            held.recv(1)
        stream.close()
        held.close()

        harness.wait_for(lambda: close_wait_sockets(broker.control_port) == 0, timeout=5,
                         what="the broker closed the connections of the clients that left")
        before = cpu_seconds(broker.pid)
        time.sleep(1.0)
        self.assertLess(cpu_seconds(broker.pid) - before, 0.3, "the broker spins after clients left")
        # The held command goes on: it waits for its rig.
        self.assertEqual(broker.api("GET", "/readyz"), (200, {"ready": True}))
        status, listed = broker.api("GET", "/v1/commands?rig=rig-a")
        self.assertEqual(status, 200)
        self.assertEqual([c["state"] for c in listed["commands"]], ["queued"])

    def test_bytes_sent_with_an_event_stream_request_do_not_spin_the_broker(self):
        # What a client sends in the same write as its GET lands in lws's buffer,
        # where the hang-up watch's poll() cannot see it: lws keeps it there without
        # making the loop spin, and the stream goes on.
        broker = self.lab.broker()
        for extra in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"x" * 3000):
            stream = socket.create_connection((broker.control_host, broker.control_port), timeout=10)
            stream.sendall(b"GET /v1/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n" + extra)
            self.assertIn(b"200 OK", stream.recv(4096))
            time.sleep(0.3)
            before = cpu_seconds(broker.pid)
            time.sleep(1.0)
            self.assertLess(cpu_seconds(broker.pid) - before, 0.3, "the broker spins on a stream's buffered bytes")
            stream.setblocking(False)
            with self.assertRaises(BlockingIOError):  # still open: nothing closed it
                stream.recv(1)
            stream.close()

    def test_dashboard_page(self):
        broker = self.lab.broker()
        status, headers, raw = raw_request(broker, "GET", "/")
        self.assertEqual(status, 200)
        self.assertTrue(headers["content-type"].startswith("text/html"))
        page = raw.decode()
        self.assertIn("Force reconnect", page)
        self.assertIn("/v1/rigs", page)
        self.assertNotRegex(page, r"(src|href)=\"https?://")  # no external assets

    def test_drain_answers_before_an_empty_broker_exits(self):
        broker = self.lab.broker()
        self.assertEqual(broker.api("GET", "/readyz")[0], 200)
        status, body = broker.api("POST", "/v1/admin/drain", {"window_ms": 100})
        self.assertEqual(status, 202)
        self.assertEqual(body, {"draining": True, "window_ms": 100})
        harness.wait_for(lambda: not broker.alive(), timeout=15, what="broker exit after drain")
        self.assertEqual(broker.proc.returncode, 0)


if __name__ == "__main__":
    unittest.main()
