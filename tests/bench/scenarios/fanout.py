"""Fan-out: one command to every connected rig; time until every ACK is in (median of 3)."""
from benchlib.procs import add_store_figures, benchctl

NAME = "fanout"
TRANSPORTS = ("plain",)


def run(ctx):
    sim0 = ctx.fleet.totals()["cpu_s"]
    store0 = ctx.broker.store_counts()
    broker0 = ctx.broker.cpu_seconds()
    conns = max(1, min(32, ctx.bench.fd_room(ctx.n)))
    r = benchctl(ctx.bench, ctx.broker.control, "fanout", ctx.n, repeat=1 if ctx.bench.smoke else 3,
                 inflight=ctx.n, connections=conns, kind="noop")
    r["connections"] = conns
    r["rigsim_cpu_s"] = round(ctx.fleet.totals()["cpu_s"] - sim0, 3)
    broker_cpu = ctx.broker.cpu_seconds() - broker0
    r["broker_cpu_s"] = round(broker_cpu, 3)
    r["broker_cpu_us_per_cmd"] = round(broker_cpu * 1e6 / (ctx.n * (1 if ctx.bench.smoke else 3)), 1)
    add_store_figures(r, store0, ctx.broker.store_counts(), ctx.n * (1 if ctx.bench.smoke else 3))
    return r
