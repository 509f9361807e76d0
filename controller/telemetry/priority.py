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
hundred milliseconds at 16K GPUs) cannot step aside, and a placement needs
the lock back after each of its own waits (the store, the network): at 5
ms a turn that is tens of milliseconds. While an API call runs, turns are
API_SWITCH_S instead, and back to the interpreter's own when none is.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

MAX_WAIT_S = 0.05
API_SWITCH_S = 0.0005  # the interpreter lock's turn while an API call runs
OWN_SWITCH_S = sys.getswitchinterval()  # the interpreter's (5 ms), at other times


class ApiFirst:
    def __init__(self, max_wait_s: float = MAX_WAIT_S) -> None:
        self.max_wait_s = max_wait_s
        self._running = 0
        self._idle = threading.Condition()

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """Around an API call: the background waits while it runs."""
        with self._idle:
            self._running += 1
            if self._running == 1:
                sys.setswitchinterval(API_SWITCH_S)
        try:
            yield
        finally:
            with self._idle:
                self._running -= 1
                if not self._running:
                    sys.setswitchinterval(OWN_SWITCH_S)
                    self._idle.notify_all()

    def yield_to_api(self) -> None:
        """Before a unit of background work: wait while API calls run (at most max_wait_s)."""
        if self._running:  # read without the lock: a stale answer costs one unit of work, either way
            with self._idle:
                self._idle.wait_for(lambda: not self._running, timeout=self.max_wait_s)
