"""A local Slurm controller (Debian's slurmctld 22.05, with munge) on
loopback, for tests of the topology Railyard exports: a private munge key
and socket, a generated slurm.conf naming the given nodes (all at
127.0.0.1: no slurmd runs), and the given topology.conf beside it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from emulation.processes import end
from emulation.processes.controller_process import free_port

# SlurmctldHost names the address clients use; it does not choose the one
# slurmctld binds. NoCtldInAddrAny binds it to that address (loopback) and
# not to every interface.
SLURM_CONF = """ClusterName=railyard
SlurmctldHost=localhost
CommunicationParameters=NoCtldInAddrAny
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={dir}/munge.sock
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmUser=root
TopologyPlugin=topology/tree
SelectType=select/cons_tres
ProctrackType=proctrack/linuxproc
MpiDefault=none
NodeName={nodes} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=all Nodes=ALL Default=YES
"""


class LocalSlurm:
    def __init__(self, nodes: str, topology: str, workdir: Path | None = None) -> None:
        for tool in ("munged", "slurmctld", "scontrol"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} is not installed (`make setup` installs slurmctld, slurm-client, munge)")
        self._own_workdir = workdir is None
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="railyard-slurm-"))
        self.nodes = nodes  # a hostlist expression
        self.topology = topology  # topology.conf text
        self.env = {**os.environ, "SLURM_CONF": str(self.dir / "slurm.conf")}
        self.ctld: subprocess.Popen | None = None
        self.ctld_port = 0

    def start(self) -> LocalSlurm:
        (self.dir / "state").mkdir(parents=True, exist_ok=True)
        key = self.dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.ctld_port = free_port()
        conf = SLURM_CONF.format(dir=self.dir, ctld_port=self.ctld_port, slurmd_port=free_port(), nodes=self.nodes)
        (self.dir / "slurm.conf").write_text(conf)
        (self.dir / "topology.conf").write_text(self.topology)
        # --force: munged refuses to run as root otherwise; the key and socket are ours alone.
        subprocess.run(
            ["munged", "--force", f"--key-file={key}", f"--socket={self.dir}/munge.sock",
             f"--pid-file={self.dir}/munged.pid", f"--log-file={self.dir}/munged.log",
             f"--seed-file={self.dir}/munged.seed"],
            check=True, capture_output=True,
        )  # fmt: skip
        self.ctld = subprocess.Popen(
            ["slurmctld", "-D", "-i", "-f", str(self.dir / "slurm.conf")],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while self.scontrol("ping").returncode != 0:
            if self.ctld.poll() is not None:
                raise RuntimeError(f"slurmctld exited; see {self.dir}/slurmctld.log")
            if time.monotonic() > deadline:
                raise TimeoutError(f"slurmctld not answering after 30 s; see {self.dir}/slurmctld.log")
            time.sleep(0.2)
        return self

    def scontrol(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["scontrol", *args], env=self.env, capture_output=True, text=True, timeout=30)

    def log(self) -> str:
        path = self.dir / "slurmctld.log"
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        end(self.ctld, timeout_s=15)
        subprocess.run(["munged", f"--socket={self.dir}/munge.sock", "--stop"], capture_output=True)
        if self._own_workdir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
