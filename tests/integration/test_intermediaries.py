"""Through real intermediaries (issue 15, point 9): Debian's haproxy and nginx run as
this test's own processes (configs in the lab directory, loopback ports, stopped by
PID; never the system service, never /etc).

- haproxy in TCP mode (TLS passes through: the broker still sees the rig's
  certificate) with a 5 s idle timeout (`timeout client 5s`, `timeout server 5s`):
  with the broker pinging every 2 s the rig's one connection lives on through three
  idle timeouts; with the default 20 s ping haproxy cuts idle connections, the agent
  reconnects with its backoff, and every command sent around the cuts runs exactly
  once (counted by a plugin writing to a ground-truth file).
- nginx as an HTTP reverse proxy with the WebSocket upgrade: with its normal buffers
  the rig gets through; with `large_client_header_buffers 2 32` the upgrade's
  Sec-WebSocket-Key line does not fit, nginx answers 400 and the agent says so in
  its log ("upgrade refused by HTTP 400 ...") and waits its backoff cap between
  attempts instead of retrying in silence.
"""
import os
import re
import shutil
import time
import unittest

from harness import LabTestCase, free_port, wait_for

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
# A long URL path (a site's routing prefix, say): the request line alone fills most
# of nginx's shrunken buffer.
LONG_PATH = "/agent/" + "lab-b2/" * 28


def count(pattern, text):
    return len(re.findall(pattern, text))


