"""A benchmark's load or client in a process of its own: generating load, or
timing calls, in the bench's process would share its interpreter lock with
the bench's own work (parsing scrapes) and measure the bench."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any


class Child:
    """`target(*args, stop, out)` in a spawned process (gRPC does not survive
    a fork): it runs until `stop` is set, then puts its one result on `out`."""

    def __init__(self, target: Callable[..., None], *args: Any) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop, self._out = context.Event(), context.Queue()
        self._process = context.Process(target=target, args=(*args, self._stop, self._out), daemon=True)

    def start(self) -> None:
        self._process.start()

    def stop(self) -> Any:
        """Its result; it is killed if it has not ended 10 s after."""
        self._stop.set()
        try:
            return self._out.get(timeout=60)
        finally:
            self._process.join(timeout=10)
            if self._process.is_alive():
                self._process.kill()
