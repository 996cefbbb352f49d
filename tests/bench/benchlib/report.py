"""The benchmark table: which figure of which scenario, and the bar it has at N = 19,900
(issue 6). Shared by `run` (one report) and `compare` (medians of several, and ratios)."""


def fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float):
        v = f"{v:.3f}" if abs(v) < 10 else f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.1f}"
    return f"{v}{unit}"


# (label, transport, scenario, key(s), rigsim-CPU key, bar at N = 19,900 from issue 6)
ROWS = [
    ("idle bytes/conn, plain", "plain", "density", "bytes_per_connection", "rigsim_cpu_s", ("<=", 2000)),
    ("idle bytes/conn, mTLS", "mtls", "density", "bytes_per_connection", "rigsim_cpu_s", ("<=", 16000)),
    ("new mTLS conns/s (ramp, wall)", "mtls", "density", "connects_per_s", "rigsim_cpu_s", None),
    ("new mTLS conns per broker CPU-s, full handshakes (ramp)", "mtls", "density", "connects_per_broker_cpu_s",
     None, (">=", 2000)),
    ("new mTLS conns per broker CPU-s, resumed (storm)", "mtls", "storm", "conns_per_broker_cpu_s", None,
     (">=", 2000)),
    ("round trip p50 ms", "plain", "round_trip", "p50_ms", "rigsim_cpu_s", ("<=", 0.10)),
    ("round trip p99 ms", "plain", "round_trip", "p99_ms", "rigsim_cpu_s", ("<=", 0.25)),
    ("round trip max ms", "plain", "round_trip", "max_ms", "rigsim_cpu_s", None),
    ("round trip p50 ms, control stream", "plain", "round_trip_stream", "p50_ms", "rigsim_cpu_s", ("<=", 0.10)),
    ("round trip p99 ms, control stream", "plain", "round_trip_stream", "p99_ms", "rigsim_cpu_s", ("<=", 0.25)),
    ("pipelined cmds/s", "plain", "pipelined", "cmds_per_s", "rigsim_cpu_s", (">=", 35000)),
    ("pipelined p50 ms", "plain", "pipelined", "p50_ms", "rigsim_cpu_s", None),
    ("pipelined p99 ms", "plain", "pipelined", "p99_ms", "rigsim_cpu_s", None),
    ("pipelined broker CPU µs/cmd", "plain", "pipelined", "broker_cpu_us_per_cmd", None, None),
    ("pipelined cmds/s, control stream", "plain", "pipelined_stream", "cmds_per_s", "rigsim_cpu_s",
     (">=", 35000)),
    ("pipelined p50 / p99 ms, control stream", "plain", "pipelined_stream", ("p50_ms", "p99_ms"), None, None),
    ("pipelined broker CPU µs/cmd, control stream", "plain", "pipelined_stream", "broker_cpu_us_per_cmd",
     None, None),
    ("fan-out s (median), a POST per rig", "plain", "fanout", "median_s", "rigsim_cpu_s", ("<=", 0.5)),
    ("fan-out s (median), one target-set POST", "plain", "fanout_set", "median_s", "rigsim_cpu_s", ("<=", 0.5)),
    # The same command paths over mutual TLS, as in production (no bar: the bars are for plain ws).
    ("mTLS: round trip p50 / p99 ms, control stream", "mtls", "round_trip_stream", ("p50_ms", "p99_ms"),
     "rigsim_cpu_s", None),
    ("mTLS: pipelined cmds/s, control stream", "mtls", "pipelined_stream", "cmds_per_s", "rigsim_cpu_s", None),
    ("mTLS: fan-out s (median), one target-set POST", "mtls", "fanout_set", "median_s", "rigsim_cpu_s", None),
    ("storm s, plain", "plain", "storm", "storm_s", "rigsim_cpu_s", None),
    ("storm broker CPU s, plain", "plain", "storm", "broker_cpu_s", None, ("<=", 1.5)),
    ("storm refused/failed, plain", "plain", "storm", ("refused_503", "failed_handshakes"), None, None),
    ("storm s, mTLS", "mtls", "storm", "storm_s", "rigsim_cpu_s", ("<=", 15)),
    ("storm broker CPU s, mTLS", "mtls", "storm", "broker_cpu_s", None, None),
    ("storm refused/failed, mTLS", "mtls", "storm", ("refused_503", "failed_handshakes"), None, None),
]


def table(report):
    sizes = [str(n) for n in report["sizes"]]
    lines = ["| figure | " + " | ".join(f"N={n} (rigsim CPU s)" for n in sizes) + " | bar (N=19900) |",
             "|---|" + "---|" * (len(sizes) + 1)]
    for label, transport, scen, key, cpu_key, bar in ROWS:
        cells = []
        for n in sizes:
            r = report["results"].get(n, {}).get(transport, {}).get(scen)
            if r is None:
                cells.append("-")
                continue
            if "error" in r:
                cells.append("error")
                continue
            if isinstance(key, tuple):
                cell = "/".join(fmt(r.get(k)) for k in key)
            else:
                cell = fmt(r.get(key))
            if cpu_key and r.get(cpu_key) is not None:
                cell += f" ({fmt(r.get(cpu_key))})"
            if bar and n == "19900" and isinstance(r.get(key), (int, float)):
                ok = r[key] <= bar[1] if bar[0] == "<=" else r[key] >= bar[1]
                cell += " ok" if ok else " MISS"
            cells.append(cell)
        bar_text = f"{bar[0]} {bar[1]}" if bar else ""
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {bar_text} |")
    return "\n".join(lines)


def _figure(report, size, transport, scen, key):
    r = report.get("results", {}).get(str(size), {}).get(transport, {}).get(scen)
    if not r or "error" in r:
        return None
    v = r.get(key)
    return v if isinstance(v, (int, float)) else None


def median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def comparison(base, new, size):
    """A table of every figure at one fleet size: the median over the `base` reports,
    the median over the `new` ones, and new / base. Several runs per side smooth a
    shared machine's noise; a ratio reads the same whatever the machine."""
    lines = [f"| figure (N={size}) | base, median of {len(base)} | new, median of {len(new)} | new / base | bar |",
             "|---|---|---|---|---|"]
    for label, transport, scen, key, _cpu_key, bar in ROWS:
        for k in (key if isinstance(key, tuple) else (key,)):
            b = median(_figure(r, size, transport, scen, k) for r in base)
            n = median(_figure(r, size, transport, scen, k) for r in new)
            if b is None and n is None:
                continue
            name = label if not isinstance(key, tuple) else f"{label} [{k}]"
            ratio = f"{n / b:.2f}" if b and n is not None else "-"
            bar_text = ""
            if bar and not isinstance(key, tuple) and n is not None and str(size) == "19900":
                ok = n <= bar[1] if bar[0] == "<=" else n >= bar[1]
                bar_text = f"{bar[0]} {bar[1]} {'ok' if ok else 'MISS'}"
            lines.append(f"| {name} | {fmt(b)} | {fmt(n)} | {ratio} | {bar_text} |")
    return "\n".join(lines)
