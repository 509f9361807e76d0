"""The bounded watch both streaming watches (WatchJobs, WatchDecisions) are
built on: a cap on concurrent watchers, and one bounded queue per watcher.

Each watch holds a server thread for as long as it lasts, hence the cap. A
watcher that falls a whole queue behind is cut off with RESOURCE_EXHAUSTED
rather than buffered without bound: the publisher's thread never blocks on
a slow client, and the client knows to watch again (from a revision, or
with a replay).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from typing import Generic, TypeVar

import grpc

T = TypeVar("T")

# How often a waiting watch looks whether its call is still active: a
# cancelled call's callback wakes it sooner, unless its queue is full.
_POLL_S = 1.0


class WatchSlots:
    """At most `limit` watches of one RPC at once."""

    def __init__(self, limit: int, refusal: str) -> None:
        self._slots = threading.BoundedSemaphore(limit)
        self._refusal = refusal  # the RESOURCE_EXHAUSTED message when none is free

    @contextlib.contextmanager
    def held(self, context: grpc.ServicerContext) -> Iterator[None]:
        if not self._slots.acquire(blocking=False):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, self._refusal)
        try:
            yield
        finally:
            self._slots.release()


class BoundedWatch(Generic[T]):
    """One watcher's events: `put` from the publisher's thread (never
    blocks), `follow` from the stream's."""

    def __init__(self, size: int) -> None:
        self._events: queue.Queue[T | None] = queue.Queue(maxsize=size)  # None: the call ended
        self._overflow = threading.Event()

    def put(self, event: T) -> None:
        try:
            self._events.put_nowait(event)
        except queue.Full:
            self._overflow.set()

    def end_with(self, context: grpc.ServicerContext) -> None:
        """Wakes `follow` when the call ends (a full queue wakes it anyway, by its overflow)."""
        context.add_callback(lambda: self._events.put(None) if not self._events.full() else self._overflow.set())

    def follow(self, context: grpc.ServicerContext, behind: str) -> Iterator[T]:
        """The events as they come, until the call ends; an overflow aborts
        the call with RESOURCE_EXHAUSTED and `behind` as its message."""
        while context.is_active():
            if self._overflow.is_set():
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, behind)
            try:
                event = self._events.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if event is None:
                return
            yield event