class IntermediariesTest(LabTestCase):
    def setUp(self):
        super().setUp()
        for prog, pkg in ((HAPROXY, "haproxy"), (NGINX, "nginx-light")):
            # Not skipped: a missing proxy fails the test (scripts/install-deps.sh installs both).
            self.assertTrue(os.access(prog, os.X_OK), f"{prog} missing: apt-get install {pkg}")
        self.truth = self.lab.path("truth.log")

    # ------------------------------------------------------------------ helpers

    def haproxy(self, broker_port):
        port = free_port()
        cfg = self.lab.path("haproxy.cfg")
        with open(cfg, "w") as f:
            f.write(f"""global
    maxconn 256
defaults
    mode tcp
    timeout connect 2s
    timeout client 5s
    timeout server 5s
frontend rigs
    bind 127.0.0.1:{port}
    default_backend broker
backend broker
    server broker1 127.0.0.1:{broker_port}
""")
        p = self.lab.process("haproxy", [HAPROXY, "-db", "-f", cfg])
        wait_for(lambda: self._listening(port), 10, what="haproxy listening")
        return p, port

    def nginx(self, upstream_port, small_headers):
        port = free_port()
        tmp = self.lab.path("nginx-tmp")
        os.makedirs(tmp, exist_ok=True)
        # The shrunken buffers: one large buffer of 256 bytes (nginx's least: no less
        # than connection_pool_size) after a 64-byte first one. The rig's upgrade,
        # with the long path below, its Host and its Sec-WebSocket-* lines, needs more.
        buffers = ("connection_pool_size 256;\n        client_header_buffer_size 64;\n"
                   "        large_client_header_buffers 1 256;"
                   if small_headers else "")
        cfg = self.lab.path(f"nginx-{port}.conf")
        with open(cfg, "w") as f:
            f.write(f"""daemon off;
master_process off;
user root;
pid {tmp}/nginx-{port}.pid;
error_log {self.lab.path(f'nginx-{port}-error.log')} info;
events {{ worker_connections 64; }}
http {{
    access_log {self.lab.path(f'nginx-{port}-access.log')};
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        {buffers}
        location /agent/ {{
            # The site's long prefix is this proxy's business: the broker serves /agent.
            rewrite ^ /agent break;
            proxy_pass http://127.0.0.1:{upstream_port};
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection "upgrade";
            proxy_read_timeout 60s;
        }}
    }}
}}
""")
        p = self.lab.process(f"nginx-{port}", [NGINX, "-c", cfg, "-p", tmp])
        wait_for(lambda: self._listening(port), 10, what="nginx listening")
        return p, port

    @staticmethod
    def _listening(port):
        import socket
        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex(("127.0.0.1", port)) == 0

    def counting_plugins(self):
        plugins = self.lab.path("plugins")
        os.makedirs(plugins, exist_ok=True)
        prog = os.path.join(plugins, "fleetlink-count")
        with open(prog, "w") as f:
            f.write(f"#!/bin/sh\nread line\necho \"$FLEETLINK_CMD_ID\" >> '{self.truth}'\necho counted\n")
        os.chmod(prog, 0o755)
        return plugins

    def ran(self):
        if not os.path.exists(self.truth):
            return []
        with open(self.truth) as f:
            return f.read().split()

    # ------------------------------------------------------------------ haproxy

    def test_haproxy_5s_idle_timeout_2s_ping_keeps_the_connection(self):
        broker = self.lab.broker(ping_interval_ms=2000, pong_timeout_ms=1500)
        _, port = self.haproxy(broker.listen_port)
        agent = self.lab.agent("rig-lb", f"wss://127.0.0.1:{port}/agent", keepalive_idle_s=0)
        broker.wait_rigs(["rig-lb"], timeout=20)
        connected_at = broker.rigs()["rig-lb"]["connected_at"]
        # Three times haproxy's idle timeout with nothing but the broker's pings.
        time.sleep(16)
        rig = broker.rigs().get("rig-lb")
        self.assertIsNotNone(rig, "the rig's connection was lost")
        self.assertEqual(rig["connected_at"], connected_at, "the rig reconnected: haproxy cut it")
        self.assertEqual(count(r"connected to wss://", agent.log()), 1, agent.log()[-2000:])
        c = broker.run("rig-lb", "dmesg", {"lines": 2}, timeout=20)
        self.assertEqual(c["state"], "succeeded", c)

    def test_haproxy_cuts_idle_connections_without_ping_agent_reconnects_nothing_lost_or_doubled(self):
        # The default ping (20 s) is longer than haproxy's 5 s idle timeout.
        broker = self.lab.broker(ping_interval_ms=20000)
        _, port = self.haproxy(broker.listen_port)
        agent = self.lab.agent("rig-cut", f"wss://127.0.0.1:{port}/agent", keepalive_idle_s=0,
                               plugin_dir=self.counting_plugins())
        broker.wait_rigs(["rig-cut"], timeout=20)
        sent = []
        for _ in range(3):
            for _ in range(2):
                status, body = broker.send("rig-cut", "count")
                self.assertEqual(status, 202, body)
                sent.append(body["cmd_id"])
            # Idle past the timeout: haproxy closes both sides; the next commands
            # find the rig reconnecting (held, then delivered) or back.
            time.sleep(6)
        for cmd_id in sent:
            c = broker.wait_command(cmd_id, timeout=30)
            self.assertEqual(c["state"], "succeeded", c)
        log = agent.log()
        self.assertGreaterEqual(count(r"connected to wss://", log), 3, log[-3000:])
        self.assertRegex(log, r"reconnect in \d+ms")
        ran = self.ran()
        self.assertEqual(sorted(ran), sorted(sent), "every command ran, each exactly once")
        # The connection is there again and works.
        broker.wait_rigs(["rig-cut"], timeout=20)
        self.assertEqual(broker.run("rig-cut", "count", timeout=20)["state"], "succeeded")

    # ------------------------------------------------------------------ nginx

    def test_nginx_small_header_buffers_refusal_is_logged_with_its_status(self):
        plain = free_port()
        broker = self.lab.broker(plain_listen=f"127.0.0.1:{plain}")
        broker.wait_log(r"ready .* plain=127\.0\.0\.1:\d+")
        _, ok_port = self.nginx(plain, small_headers=False)
        _, small_port = self.nginx(plain, small_headers=True)
        # Through nginx with its usual buffers: the upgrade passes, long path and all.
        self.lab.agent("rig-nginx-ok", f"ws://127.0.0.1:{ok_port}{LONG_PATH}", allow_plain=True)
        broker.wait_rigs(["rig-nginx-ok"], timeout=20)
        # Through the shrunken buffers: refused by nginx, said in the agent's log.
        cap_ms = 3000
        agent = self.lab.agent("rig-nginx-small", f"ws://127.0.0.1:{small_port}{LONG_PATH}",
                               backoff_base_ms=100, backoff_cap_ms=cap_ms, allow_plain=True)
        agent.wait_log(r"ERROR upgrade refused by HTTP 400 Bad Request from ws://127\.0\.0\.1:" + str(small_port) +
                       r"/agent/\S* \(a proxy or the broker refuses this request; next attempt in 3000ms\)", timeout=20)
        # nginx's own word for it (its error log, level info).
        wait_for(lambda: "client sent too long header line" in open(self.lab.path(f"nginx-{small_port}-error.log")).read(),
                 10, what="nginx's log of the refusal")
        t0 = time.monotonic()
        # The next attempts wait the cap, not the 100 ms base: a few lines, not a loop.
        time.sleep(7)
        refusals = count(r"upgrade refused by HTTP 400", agent.log())
        self.assertGreaterEqual(refusals, 2, agent.log()[-2000:])
        self.assertLessEqual(refusals, int((time.monotonic() - t0) * 1000 / cap_ms) + 2, agent.log()[-2000:])
        self.assertNotIn("rig-nginx-small", broker.rigs())
        with open(self.lab.path(f"nginx-{small_port}-access.log")) as f:
            self.assertRegex(f.read(), r'"GET /agent/[^ ]* HTTP/1\.1" 400 ')


if __name__ == "__main__":
    unittest.main()
