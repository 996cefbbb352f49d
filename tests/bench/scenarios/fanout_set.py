"""Fan-out through the target-set endpoint: ONE POST /v1/commands selecting every
rig ("rig-*"), then the time until all N ACKs are in (median of 3). The same
measurement as `fanout`, without N HTTP requests in front of the broker."""
from benchlib.procs import add_store_figures, benchctl

NAME = "fanout_set"
TRANSPORTS = ("plain", "mtls")


def run(ctx):
    if ctx.bench.ack_via != "sse":
        return {"skipped": "needs --ack-via sse (ACKs are observed on the event stream)"}
    sim0 = ctx.fleet.totals()["cpu_s"]
    store0 = ctx.broker.store_counts()
    broker0 = ctx.broker.cpu_seconds()
    rounds = 1 if ctx.bench.smoke else 3
    r = benchctl(ctx.bench, ctx.broker.control, "fanout-set", ctx.n, repeat=rounds,
                 connections=1, kind="noop")
    r["rigsim_cpu_s"] = round(ctx.fleet.totals()["cpu_s"] - sim0, 3)
    broker_cpu = ctx.broker.cpu_seconds() - broker0
    r["broker_cpu_s"] = round(broker_cpu, 3)
    r["broker_cpu_us_per_cmd"] = round(broker_cpu * 1e6 / (ctx.n * rounds), 1)
    add_store_figures(r, store0, ctx.broker.store_counts(), ctx.n * rounds)
    return r
