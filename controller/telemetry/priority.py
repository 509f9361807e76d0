"""The API first: background work steps aside while API calls run.

Python threads have no priorities: a placement and a telemetry batch being
converted take turns on the interpreter lock, every 5 ms, however many
threads want it. Under 20,000 telemetry records a second, PlaceJob went
from 8 ms to a p50 of 80 ms that way. So the background (telemetry
conversion and ingest, TE cycles, metrics rendering) asks before each unit
of work whether an API call is running, and if so waits, at most
`max_wait_s`, for the API to be done: a steady stream of API calls slows
the background down, and never stops it.

A unit of background work already begun (a TE cycle's stage, up to a few
hundred milliseconds at 16K GPUs) cannot step aside, and a call needs the
lock back after each of its own waits (the store, the network): at the
interpreter's 5 ms a turn, with half a dozen busy threads, that is tens of
milliseconds. And much of a call happens before it can say it is running:
gRPC's own threads take the request off the wire, hand it to a worker and
decode it. So the daemon's threads take turns every SWITCH_S throughout
(`short_turns`), not only while a call runs: on ft2-16k at 20,000 records
a second, the time from the client's send to the handler fell from a p90
of 20 ms to 3 ms. It trades the median for the tail: in alternating
3-minute soaks (`bench.soak`), PlaceJob's p99 was 34-36 ms against 40-92,
its worst minute 49 against 57-181, and its p50 12-13 ms against 6-10,
with the same telemetry accepted and TE cycles run. With the flow catalog
stepping aside too (engine/catalog.py), a 20-minute soak read p50 5.8 ms
and p99 22.6 (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator

MAX_WAIT_S = 0.05
SWITCH_S = 0.0005  # the interpreter lock's turn in the daemon (the interpreter's own: 5 ms)
# A long background job (a TE cycle) rests REST_S after each BURST_S of its
# thread's CPU time: at most two thirds of the interpreter lock while it runs.
BURST_S = 0.01
REST_S = 0.005


def short_turns() -> None:
    """The daemon's threads hand the interpreter lock over every SWITCH_S."""
    sys.setswitchinterval(SWITCH_S)


class ApiFirst:
    def __init__(self, max_wait_s: float = MAX_WAIT_S) -> None:
        self.max_wait_s = max_wait_s
        self._running = 0
        self._idle = threading.Condition()
        self._thread = threading.local()  # per background thread: its CPU time when it last rested

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """Around an API call: the background waits while it runs."""
        with self._idle:
            self._running += 1
        try:
            yield
        finally:
            with self._idle:
                self._running -= 1
                if not self._running:
                    self._idle.notify_all()

    def yield_to_api(self) -> None:
        """Before a unit of background work: wait while API calls run (at most max_wait_s)."""
        if self._running:  # read without the lock: a stale answer costs one unit of work, either way
            with self._idle:
                self._idle.wait_for(lambda: not self._running, timeout=self.max_wait_s)

    def pace(self) -> None:
        """Between the pieces of a long background job (a TE cycle's stages,
        the routes of a cold catalog's new leaf pairs): as `yield_to_api`,
        and once the thread has spent BURST_S of CPU since it last rested,
        it sleeps REST_S. The API cannot ask for this itself: a call is
        taken off the wire, handed to a worker and decoded by gRPC's threads
        before it can say it is running, and each of those steps waits for
        the lock. A cold TE cycle on ft2-16k works out some 5,500 leaf
        pairs' routes in 0.8 s of the lock; a placement arriving then took
        61-139 ms, 77-95% of it before its handler began, in 5 of 7 soaks'
        first seconds; with the rests the first minute's slowest
        placement read 16-29 ms in 5 of 5 (docs/benchmarks.md)."""
        self.yield_to_api()
        spent = time.thread_time()
        rested = self._thread.__dict__.setdefault("rested", spent)
        if spent - rested >= BURST_S:
            time.sleep(REST_S)
            self._thread.rested = time.thread_time()
