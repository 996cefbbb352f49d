"""Reconnect storm: the broker is killed (-9) and started again on the same ports under
N connected rigs. Time from the kill until every rig is back and WELCOMEd, the new
broker's CPU seconds, and the refused (503) and failed handshakes on the way."""
import time

NAME = "storm"
TRANSPORTS = ("plain", "mtls")


def tls_handshakes(fleet):
    """(full, resumed) TLS handshakes the rigs completed so far."""
    snaps = [s.snapshot() for s in fleet.sims]
    return (sum(s.get("tls_full", 0) for s in snaps), sum(s.get("tls_resumed", 0) for s in snaps))


def run(ctx):
    fleet, broker = ctx.fleet, ctx.broker
    before = fleet.totals()
    tls_before = tls_handshakes(fleet)
    t_kill = time.time() * 1000.0
    broker.kill()
    broker.start()
    deadline = time.monotonic() + ctx.bench.storm_timeout
    done = {}
    while time.monotonic() < deadline and len(done) < len(fleet.sims):
        for k, sim in enumerate(fleet.sims):
            with sim.cond:
                for _, status in sim.all_connected_events:
                    if status["t_ms"] > t_kill and k not in done:
                        done[k] = status["t_ms"]
        time.sleep(0.01)
    broker_cpu = broker.cpu_seconds()
    after = fleet.totals()
    tls_after = tls_handshakes(fleet)
    complete = len(done) == len(fleet.sims)
    return {
        "complete": complete,
        "storm_s": round((max(done.values()) - t_kill) / 1000.0, 3) if complete else None,
        "broker_ready_s": round(broker.ready_after_s, 3),
        "broker_cpu_s": round(broker_cpu, 3),
        "registered": broker.rig_count(),
        # The restarted broker's whole CPU (start-up included) per rig it took back.
        "conns_per_broker_cpu_s": round(ctx.n / broker_cpu, 1) if complete and broker_cpu > 0 else None,
        "refused_503": after["refused_503"] - before["refused_503"],
        "failed_handshakes": after["failed_handshakes"] - before["failed_handshakes"],
        "connect_errors": after["connect_errors"] - before["connect_errors"],
        "rigsim_cpu_s": round(after["cpu_s"] - before["cpu_s"], 3),
        "tls_full": tls_after[0] - tls_before[0],
        "tls_resumed": tls_after[1] - tls_before[1],
        "admission": ctx.admission,
    }
