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

Trimming alone still left the free bytes growing 1.2-2.0 MiB a minute.
glibc serves a block of MMAP_THRESHOLD or more with its own mmap, given
back whole on free, but by default it raises that threshold (up to 32 MiB)
each time such a block is freed, so numpy arrays and batch buffers of a few
MiB move into the arenas and fragment them. Fixing the threshold at 1 MiB
(which also ends the raising) cut that growth to 0.15 MiB a minute and the
soak's RSS slope from 1.36 to 0.77 MiB a minute over 15 minutes.

`usage` reads glibc's own counters (mallinfo2), which the daemon exports
(HeapCollector) as `railyard_heap_bytes{state}`: RSS that grows while `in_use` stays flat is
malloc's free space, not a leak.

With another C library (musl) there is nothing to tune or read: `tune` says
so and returns False, `usage` returns None.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

ARENA_MAX = 2  # glibc's default: 8 per core
MMAP_THRESHOLD = 1 << 20  # glibc's default: 128 KiB, raised as big blocks are freed
TRIM_EVERY_S = 10.0
_M_ARENA_MAX = -8  # mallopt's parameters, from malloc.h
_M_MMAP_THRESHOLD = -3


_MALLINFO2 = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")


class _MallInfo2(ctypes.Structure):  # malloc.h's struct mallinfo2: ten size_t
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2]


@dataclass(frozen=True)
class HeapUsage:
    in_use: int  # bytes malloc has handed out: from its arenas, and mapped on their own
    free: int  # bytes malloc holds free in its arenas (the trim gives back their whole pages)
    mapped_blocks: int  # blocks with a mapping of their own (MMAP_THRESHOLD or more)


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc


def usage() -> HeapUsage | None:
    """malloc's counters now (each arena's lock taken in turn); None
    without glibc (2.33 or later)."""
    libc = _glibc()
    mallinfo2 = getattr(libc, "mallinfo2", None)  # glibc 2.33 and later
    if mallinfo2 is None:
        return None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return HeapUsage(in_use=info.uordblks + info.hblkhd, free=info.fordblks, mapped_blocks=info.hblks)


class HeapCollector(Collector):
    """`railyard_heap_bytes{state}` from one reading of malloc's counters per
    scrape; nothing where there are none to read."""

    NAME = "railyard_heap_bytes"
    HELP = (
        "glibc malloc's bytes by state: in_use (handed out, from its arenas and mapped on their own) and free"
        " (kept in its arenas); RSS that grows with in_use flat is free space, not a leak"
    )

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(self.NAME, self.HELP, labels=["state"])]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = usage()
        if now is None:
            return
        family = GaugeMetricFamily(self.NAME, self.HELP, labels=["state"])
        family.add_metric(["in_use"], now.in_use)
        family.add_metric(["free"], now.free)
        yield family


def tune(stop: threading.Event, every_s: float = TRIM_EVERY_S, arenas: int = ARENA_MAX) -> bool:
    """Caps malloc's arenas, fixes its mmap threshold and trims every
    `every_s` until `stop`, on a thread of its own; False (and nothing
    done) without glibc."""
    libc = _glibc()
    if libc is None:
        log.info("heap: not glibc, malloc left as it is")
        return False
    libc.mallopt(_M_ARENA_MAX, arenas)
    libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)

    def trim() -> None:
        while not stop.wait(every_s):
            libc.malloc_trim(0)

    threading.Thread(target=trim, name="heap-trim", daemon=True).start()
    return True
