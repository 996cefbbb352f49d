"""Round trip: warm-up, then sequential commands to random rigs, each timed from the
POST leaving the control client to the rig's ACK arriving back at that client."""
from benchlib.procs import benchctl

NAME = "round_trip"
TRANSPORTS = ("plain",)


def run(ctx):
    sim0 = ctx.fleet.totals()["cpu_s"]
    warmup, count = (20, 200) if ctx.bench.smoke else (200, 2000)
    r = benchctl(ctx.bench, ctx.broker.control, "rtt", ctx.n, warmup=warmup, count=count,
                 connections=1, kind="noop")
    r["rigsim_cpu_s"] = round(ctx.fleet.totals()["cpu_s"] - sim0, 3)
    return r
