"""Round trip over the control stream (GET /v1/stream): 200 warm-up then 2000
sequential commands to random rigs, each a JSON line on one WebSocket; the
latency is from writing the line to reading its "acked" line."""
from benchlib.procs import benchctl

NAME = "round_trip_stream"
TRANSPORTS = ("plain",)


def run(ctx):
    sim0 = ctx.fleet.totals()["cpu_s"]
    broker0 = ctx.broker.cpu_seconds()
    warmup, count = (20, 200) if ctx.bench.smoke else (200, 2000)
    r = benchctl(ctx.bench, ctx.broker.control, "rtt", ctx.n, warmup=warmup, count=count,
                 kind="noop", ack_via="stream")
    r["rigsim_cpu_s"] = round(ctx.fleet.totals()["cpu_s"] - sim0, 3)
    broker_cpu = ctx.broker.cpu_seconds() - broker0
    r["broker_cpu_s"] = round(broker_cpu, 3)
    r["broker_cpu_us_per_cmd"] = round(broker_cpu * 1e6 / (warmup + count), 1)
    return r
