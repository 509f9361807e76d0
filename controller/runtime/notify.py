"""systemd's readiness protocol (sd_notify(3)) for `Type=notify`: one
datagram to $NOTIFY_SOCKET per state change. Without that variable (not
run by systemd) it does nothing. Written out rather than a dependency: the
protocol is one `sendto`, and the libraries wrap libsystemd or are
unmaintained."""

from __future__ import annotations

import logging
import os
import socket
import time

log = logging.getLogger(__name__)


def notify(*states: str) -> bool:
    """Sends `states` ("READY=1", "STOPPING=1", ...); True if systemd was told."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address or not states:
        return False
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto("\n".join(states).encode(), address)
    except OSError as exc:
        log.warning("cannot notify systemd at %s: %s", os.environ.get("NOTIFY_SOCKET"), exc)
        return False
    return True


def ready(status: str) -> bool:
    return notify("READY=1", f"STATUS={status}")


def reloading() -> bool:
    # MONOTONIC_USEC lets systemd (253+, Type=notify-reload) match the reload to its signal.
    return notify("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")


def stopping() -> bool:
    return notify("STOPPING=1")
