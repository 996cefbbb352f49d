"""The processes a benchmark runs: a broker pinned to one CPU, rig simulators and the
control-API load client pinned to the other. Every process is started here, bounded
in time and stopped by its own PID."""
import json
import os
import re
import resource
import signal
import socket
import subprocess
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
READY = re.compile(r"fleetlink-broker ready control=([\d.]+):(\d+) listen=([\d.]+):(\d+)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _pinned(cpu, argv):
    if cpu is None or not os.path.exists("/usr/bin/taskset"):
        return argv
    return ["/usr/bin/taskset", "-c", str(cpu), *argv]


def proc_cpu_seconds(pid):
    """utime + stime of a process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Broker:
    """fleetlink-broker with a wss listener, a plain ws listener and the control API,
    on ports chosen once so that a restart comes back on the same addresses."""

    def __init__(self, bench, name, accept_rate, accept_burst, retry_after=(5, 15), extra=None):
        self.bench = bench
        self.name = name
        self.tls_port = free_port()
        self.plain_port = free_port()
        self.control_port = free_port()
        self.argv = [
            bench.binary("fleetlink-broker"),
            "--listen", f"127.0.0.1:{self.tls_port}",
            "--plain-listen", f"127.0.0.1:{self.plain_port}",
            "--control", f"127.0.0.1:{self.control_port}",
            "--cert", bench.ca.broker_cert, "--key", bench.ca.broker_key, "--ca", bench.ca.ca_cert,
            "--broker-id", name,
            "--accept-rate", str(accept_rate), "--accept-burst", str(accept_burst),
            "--retry-after-min-s", str(retry_after[0]), "--retry-after-max-s", str(retry_after[1]),
            "--log-level", "warn",
            # Every simulated TLS rig dials from one loopback address: no bound per source address.
            "--max-handshakes-per-address", "0",
            # A descriptor reserve of 16 + 32 leaves room for 19,900 rigs under the 20,000 open-files
            # limit (the default 64 control connections would keep 96 back).
            "--control-max-connections", "16",
            *bench.state_dir_args(name),
            *(extra or []),
        ]
        self.proc = None
        self.starts = 0

    @property
    def control(self):
        return f"127.0.0.1:{self.control_port}"

    def url(self, tls):
        return (f"wss://127.0.0.1:{self.tls_port}/agent" if tls
                else f"ws://127.0.0.1:{self.plain_port}/agent")

    def start(self, timeout=20.0):
        self.starts += 1
        self.log_path = self.bench.path(f"{self.name}-{self.starts}.log")
        self.log = open(self.log_path, "wb")
        self.started_at = time.monotonic()
        # Unpinned at start: the threads the broker starts before it is ready (the
        # command store's writer and checkpoints) may use either CPU. Its main thread,
        # the event loop, is pinned once it is ready (below): what the figures measure
        # is what one loop does; the CPU figures count every thread.
        self.proc = subprocess.Popen(self.argv, stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     preexec_fn=_raise_nofile)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}: {self.tail()}")
            with open(self.log_path, "rb") as f:
                if READY.search(f.read().decode(errors="replace")):
                    self.ready_after_s = time.monotonic() - self.started_at
                    if self.bench.broker_cpu is not None:
                        os.sched_setaffinity(self.proc.pid, {self.bench.broker_cpu})  # this thread only
                    return self
            time.sleep(0.01)
        raise RuntimeError(f"broker not ready after {timeout}s: {self.tail()}")

    def tail(self, n=2000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def cpu_seconds(self):
        return proc_cpu_seconds(self.proc.pid)

    def rss_bytes(self):
        return proc_rss_bytes(self.proc.pid)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc:
            self.log.close()

    def stop(self, timeout=10.0):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log.close()

    def api(self, method, path, body=None, timeout=10.0):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.control_port, timeout=timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            text = resp.read().decode(errors="replace")
            try:
                return resp.status, json.loads(text)
            except ValueError:
                return resp.status, text
        finally:
            conn.close()

    def store_counts(self):
        """(commits, rows written, seconds spent committing) of its command store, from
        /metrics (zeros for --store none), and the event loop's CPU seconds so far."""
        status, text = self.api("GET", "/metrics", timeout=30.0)
        names = ("store_commits_total", "store_rows_written_total", "store_commit_seconds_sum")
        found = {}
        if status == 200 and isinstance(text, str):
            for line in text.splitlines():
                name, _, value = line.partition(" ")
                if name.startswith("fleetlink_broker_") and name[len("fleetlink_broker_"):] in names:
                    found[name[len("fleetlink_broker_"):]] = float(value)
        return tuple(found.get(n, 0.0) for n in names) + (self.loop_cpu_seconds(),)

    def loop_cpu_seconds(self):
        """utime + stime of the broker's main thread alone: its event loop (the
        command store's threads are counted only in cpu_seconds())."""
        return proc_cpu_seconds(f"{self.proc.pid}/task/{self.proc.pid}")

    def rig_count(self):
        status, body = self.api("GET", "/v1/rigs", timeout=30.0)
        return len(body.get("rigs", [])) if status == 200 else -1


class RigSim:
    """One fleetlink-rigsim process; its JSON status lines are read on a thread."""

    def __init__(self, bench, url, count, start_index=0, source_ip=None, tls=False,
                 connect_rate=0, backoff_base_ms=1000, tag="rigsim", extra=None):
        self.count = count
        argv = [bench.binary("fleetlink-rigsim"), "--url", url, "--count", str(count),
                "--start-index", str(start_index), "--connect-rate", str(connect_rate),
                "--status-ms", "100", "--backoff-base-ms", str(backoff_base_ms),
                "--max-seconds", str(bench.max_seconds)]
        if tls:
            argv += ["--issue-ca", bench.ca.directory]
        if source_ip:
            # many source addresses: one address's ephemeral ports make connect() O(ports in use)
            argv += ["--source-ip", source_ip, "--source-ip-count", "64"]
        argv += extra or []
        self.err = open(bench.path(f"{tag}.err"), "wb")
        self.out_log = open(bench.path(f"{tag}.jsonl"), "w")
        self.proc = subprocess.Popen(_pinned(bench.load_cpu, argv), stdout=subprocess.PIPE,
                                     stderr=self.err, stdin=subprocess.DEVNULL,
                                     preexec_fn=_raise_nofile, text=True, bufsize=1)
        self.last = {}
        self.started = {}
        self.all_connected_events = []   # (monotonic time seen, status)
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.out_log.write(line)
            try:
                status = json.loads(line)
            except ValueError:
                continue
            with self.cond:
                if status.get("event") == "started":
                    self.started = status
                if status.get("event") == "all_connected":
                    self.all_connected_events.append((time.monotonic(), status))
                self.last = status
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait(self, predicate, timeout):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate(self.last):
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    return False
                self.cond.wait(min(left, 0.5))
        return True

    def wait_all_connected(self, timeout):
        return self.wait(lambda s: s.get("connected") == self.count, timeout)

    def snapshot(self):
        with self.cond:
            return dict(self.last)

    def stop(self, timeout=10.0):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(2)
        self.err.close()
        self.out_log.close()
        return self.snapshot()


class Fleet:
    """N simulated rigs spread over as many rigsim processes (and source addresses)
    as the open-files limit needs."""

    PER_PROCESS = 19_900

    def __init__(self, bench, broker, n, tls, connect_rate=0, backoff_base_ms=1000):
        self.n = n
        self.tls = tls
        procs = max(1, -(-n // self.PER_PROCESS))
        self.sims = []
        for k in range(procs):
            count = n // procs + (1 if k < n % procs else 0)
            start = sum(s.count for s in self.sims)
            self.sims.append(RigSim(bench, broker.url(tls), count, start_index=start,
                                    source_ip=f"127.{1 + k}.0.1",
                                    tls=tls, connect_rate=connect_rate / procs,
                                    backoff_base_ms=backoff_base_ms,
                                    tag=f"rigsim-{'mtls' if tls else 'plain'}-{n}-{k}"))

    def wait_all_connected(self, timeout):
        return all(s.wait_all_connected(timeout) for s in self.sims)

    def connected(self):
        return sum(s.snapshot().get("connected", 0) for s in self.sims)

    def totals(self):
        keys = ("connects", "connect_errors", "refused_503", "failed_handshakes", "tls_failures",
                "welcomes", "acks", "closes", "reconnects", "cpu_s", "cert_cpu_s")
        snaps = [s.snapshot() for s in self.sims]
        return {k: sum(s.get(k, 0) for s in snaps) for k in keys}

    def stop(self):
        for s in self.sims:
            s.stop()


def add_store_figures(r, before, after, commands):
    """What the command store did per command between two Broker.store_counts()."""
    if commands > 0:
        r["store_commits_per_cmd"] = round((after[0] - before[0]) / commands, 3)
        r["store_rows_per_cmd"] = round((after[1] - before[1]) / commands, 3)
        r["store_commit_us_per_cmd"] = round((after[2] - before[2]) * 1e6 / commands, 1)
        # Where the broker's CPU goes: the event loop (the rest is the store's threads).
        r["broker_loop_cpu_us_per_cmd"] = round((after[3] - before[3]) * 1e6 / commands, 1)
    commits = after[0] - before[0]
    if commits > 0:
        r["store_us_per_commit"] = round((after[2] - before[2]) * 1e6 / commits, 1)


def benchctl(bench, control, mode, n, **kw):
    # A scenario may name its own ack_via (the control stream); otherwise --ack-via.
    argv = [bench.binary("fleetlink-benchctl"), "--control", control, "--mode", mode,
            "--rig-count", str(n), "--ack-via", kw.pop("ack_via", bench.ack_via)]
    for key, value in kw.items():
        argv += ["--" + key.replace("_", "-"), str(value)]
    out = subprocess.run(_pinned(bench.load_cpu, argv), capture_output=True, text=True,
                         timeout=bench.max_seconds)
    try:
        result = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result = {"error": "no output", "stderr": out.stderr[-500:]}
    if out.stderr.strip():
        result["stderr"] = out.stderr[-500:]
    return result
