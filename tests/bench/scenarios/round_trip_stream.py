"""Round trip over the control stream (GET /v1/stream): the `round_trip` run, each
command a JSON line on one WebSocket, its latency from writing the line to reading
its "acked" line."""
from scenarios import round_trip

NAME = "round_trip_stream"
TRANSPORTS = ("plain", "mtls")


def run(ctx):
    return round_trip.run(ctx, ack_via="stream")
