"""A scriptable fleetlink broker for agent tests (python3-websockets + python3-msgpack).

The real broker never redelivers a cmd_id nor skips a seq; to prove the agent
copes when that happens anyway, this one does whatever the test says: it
speaks the wire protocol (one msgpack map per binary frame, "v" and "t" first),
answers HELLO with WELCOME, and lets the test send any frame on any connection
(commands with chosen seq and cmd_id, GOAWAY, unknown types or fields), refuse
upgrades with HTTP 503 + Retry-After, and close connections with a code.

It runs its asyncio loop on a background thread; every method here is called
from the test's thread and is thread-safe.
"""
import asyncio
import http
import os
import secrets
import ssl
import threading
import time

import msgpack
import websockets

from broker_rawclient import SUBPROTOCOL


def uuid7():
    """A UUIDv7 string (RFC 9562): 48-bit ms timestamp, version 7, variant 10."""
    ms = int(time.time() * 1000)
    rand = bytearray(secrets.token_bytes(10))
    b = ms.to_bytes(6, "big") + bytes(rand)
    b = bytearray(b)
    b[6] = (b[6] & 0x0F) | 0x70
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def encode(t, **fields):
    m = {"v": 1, "t": t}
    m.update(fields)
    return msgpack.packb(m, use_bin_type=True)


