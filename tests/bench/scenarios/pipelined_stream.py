"""Pipelined over the control stream (GET /v1/stream): the `pipelined` run, its
commands sent as JSON lines on one WebSocket (all that are ready in one frame) and
their ACKs read as lines on the same socket. What an automation client sending
many commands uses instead of one HTTP request per command."""
from scenarios import pipelined

NAME = "pipelined_stream"
TRANSPORTS = ("plain", "mtls")


def run(ctx):
    return pipelined.run(ctx, ack_via="stream")
