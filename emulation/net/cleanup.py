"""Remove exactly what Railyard created: never `mn -c`, which deletes every OVS bridge on the host.

What counts as ours:
- bridges carrying the external_id `railyard-fabric` (set at creation);
- their ports' veth interfaces, and each bridge's own internal (tap) interface;
- Mininet shells named after our nodes (`mininet:ry...`), and every process
  living in one of our servers' network namespaces (iperf3 and the like),
  since any survivor keeps the namespace alive.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path

from controller.fabric import Fabric
from controller.fabric import addressing as ad
from emulation.net import netns, ovs

LOG = logging.getLogger(__name__)
_OUR_SHELL = re.compile(r"mininet:(" + ad.NAME_PREFIX + r"[a-z0-9]+)$")


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """While a fabric is up, SIGTERM unwinds the main thread (SystemExit) as
    Ctrl-C does, so every `with` and `finally` on the way out runs: the
    fabric comes down and the controllers a run started stop. By default
    SIGTERM ends Python where it stands and leaves them all behind. Outside
    the main thread (where signals cannot be handled), or where the program
    handles SIGTERM itself (`fabric up`), it changes nothing."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def unwind(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass
class TeardownReport:
    bridges: list[str] = field(default_factory=list)
    interfaces: list[str] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)


def kill_namespace_processes(netns_inodes: AbstractSet[int], spare: AbstractSet[int] = frozenset()) -> list[int]:
    """SIGKILL every process in one of these network namespaces (never the root one)."""
    inodes = set(netns_inodes) - {netns.netns_inode(os.getpid())}
    killed = []
    for pid, _cmdline, inode in _processes():
        if inode in inodes and pid != os.getpid() and pid not in spare:
            _kill(pid)
            killed.append(pid)
    _wait_gone(killed)
    return killed


def teardown(
    fabric: Fabric | None = None, netns_inodes: AbstractSet[int] = frozenset(), fabric_name: str | None = None
) -> TeardownReport:
    """Idempotent: safe to call on a fabric that is half up, down, or never existed.

    `netns_inodes` are recorded while the servers are alive: a stray process
    keeps a namespace alive after its Mininet shell is gone, and only the
    inode still names it then.
    """
    report = TeardownReport()
    name = fabric.spec.name if fabric else fabric_name
    node_names = set(fabric.switches) | {s.name for s in fabric.servers} if fabric else set()

    # 1. Processes in our servers' namespaces, then the Mininet shells themselves.
    report.processes = kill_namespace_processes(netns_inodes)
    for pid, cmdline, _inode in _processes():
        shell = _OUR_SHELL.search(cmdline)
        if pid != os.getpid() and shell and (not node_names or shell.group(1) in node_names):
            _kill(pid)
            report.processes.append(pid)

    # 2. Our bridges (by external_id), remembering their ports first.
    bridges = [b for b, owner in ovs.railyard_bridges().items() if name is None or owner == name]
    interfaces = set(bridges)
    for bridge in bridges:
        interfaces.update(ovs.run(["ovs-vsctl", "list-ports", bridge], check=False).split())
    ovs.delete_bridges(bridges)
    report.bridges = sorted(bridges)

    # 3. Veths left in the root namespace (a veth dies with its peer, so one end is enough).
    if fabric:
        interfaces.update(ad.switch_port_name(s, p) for s in fabric.switches for p in fabric.ports(s))
        interfaces.update(fabric.switches)
    existing = set(os.listdir("/sys/class/net"))
    for intf in sorted(interfaces & existing):
        if intf.startswith(ad.NAME_PREFIX):
            netns.run(None, ["ip", "link", "del", "dev", intf], check=False)
            report.interfaces.append(intf)
    _wait_gone(report.processes)
    return report


def teardown_from_state(path: Path, wait_owner: float = 20.0) -> TeardownReport:
    """`railyard fabric down`: ask the owning process to stop, then sweep."""
    state = json.loads(path.read_text())
    owner = state.get("pid")
    if owner and owner != os.getpid() and alive(owner):
        os.kill(owner, signal.SIGTERM)
        deadline = time.monotonic() + wait_owner
        while alive(owner) and time.monotonic() < deadline:
            time.sleep(0.2)
        if alive(owner):
            LOG.warning("fabric owner pid %s did not exit; sweeping anyway", owner)
    report = teardown(netns_inodes=set(state.get("netns_inodes", [])), fabric_name=state.get("fabric"))
    if state.get("ssl_certificate"):
        ovs.del_ssl_if(state["ssl_certificate"])  # the fabric's own SSL setting, if still there
    path.unlink(missing_ok=True)
    return report


def owner_gone(path: Path) -> bool:
    """A fabric state file whose owning process is gone (killed with -9, or
    its machine's run cut short): nobody is left to tear that fabric down."""
    owner = json.loads(path.read_text()).get("pid")
    return bool(owner) and owner != os.getpid() and not alive(owner)


def _processes():
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        yield pid, cmdline, netns.netns_inode(pid)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    """The process runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _wait_gone(pids: list[int], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
