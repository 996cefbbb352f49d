"""A raw fleetlink rig client for broker tests: speaks the wire format directly
(msgpack maps over WebSocket binary frames) so tests can send exactly the frames
a well-behaved agent never would. Uses python3-websockets (asyncio) + python3-msgpack.
"""
import asyncio
import os
import ssl
import time

import msgpack
import websockets

# The WebSocket subprotocol of the rig protocol: fleetlink::kSubprotocol
# (sdk/include/fleetlink/messages.hpp; test_vectors_python checks they agree). Every
# test that dials a broker or plays one takes it from here.
SUBPROTOCOL = "fleetlink.v1"

ORDER = {
    "hello": ["rig_id", "agent_version", "boot_id", "labels", "kinds"],
    "ack": ["seq", "cmd_id", "duplicate"],
    "nack": ["seq", "cmd_id", "reason", "detail", "expected_seq"],
    "result": ["cmd_id", "status", "exit_code", "signal", "output", "truncated", "dropped_bytes",
               "started_at_ms", "finished_at_ms", "detail"],
    "output": ["cmd_id", "offset", "data"],
    "event": ["name", "fields", "at_ms"],
}


def uuid7(ms=None):
    """UUIDv7 text (RFC 9562): text order = time order."""
    ms = int(time.time() * 1000) if ms is None else ms
    rnd = bytearray(os.urandom(10))
    b = ms.to_bytes(6, "big") + bytes([0x70 | (rnd[0] & 0x0F), rnd[1], 0x80 | (rnd[2] & 0x3F)]) + bytes(rnd[3:10])
    h = b.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def frame(t, **fields):
    m = {"v": 1, "t": t}
    for k in ORDER.get(t, []):
        if k in fields:
            m[k] = fields.pop(k)
    m.update(fields)
    return msgpack.packb(m, use_bin_type=True)


def hello(rig_id, boot_id=None, kinds=("dmesg", "reboot", "suite"), labels=None, version="test-0.1"):
    return frame("hello", rig_id=rig_id, agent_version=version, boot_id=boot_id or uuid7(),
                 labels=dict(labels or {}), kinds=list(kinds))


def decode(data):
    return msgpack.unpackb(data, raw=False)


def tls_context(certs, rig_id=None, cert=None, key=None):
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=certs.ca)
    ctx.check_hostname = False
    if rig_id or cert:
        c, k = (cert, key) if cert else certs.rig(rig_id)
        ctx.load_cert_chain(c, k)
    return ctx


async def connect(url, ctx=None, **kw):
    kw.setdefault("max_size", 4 << 20)
    kw.setdefault("open_timeout", 10)
    kw.setdefault("ping_interval", None)
    return await websockets.connect(url, ssl=ctx, subprotocols=[SUBPROTOCOL], **kw)


def close_code(ws):
    """The close code the broker sent, or None."""
    rcvd = getattr(ws, "close_rcvd", None)
    if rcvd is not None:
        return rcvd.code
    return getattr(ws, "close_code", None)


async def wait_closed_code(ws, timeout=5.0):
    try:
        while True:
            await asyncio.wait_for(ws.recv(), timeout)
    except (websockets.ConnectionClosed, asyncio.TimeoutError):
        pass
    await asyncio.wait_for(ws.wait_closed(), timeout)
    return close_code(ws)


async def recv_msg(ws, timeout=5.0, skip=("goaway",)):
    while True:
        data = await asyncio.wait_for(ws.recv(), timeout)
        m = decode(data)
        if m.get("t") in skip:
            continue
        return m


async def rig_session(url, ctx, rig_id, boot_id=None, **kw):
    """Connect and say hello; returns (ws, welcome)."""
    ws = await connect(url, ctx, **kw)
    await ws.send(hello(rig_id, boot_id))
    welcome = await recv_msg(ws)
    assert welcome["t"] == "welcome", welcome
    return ws, welcome