class Conn:
    """One accepted agent connection."""

    def __init__(self, broker, ws, index):
        self.broker = broker
        self.ws = ws
        self.index = index              # 1-based, in order of HELLO
        self.hello = None
        self.subprotocol = ws.subprotocol  # what the handshake agreed on (None: nothing)
        self.frames = []                # decoded frames after HELLO, in order
        self.next_seq = 1
        self.close_code = None
        self.close_reason = None
        self.closed_at = None
        self.opened_at = time.monotonic()

    # -- sending (from the test thread)
    def send(self, t, **fields):
        self.broker._call(self.ws.send(encode(t, **fields)))

    def send_fragmented(self, t, pieces=3, **fields):
        """One message split over several WebSocket frames (continuations)."""
        data = encode(t, **fields)
        step = max(1, len(data) // pieces)
        parts = [data[i:i + step] for i in range(0, len(data), step)]
        self.broker._call(self.ws.send(parts))

    def send_raw(self, payload):
        self.broker._call(self.ws.send(payload))

    def command(self, kind, args=None, cmd_id=None, seq=None, **extra):
        """Send a COMMAND; returns (seq, cmd_id). seq defaults to the next one."""
        if seq is None:
            seq = self.next_seq
        self.next_seq = max(self.next_seq, seq + 1)
        cmd_id = cmd_id or uuid7()
        fields = {"seq": seq, "cmd_id": cmd_id, "kind": kind,
                  "args": {k: str(v) for k, v in (args or {}).items()},
                  "issued_at_ms": int(time.time() * 1000)}
        fields.update(extra)
        self.send("command", **fields)
        return seq, cmd_id

    def goaway(self, reconnect_after_ms, reason="drain"):
        self.send("goaway", reason=reason, reconnect_after_ms=reconnect_after_ms)

    def freeze(self):
        """Stop reading from this connection (a half-open peer: no PONGs, no frames)."""
        self.broker._loop.call_soon_threadsafe(self.ws.transport.pause_reading)

    def close(self, code=1001, reason="test"):
        self.broker._call(self.ws.close(code, reason))

    # -- waiting
    def wait_frame(self, pred, timeout=10.0, what="frame"):
        return self.broker._wait(lambda: next((f for f in self.frames if pred(f)), None),
                                 timeout, f"conn {self.index}: {what}")

    def wait_closed(self, timeout=10.0):
        self.broker._wait(lambda: self.closed_at is not None, timeout,
                          f"conn {self.index} closed")
        return self.close_code, self.close_reason

    def ack_for(self, cmd_id, timeout=10.0):
        return self.wait_frame(lambda f: f["t"] == "ack" and f["cmd_id"] == cmd_id, timeout,
                               f"ack {cmd_id}")

    def nack_for(self, cmd_id, timeout=10.0):
        return self.wait_frame(lambda f: f["t"] == "nack" and f["cmd_id"] == cmd_id, timeout,
                               f"nack {cmd_id}")

    def result_for(self, cmd_id, timeout=10.0):
        return self.wait_frame(lambda f: f["t"] == "result" and f["cmd_id"] == cmd_id, timeout,
                               f"result {cmd_id}")


class FakeBroker:
    def __init__(self, certs=None, plain=False, welcome=True):
        """certs: harness.Certs (mTLS with its broker cert); plain=True for ws://."""
        self.plain = plain
        self.welcome = welcome
        self.conns = []
        self.attempts = []              # monotonic time of every HTTP upgrade request
        self.refuse = 0                 # refuse this many next upgrades with 503
        self.retry_after = 1            # seconds, in the 503's Retry-After (None: no header)
        self.refused = 0
        self.broker_id = "fake-broker"
        self._cond = threading.Condition()
        self._ssl = None
        if not plain:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(certs.broker_cert, certs.broker_key)
            ctx.load_verify_locations(certs.ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
            self._ssl = ctx
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake broker did not start")

    @property
    def url(self):
        return f"{'ws' if self.plain else 'wss'}://127.0.0.1:{self.port}/agent"

    # -- loop thread
    def _run(self):
        asyncio.set_event_loop(self._loop)
        # Connections refused with 503 leave websockets 10 complaining at shutdown.
        self._loop.set_exception_handler(lambda loop, context: None)

        async def start():
            self._server = await websockets.serve(
                self._handler, "127.0.0.1", 0, ssl=self._ssl,
                process_request=self._process_request, max_size=1 << 20,
                subprotocols=[SUBPROTOCOL], ping_interval=None)
            self.port = self._server.sockets[0].getsockname()[1]
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    async def _process_request(self, path, headers):
        with self._cond:
            self.attempts.append(time.monotonic())
            self._cond.notify_all()
            if self.refuse > 0:
                self.refuse -= 1
                self.refused += 1
                hdrs = [("Content-Length", "0")]
                if self.retry_after is not None:
                    hdrs.append(("Retry-After", str(self.retry_after)))
                return (http.HTTPStatus.SERVICE_UNAVAILABLE, hdrs, b"")
        return None

    async def _handler(self, ws, path=None):
        conn = Conn(self, ws, 0)
        try:
            first = await asyncio.wait_for(ws.recv(), 10)
            hello = msgpack.unpackb(first, raw=False)
            if hello.get("t") != "hello":
                await ws.close(4400, "expected hello")
                return
            with self._cond:
                conn.hello = hello
                self.conns.append(conn)
                conn.index = len(self.conns)
                self._cond.notify_all()
            if self.welcome:
                await ws.send(encode("welcome", broker_id=self.broker_id, session_id=uuid7(),
                                     ping_interval_ms=20000, max_frame_bytes=131072))
            async for raw in ws:
                try:
                    frame = msgpack.unpackb(raw, raw=False)
                except Exception:  # noqa: BLE001 - record garbage as such
                    frame = {"t": "<undecodable>", "raw": raw}
                with self._cond:
                    conn.frames.append(frame)
                    self._cond.notify_all()
        except (websockets.ConnectionClosed, asyncio.TimeoutError):
            pass
        finally:
            with self._cond:
                conn.close_code = ws.close_code
                conn.close_reason = ws.close_reason
                conn.closed_at = time.monotonic()
                self._cond.notify_all()

    # -- test thread helpers
    def _call(self, coro, timeout=10.0):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _wait(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = predicate()
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"fake broker: timed out after {timeout}s waiting for {what}")
                self._cond.wait(min(left, 0.05))

    def wait_conn(self, n, timeout=15.0):
        """The n-th connection (1-based) that said HELLO."""
        return self._wait(lambda: self.conns[n - 1] if len(self.conns) >= n else None,
                          timeout, f"connection #{n}")

    def wait_attempts(self, n, timeout=15.0):
        return self._wait(lambda: list(self.attempts) if len(self.attempts) >= n else None,
                          timeout, f"{n} connection attempts")

    def stop(self):
        async def shutdown():
            self._server.close()
            await self._server.wait_closed()
        try:
            self._call(shutdown(), timeout=5)
        except Exception:  # noqa: BLE001 - best effort
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()


def write_recorder(path, log_file):
    """A stand-in for `systemctl reboot`: appends one line per run to log_file."""
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\necho \"reboot $$ $(date +%s)\" >> '{log_file}'\n")
    os.chmod(path, 0o755)
    return path
