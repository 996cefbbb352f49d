"""Pipelined over the control stream (GET /v1/stream): the same commands in flight
as `pipelined`, sent as JSON lines on one WebSocket, their ACKs read on the same
socket. What an automation client sending many commands uses instead of one HTTP
request per command."""
from benchlib.procs import benchctl

NAME = "pipelined_stream"
TRANSPORTS = ("plain",)


def run(ctx):
    sim0 = ctx.fleet.totals()["cpu_s"]
    broker0 = ctx.broker.cpu_seconds()
    total, skip = (2100, 100) if ctx.bench.smoke else (21000, 1000)
    inflight = 20 if ctx.bench.smoke else 100
    r = benchctl(ctx.bench, ctx.broker.control, "pipeline", ctx.n, count=total, warmup=skip,
                 inflight=inflight, kind="noop", ack_via="stream")
    r["rigsim_cpu_s"] = round(ctx.fleet.totals()["cpu_s"] - sim0, 3)
    broker_cpu = ctx.broker.cpu_seconds() - broker0
    r["broker_cpu_s"] = round(broker_cpu, 3)
    r["broker_cpu_us_per_cmd"] = round(broker_cpu * 1e6 / total, 1)
    return r
