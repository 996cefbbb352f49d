"""Idle density: broker VmRSS before and after the fleet connected and went idle."""
NAME = "density"
TRANSPORTS = ("plain", "mtls")


def run(ctx):
    # The fixture (run: FleetFixture.connect) measured around the connection ramp.
    f = ctx.fixture
    per_conn = (f.rss_after - f.rss_before) / ctx.n
    return {
        "rss_before_bytes": f.rss_before,
        "rss_after_bytes": f.rss_after,
        "bytes_per_connection": round(per_conn, 1),
        "connect_s": round(f.connect_s, 3),
        "connects_per_s": round(ctx.n / f.connect_s, 1) if f.connect_s > 0 else None,
        "broker_cpu_connect_s": round(f.broker_cpu_connect, 3),
        # what one broker core could accept per second: robust to a shared machine
        "connects_per_broker_cpu_s": round(ctx.n / f.broker_cpu_connect, 1) if f.broker_cpu_connect > 0 else None,
        "rigsim_cpu_s": round(f.sim_cpu_connect, 3),
        "refused_503": f.refused,
    }
