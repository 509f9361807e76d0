"""Processes run beside the fabric: the controller daemon as a child process, a
local Prometheus, etcd and slurmctld.
"""

from __future__ import annotations

import subprocess


def end(proc: subprocess.Popen | None, timeout_s: float = 10.0) -> None:
    """SIGTERM, and SIGKILL if it is still there after `timeout_s`; reaped either way."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
