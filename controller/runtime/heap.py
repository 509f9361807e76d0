"""The C heap: glibc's malloc, told to give back what the daemon has freed.

Under 20,000 telemetry records a second the daemon's Python objects hold
steady, yet its RSS crept 1-3 MiB a minute (bench.soak). glibc's own
counters (mallinfo2) showed where: over 10 minutes the bytes malloc had
handed out stayed at 75-95 MiB while the free bytes it kept for itself
grew from 9 to 125 MiB. Freed blocks (telemetry batches, protobuf
messages, numpy arrays) lie scattered over many per-thread arenas (glibc
makes up to 8 per core), and free() gives memory back to the system only
from the top of a heap. So the daemon caps the arenas at ARENA_MAX, and every
TRIM_EVERY_S asks malloc_trim to return the free pages of every arena
(madvise: the pages go, the address space stays; 0.6-7.2 ms a trim in a
soak, with each arena's lock held in turn, never the interpreter lock).

With another C library (musl) there is nothing to tune: `tune` says so
and returns False.
"""

from __future__ import annotations

import ctypes
import logging
import threading

log = logging.getLogger(__name__)

ARENA_MAX = 2  # glibc's default: 8 per core
TRIM_EVERY_S = 10.0
_M_ARENA_MAX = -8  # mallopt's parameter, from malloc.h


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc


def tune(stop: threading.Event, every_s: float = TRIM_EVERY_S, arenas: int = ARENA_MAX) -> bool:
    """Caps malloc's arenas and trims every `every_s` until `stop`, on a
    thread of its own; False (and nothing done) without glibc."""
    libc = _glibc()
    if libc is None:
        log.info("heap: not glibc, malloc left as it is")
        return False
    libc.mallopt(_M_ARENA_MAX, arenas)

    def trim() -> None:
        while not stop.wait(every_s):
            libc.malloc_trim(0)

    threading.Thread(target=trim, name="heap-trim", daemon=True).start()
    return True
