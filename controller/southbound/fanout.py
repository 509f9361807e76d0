"""Many switches' exchanges in flight at once: a pass's commit takes the
slowest switch's time, not the sum of all of them."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from controller.southbound.switches import SwitchError

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Pending(Protocol[T_co]):
    """An exchange in flight on one switch (switches.Exchange, switches.Dump)."""

    def result(self) -> T_co: ...


def fan_out(starts: Mapping[str, Callable[[], Pending[T]]], max_in_flight: int) -> dict[str, T | SwitchError]:
    """Starts one exchange per switch, at most `max_in_flight` unanswered at
    once, and collects each one's result (or the SwitchError it raised)."""
    results: dict[str, T | SwitchError] = {}
    window: deque[tuple[str, Pending[T]]] = deque()

    def finish_oldest() -> None:
        name, pending = window.popleft()
        try:
            results[name] = pending.result()
        except SwitchError as exc:
            results[name] = exc

    for name, start in starts.items():
        if len(window) >= max_in_flight:
            finish_oldest()
        try:
            window.append((name, start()))
        except SwitchError as exc:
            results[name] = exc
    while window:
        finish_oldest()
    return results
