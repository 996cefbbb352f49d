"""Test harness: real fleetlink brokers and agents on loopback.

Each test gets a Lab: a temporary directory with a lab CA made by
packaging/fleetlink-lab-ca, and helpers that start the real binaries, wait for
them, talk to the control API, and stop every process they started (by PID)
when the test ends.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

# What the tests make is writable by its owner only, whatever umask the runner has:
# the agent refuses a plugin, suite program or state directory that its group or
# others could write (docs/OPERATIONS.md, "The agent's trust in its files").
os.umask(0o022)

SOURCE_DIR = os.environ.get(
    "FLEETLINK_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD_DIR = os.environ.get("FLEETLINK_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
LAB_CA = os.path.join(SOURCE_DIR, "packaging", "fleetlink-lab-ca")

_BINARIES = {
    "fleetlink-broker": ["broker/fleetlink-broker"],
    "fleetlink-agent": ["agent/fleetlink-agent"],
    "fleetctl": ["broker/fleetctl/fleetctl", "broker/fleetctl"],
    "fleetlink-rigsim": ["tests/bench/fleetlink-rigsim"],
}


def binary(name):
    """Path of a built program, or SkipTest-free failure with a clear message."""
    for rel in _BINARIES.get(name, [name]):
        path = os.path.join(BUILD_DIR, rel)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    hint = " (configure with -DFLEETLINK_BUILD_BENCH=ON)" if name == "fleetlink-rigsim" else ""
    raise FileNotFoundError(f"{name} not built under {BUILD_DIR}{hint}")


def _names_config(args):
    return any(a == "--config" or str(a).startswith("--config=") for a in args)


def agent_command(*args):
    """argv of the built agent with args and no config file: without --config the
    agent reads the host's /etc/fleetlink/agent.conf when one exists (an installed
    package's), and a test must not depend on the host. --config '' reads no file;
    a test that passes its own --config gets that one."""
    return [binary("fleetlink-agent"), *([] if _names_config(args) else ["--config", ""]), *args]


def free_port(host="127.0.0.1"):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def rss_kb(pid):
    """Resident memory of a process in KiB (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def wait_for(predicate, timeout=10.0, interval=0.02, what="condition"):
    """Poll predicate until it returns a truthy value; return that value."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


class Certs:
    """A lab CA in a directory, issuing broker and rig certificates on demand."""

    def __init__(self, directory):
        self.dir = directory
        self._run("init", self.dir)
        self._run("broker", self.dir, "broker")
        self.ca = os.path.join(self.dir, "ca.crt")
        self.broker_cert = os.path.join(self.dir, "broker.crt")
        self.broker_key = os.path.join(self.dir, "broker.key")

    @staticmethod
    def _run(*args):
        subprocess.run([LAB_CA, *args], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)

    def rig(self, rig_id):
        """(cert, key) for rig_id, issued the first time it is asked for."""
        crt = os.path.join(self.dir, f"{rig_id}.crt")
        key = os.path.join(self.dir, f"{rig_id}.key")
        if not os.path.exists(crt):
            self._run("rig", self.dir, rig_id)
        return crt, key


def _flags(options):
    out = []
    for k, v in options.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            out.append(flag)
        elif v is False or v is None:
            continue
        elif isinstance(v, (list, tuple)):
            for item in v:
                out += [flag, str(item)]
        else:
            out += [flag, str(v)]
    return out


class Process:
    """A child process whose stdout+stderr go to a log file."""

    def __init__(self, lab, name, argv, env=None):
        self.lab = lab
        self.name = name
        self.argv = argv
        self.log_path = os.path.join(lab.dir, f"{name}.log")
        self._log = open(self.log_path, "ab")
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=full_env)
        self.pid = self.proc.pid
        lab._processes.append(self)

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_log(self, pattern, timeout=10.0, start=0):
        """Wait until the log (from byte offset start) matches the regex; return the match."""
        rx = re.compile(pattern)

        def check():
            if self.proc.poll() is not None and not rx.search(self.log()[start:]):
                raise AssertionError(
                    f"{self.name} exited ({self.proc.returncode}) before logging {pattern!r}:\n"
                    + self.log()[-4000:])
            return rx.search(self.log()[start:])
        return wait_for(check, timeout, what=f"{self.name} log {pattern!r}")

    def log_size(self):
        return os.path.getsize(self.log_path)

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        if self.alive():
            os.kill(self.pid, sig)

    def stop(self, timeout=10.0):
        """SIGTERM, then SIGKILL after timeout; returns the exit code."""
        if self.alive():
            try:
                os.kill(self.pid, signal.SIGCONT)
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def kill(self):
        """SIGKILL at once (a crash, as far as peers can tell)."""
        if self.alive():
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode


class Broker(Process):
    READY = r"fleetlink-broker ready control=([\d.]+):(\d+) listen=([\d.]+):(\d+)"

    def __init__(self, lab, name="broker", listen_port=0, control_port=0, args=None, **options):
        opts = {
            "listen": f"127.0.0.1:{listen_port}",
            "control": f"127.0.0.1:{control_port}",
            "cert": lab.certs.broker_cert,
            "key": lab.certs.broker_key,
            "ca": lab.certs.ca,
            "broker_id": name,
            "log_level": "debug",
            "strict": True,
            # Never the host's /var/lib: each broker of a test keeps its store in the lab.
            "state_dir": os.path.join(lab.dir, f"{name}-state"),
        }
        opts.update(options)
        super().__init__(lab, name, [binary("fleetlink-broker"), *_flags(opts), *(args or [])])
        m = self.wait_log(self.READY, timeout=15)
        self.control_host, self.control_port = m.group(1), int(m.group(2))
        self.listen_port = int(m.group(4))
        self.url = f"wss://127.0.0.1:{self.listen_port}/agent"
        self.token = opts.get("control_token")
        self.state_dir = opts.get("state_dir")  # to restart a broker on the same store

    @property
    def control_url(self):
        return f"http://{self.control_host}:{self.control_port}"

    def api(self, method, path, body=None, token=None, timeout=10.0):
        """(status, parsed JSON or text) from the control API."""
        conn = http.client.HTTPConnection(self.control_host, self.control_port, timeout=timeout)
        headers = {}
        tok = token if token is not None else self.token
        if tok:
            headers["Authorization"] = f"Bearer {tok}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        ctype = resp.getheader("Content-Type", "")
        if "json" in ctype:
            return resp.status, json.loads(raw)
        return resp.status, raw.decode("utf-8", "replace")

    def rigs(self, connected_only=True):
        """The rigs connected here (or every known one, offline included), by id."""
        status, body = self.api("GET", "/v1/rigs")
        assert status == 200, (status, body)
        return {r["rig_id"]: r for r in body["rigs"] if r["connected"] or not connected_only}

    def wait_rigs(self, rig_ids, timeout=15.0):
        want = set(rig_ids)
        return wait_for(lambda: want <= set(self.rigs()), timeout, what=f"rigs {sorted(want)}")

    def wait_rig_gone(self, rig_id, timeout=15.0):
        """Not connected here any more (an offline rig stays known)."""
        return wait_for(lambda: rig_id not in self.rigs(), timeout, what=f"{rig_id} gone")

    def send(self, rig_id, kind, args=None):
        """POST a command; (status, body)."""
        return self.api("POST", f"/v1/rigs/{rig_id}/commands",
                        {"kind": kind, "args": {k: str(v) for k, v in (args or {}).items()}})

    def command(self, cmd_id):
        status, body = self.api("GET", f"/v1/commands/{cmd_id}")
        assert status == 200, (status, body)
        return body

    FINAL = ("succeeded", "failed", "timed_out", "cancelled", "undeliverable", "rejected", "interrupted")

    def wait_command(self, cmd_id, states=FINAL, timeout=15.0):
        return wait_for(lambda: (lambda c: c if c["state"] in states else None)(self.command(cmd_id)),
                        timeout, what=f"command {cmd_id} in {states}")

    def run(self, rig_id, kind, args=None, timeout=15.0):
        """Send a command and wait for its final state; returns the command view."""
        status, body = self.send(rig_id, kind, args)
        assert status == 202, (status, body)
        return self.wait_command(body["cmd_id"], timeout=timeout)


class Agent(Process):
    def __init__(self, lab, rig_id, broker, state_dir=None, cert=None, key=None, args=None,
                 name=None, **options):
        crt, k = lab.certs.rig(rig_id)
        self.rig_id = rig_id
        self.state_dir = state_dir or os.path.join(lab.dir, f"state-{rig_id}")
        os.makedirs(self.state_dir, exist_ok=True)
        urls = broker if isinstance(broker, (list, tuple)) else [broker]
        opts = {
            "broker": [b.url if isinstance(b, Broker) else b for b in urls],
            "rig_id": rig_id,
            "cert": cert or crt,
            "key": key or k,
            "ca": lab.certs.ca,
            "state_dir": self.state_dir,
            "backoff_base_ms": 100,
            "backoff_cap_ms": 1000,
            "log_level": "debug",
            # Never the host's /etc/fleetlink/agent.conf (the agent's default): no
            # file unless the test names one.
            "config": "",
        }
        if _names_config(args or []):
            del opts["config"]
        opts.update(options)
        super().__init__(lab, name or f"agent-{rig_id}",
                         [binary("fleetlink-agent"), *_flags(opts), *(args or [])])


class Lab:
    """A temporary lab: CA, processes, cleanup. Use as a context manager or via LabTestCase."""

    def __init__(self, prefix="fleetlink-test-"):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self._processes = []
        self.certs = Certs(os.path.join(self.dir, "ca"))

    def broker(self, **kw):
        return Broker(self, **kw)

    def agent(self, rig_id, broker, **kw):
        return Agent(self, rig_id, broker, **kw)

    def process(self, name, argv, env=None):
        return Process(self, name, argv, env)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def close(self, keep=False):
        for p in reversed(self._processes):
            try:
                p.stop(timeout=5)
            except Exception:  # noqa: BLE001 - cleanup must go on
                pass
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(keep=exc[0] is not None and os.environ.get("FLEETLINK_KEEP_LAB") == "1")


class LabTestCase(unittest.TestCase):
    """unittest base class: self.lab is fresh for every test; logs are printed on failure."""

    def setUp(self):
        self.lab = Lab()
        # A cleanup, not tearDown: it also runs when a subclass's setUp fails after
        # starting processes (tearDown would not, and they would outlive the test).
        self.addCleanup(self._close_lab)

    def _close_lab(self):
        failed = False
        outcome = getattr(self, "_outcome", None)
        if outcome is not None:
            result = getattr(outcome, "result", None)
            errors = list(getattr(result, "errors", [])) + list(getattr(result, "failures", []))
            failed = any(test is self for test, _ in errors)
        if failed:
            for p in self.lab._processes:
                print(f"\n===== {p.name} (pid {p.pid}) log tail =====")
                try:
                    print(p.log()[-3000:])
                except OSError:
                    pass
        self.lab.close(keep=failed and os.environ.get("FLEETLINK_KEEP_LAB") == "1")
