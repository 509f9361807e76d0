"""A local etcd cluster (Debian's etcd-server) on loopback: one or three
members, each with its own data directory, for tests and benchmarks of the
etcd intent store and leader election. Stopped members can be started again
(same data) to test a member coming back."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from controller.intent.etcd_store import MAX_TXN_BYTES, MAX_TXN_OPS
from emulation.processes import end
from emulation.processes.controller_process import free_port

# What one Railyard change may need (a job document carries its flows), and
# history kept bounded: as the shipped deploy files run etcd.
ETCD_LIMITS = (
    f"--max-request-bytes={MAX_TXN_BYTES + 1024 * 1024}",
    f"--max-txn-ops={MAX_TXN_OPS + 1}",
    "--auto-compaction-mode=periodic",
    "--auto-compaction-retention=1h",
)


@dataclass(frozen=True)
class Member:
    name: str
    client_port: int
    peer_port: int

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"


class LocalEtcd:
    def __init__(self, members: int = 1, workdir: Path | None = None) -> None:
        if shutil.which("etcd") is None:
            raise RuntimeError("etcd is not installed (`make setup` installs Debian's etcd-server)")
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="railyard-etcd-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.members = [Member(f"m{i}", free_port(), free_port()) for i in range(members)]
        self.procs: dict[str, subprocess.Popen] = {}

    @property
    def endpoints(self) -> str:
        """host:port,host:port: what --store etcd:// takes."""
        return ",".join(f"127.0.0.1:{m.client_port}" for m in self.members)

    def store_url(self, prefix: str = "railyard") -> str:
        return f"etcd://{self.endpoints}/{prefix}"

    def start(self) -> LocalEtcd:
        for member in self.members:
            self.start_member(member.name)
        self.wait_healthy()
        return self

    def start_member(self, name: str) -> None:
        member = next(m for m in self.members if m.name == name)
        cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        data = self.workdir / member.name
        args = [
            "etcd",
            *("--name", member.name, "--data-dir", str(data)),
            *("--listen-client-urls", member.client_url, "--advertise-client-urls", member.client_url),
            *("--listen-peer-urls", member.peer_url, "--initial-advertise-peer-urls", member.peer_url),
            *("--initial-cluster", cluster, "--initial-cluster-state", "new"),
            *("--initial-cluster-token", f"railyard-{self.members[0].client_port}"),
            *("--heartbeat-interval", "100", "--election-timeout", "1000"),
            *ETCD_LIMITS,
            "--logger=zap",
        ]
        log = open(self.workdir / f"{member.name}.log", "ab")  # noqa: SIM115 - kept open for the process's life
        self.procs[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def stop_member(self, name: str) -> None:
        end(self.procs.pop(name))

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        pending = [m for m in self.members if m.name in self.procs]
        while pending:
            member = pending[0]
            try:
                with urllib.request.urlopen(member.client_url + "/health", timeout=2) as reply:
                    if b'"true"' in reply.read():
                        pending.pop(0)
                        continue
            except OSError:
                pass
            if self.procs[member.name].poll() is not None:
                raise RuntimeError(f"etcd {member.name} exited; see {self.workdir / member.name}.log")
            if time.monotonic() > deadline:
                raise TimeoutError(f"etcd {member.name} not healthy after {timeout_s:g} s")
            time.sleep(0.1)

    def stop(self) -> None:
        for name in list(self.procs):
            self.stop_member(name)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalEtcd:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
