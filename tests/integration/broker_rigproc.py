"""A minimal rig as its own process (so a test can SIGSTOP it): connects with
mutual TLS, says HELLO, ACKs every command and answers with a small RESULT.
usage: broker_rigproc.py URL RIG_ID CERT KEY CA [BOOT_ID]
"""
import asyncio
import ssl
import sys
import time

import broker_rawclient as rc


async def main(url, rig_id, cert, key, ca, boot_id=None):
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    ctx.check_hostname = False
    ctx.load_cert_chain(cert, key)
    ws = await rc.connect(url, ctx)
    await ws.send(rc.hello(rig_id, boot_id))
    print("welcome", (await rc.recv_msg(ws))["session_id"], flush=True)
    async for data in ws:
        m = rc.decode(data)
        if m.get("t") == "command":
            await ws.send(rc.frame("ack", seq=m["seq"], cmd_id=m["cmd_id"], duplicate=False))
            now = int(time.time() * 1000)
            await ws.send(rc.frame("result", cmd_id=m["cmd_id"], status="ok", exit_code=0, signal=0,
                                   output=b"ok\n", truncated=False, dropped_bytes=0,
                                   started_at_ms=now, finished_at_ms=now, detail=""))
        elif m.get("t") == "goaway":
            print("goaway", m["reconnect_after_ms"], flush=True)
            await ws.close(1001)
            return


if __name__ == "__main__":
    try:
        asyncio.run(main(*sys.argv[1:7]))
    except Exception as e:  # noqa: BLE001 - report and exit non-zero
        print("rig error", repr(e), flush=True)
        sys.exit(1)
