"""Run commands inside an emulated server's network namespace.

Mininet hosts are shells in their own network namespace; entering one with
nsenter works the same from the process that built the fabric and from any
other process (CLI, tests, the telemetry agent), given the shell's pid.
"""

from __future__ import annotations

import os
import subprocess
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
