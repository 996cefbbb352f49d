"""Round trip: warm-up, then sequential commands to random rigs, each timed from the
POST leaving the control client to the rig's ACK arriving back at that client."""
from benchlib.procs import add_store_figures, benchctl

NAME = "round_trip"
TRANSPORTS = ("plain",)


def run(ctx, **via):
    """via: ack_via="stream" for the control stream (round_trip_stream)."""
    sim0 = ctx.fleet.totals()["cpu_s"]
    store0 = ctx.broker.store_counts()
    broker0 = ctx.broker.cpu_seconds()
    warmup, count = (20, 200) if ctx.bench.smoke else (200, 2000)
    r = benchctl(ctx.bench, ctx.broker.control, "rtt", ctx.n, warmup=warmup, count=count,
                 connections=1, kind="noop", **via)
    r["rigsim_cpu_s"] = round(ctx.fleet.totals()["cpu_s"] - sim0, 3)
    broker_cpu = ctx.broker.cpu_seconds() - broker0
    r["broker_cpu_s"] = round(broker_cpu, 3)
    r["broker_cpu_us_per_cmd"] = round(broker_cpu * 1e6 / (warmup + count), 1)
    add_store_figures(r, store0, ctx.broker.store_counts(), warmup + count)
    return r
