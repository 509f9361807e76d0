"""Run the real controller daemon as a child process, the way a user would.

Used by scenarios, tests and benchmarks: it picks free loopback ports, starts
`railyard controller run`, waits until it serves and the fabric's switches
are connected, and reads its metrics over HTTP.
"""

from __future__ import annotations

import random
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from controller.api.client import Client, ClientTls


def free_port(kind: socket.SocketKind = socket.SOCK_STREAM) -> int:
    """A loopback port free now (TCP, or UDP with SOCK_DGRAM), from below the kernel's ephemeral range:
    a port the kernel hands out (bind to 0) can be taken, before its user
    binds it, by any outgoing connection (OVS to a controller, a client to
    etcd), which draws from that same range."""
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(PORT_FLOOR, low) if low > PORT_FLOOR + 1000 else 0
        if port in _ISSUED:
            continue  # handed out already in this process, perhaps not bound yet
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _ISSUED.add(s.getsockname()[1])
            return s.getsockname()[1]
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT_FLOOR = 20000  # above the well-known and registered ports services usually take
_ISSUED: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


@dataclass(frozen=True)
class Ports:
    openflow: int
    grpc: int
    metrics: int

    @classmethod
    def pick(cls) -> Ports:
        return cls(free_port(), free_port(), free_port())

    @property
    def controller_target(self) -> str:
        """What the switches are told to connect to."""
        return f"tcp:127.0.0.1:{self.openflow}"


Samples = dict[tuple[str, frozenset], float]


def parse_metrics(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of every sample of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


class ControllerProcess:
    def __init__(
        self,
        spec_path: str | Path | None,
        store: Path,
        ports: Ports,
        log_path: Path,
        reconcile_interval_s: float = 1.0,
        te: bool = True,
        extra_args: tuple[str, ...] = (),
        tls: ClientTls | None = None,
        launcher: tuple[str, ...] = (),
    ) -> None:
        self.spec_path = spec_path
        self.store = store
        self.ports = ports
        self.log_path = log_path
        self.reconcile_interval_s = reconcile_interval_s
        self.te = te
        self.extra_args = extra_args  # further `railyard controller run` options
        self.tls = tls  # what `client()` connects with, when the API is on mutual TLS
        self.launcher = launcher  # a command that execs the daemon's (e.g. as another user)
        self.proc: subprocess.Popen | None = None

    def start(self) -> ControllerProcess:
        args = [
            *self.launcher,
            sys.executable,
            "-m",
            "controller.cli",
            "controller",
            "run",
            "--store",
            str(self.store),
            "--openflow-listen",
            f"127.0.0.1:{self.ports.openflow}",
            "--grpc-listen",
            f"127.0.0.1:{self.ports.grpc}",
            "--metrics-listen",
            f"127.0.0.1:{self.ports.metrics}",
            "--reconcile-interval",
            str(self.reconcile_interval_s),
        ]
        if self.spec_path:
            args += ["--spec", str(self.spec_path)]
        if not self.te:
            args.append("--no-te")
        args += self.extra_args
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        return self

    def client(self, tls: ClientTls | None = None) -> Client:
        return Client(f"127.0.0.1:{self.ports.grpc}", tls=tls or self.tls)

    def scrape(self) -> str:
        """/metrics: over HTTPS, checked against the CA, when the daemon runs with TLS."""
        if self.tls is None:
            url, context = f"http://127.0.0.1:{self.ports.metrics}/metrics", None
        else:
            url, context = f"https://127.0.0.1:{self.ports.metrics}/metrics", ssl.create_default_context()
            context.load_verify_locations(cadata=self.tls.ca.decode())
        with urllib.request.urlopen(url, timeout=5, context=context) as reply:
            return reply.read().decode()

    def metrics(self) -> Samples:
        return parse_metrics(self.scrape())

    def wait_ready(self, switches: int, timeout_s: float = 30.0, serving: bool = True) -> Samples:
        """Until `switches` are connected, a connect reconcile ran and (unless
        serving=False, for a partial fabric) the API reports SERVING."""
        deadline = time.monotonic() + timeout_s
        last_error = "not started"
        while time.monotonic() < deadline:
            if self.proc and self.proc.poll() is not None:
                raise RuntimeError(f"controller exited with {self.proc.returncode}; see {self.log_path}")
            try:
                samples = self.metrics()
                with self.client() as client:
                    is_serving = client.serving()
                connected = total(samples, "railyard_switches_connected")
                reconciles = total(samples, "railyard_reconcile_runs_total", trigger="connect")
                if (is_serving or not serving) and connected >= switches and reconciles >= 1:
                    return samples
                last_error = (
                    f"serving={is_serving} connected={connected:g}/{switches} connect-reconciles={reconciles:g}"
                )
            except OSError as exc:
                last_error = str(exc)
            time.sleep(0.1)
        raise TimeoutError(f"controller not ready after {timeout_s:g} s ({last_error}); see {self.log_path}")

    def wait_serving_api(self, timeout_s: float = 60.0) -> None:
        """Until the gRPC API reports SERVING (no switches needed: a daemon with no fabric attached)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self.client() as client:
                if client.serving():
                    return
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"controller exited with {self.proc.returncode}; see {self.log_path}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"controller API not serving after {timeout_s:g} s; see {self.log_path}")
            time.sleep(0.1)

    def wait_reconciles(self, count: int = 1, timeout_s: float = 15.0) -> Samples:
        """Until `count` more reconcile passes finished (of any trigger)."""
        start = total(self.metrics(), "railyard_reconcile_runs_total")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            samples = self.metrics()
            if total(samples, "railyard_reconcile_runs_total") >= start + count:
                return samples
            time.sleep(0.05)
        raise TimeoutError(f"no {count} reconcile passes within {timeout_s:g} s; see {self.log_path}")

    def kill(self, sig: int = signal.SIGKILL) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def stop(self) -> int:
        return self.kill(signal.SIGTERM)
