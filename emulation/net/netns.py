"""Run commands inside an emulated server's network namespace.

Mininet hosts are shells in their own network namespace; entering one with
nsenter works the same from the process that built the fabric and from any
other process (CLI, tests, the telemetry agent), given the shell's pid.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
from collections.abc import Sequence

from controller.errors import HostError


class NamespaceError(HostError):
    pass


def _prefix(pid: int | None) -> list[str]:
    return [] if pid is None else ["nsenter", "--target", str(pid), "--net", "--"]


def popen(pid: int | None, args: Sequence[str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen(_prefix(pid) + list(args), **kwargs)


def run(
    pid: int | None, args: Sequence[str], *, timeout: float = 30.0, check: bool = True, stdin: str | None = None
) -> str:
    proc = subprocess.run(_prefix(pid) + list(args), input=stdin, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        where = "root namespace" if pid is None else f"namespace of pid {pid}"
        raise NamespaceError(f"{' '.join(args)} failed in {where} ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def run_batch(pid: int | None, tool: str, lines: Sequence[str]) -> None:
    """`ip -batch -` / `tc -batch -`: one process for many commands."""
    if lines:
        run(pid, [tool, "-batch", "-"], stdin="\n".join(lines) + "\n")


def netns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


_CLONE_NEWNET = 0x40000000


def socket_in(pid: int, kind: socket.SocketKind) -> socket.socket:
    """An IPv4 socket that lives in the network namespace of `pid`, made by a
    short-lived thread that enters it (setns moves the calling thread only;
    Python 3.11 has no os.setns). A socket keeps the namespace it was made in,
    so any thread of this process may then use it: one process drives
    persistent connections between many emulated servers, with no process
    started per transfer."""
    made: list[socket.socket | BaseException] = []

    def enter_and_make() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    errno = ctypes.get_errno()
                    raise OSError(errno, f"setns into the namespace of pid {pid}: {os.strerror(errno)}")
            finally:
                os.close(fd)
            made.append(socket.socket(socket.AF_INET, kind))
        except BaseException as exc:  # handed to the caller's thread
            made.append(exc)

    thread = threading.Thread(target=enter_and_make, name=f"netns-{pid}")
    thread.start()
    thread.join()
    result = made[0]
    if isinstance(result, BaseException):
        raise NamespaceError(f"cannot open a socket in the namespace of pid {pid}: {result}") from result
    return result
