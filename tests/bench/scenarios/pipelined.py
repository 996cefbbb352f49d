"""Pipelined: a fixed number of commands in flight; throughput and latency, the first
part of the run not counted (warm-up)."""
from benchlib.procs import add_store_figures, benchctl

NAME = "pipelined"
TRANSPORTS = ("plain",)


def run(ctx, **via):
    """via: ack_via="stream" for the control stream (pipelined_stream): one socket."""
    sim0 = ctx.fleet.totals()["cpu_s"]
    store0 = ctx.broker.store_counts()
    broker0 = ctx.broker.cpu_seconds()
    total, skip = (2100, 100) if ctx.bench.smoke else (21000, 1000)
    inflight = 20 if ctx.bench.smoke else 100
    # Every HTTP connection is a descriptor of the broker, next to the N rigs.
    conns = max(1, min(inflight if ctx.bench.ack_via != "sse" else 16, ctx.bench.fd_room(ctx.n)))
    if via.get("ack_via") == "stream":
        conns = 1
    r = benchctl(ctx.bench, ctx.broker.control, "pipeline", ctx.n, count=total, warmup=skip,
                 inflight=inflight, connections=conns, kind="noop", **via)
    r["connections"] = conns
    r["rigsim_cpu_s"] = round(ctx.fleet.totals()["cpu_s"] - sim0, 3)
    broker_cpu = ctx.broker.cpu_seconds() - broker0
    r["broker_cpu_s"] = round(broker_cpu, 3)
    r["broker_cpu_us_per_cmd"] = round(broker_cpu * 1e6 / (total), 1)
    add_store_figures(r, store0, ctx.broker.store_counts(), total)
    return r
