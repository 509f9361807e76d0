"""Rate limits: mutations per caller, telemetry records per stream. One
client must not keep the controller busy for everyone else (a stream once
kept the server parsing 18 M records in 127 s)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from controller.errors import RateLimited

MUTATIONS_PER_S = 50.0  # per caller, with bursts of twice that
TELEMETRY_RECORDS_PER_S = 50_000.0  # per stream, with bursts of twice that


class TokenBucket:
    """`rate` per second, at most `burst` at once."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.at = burst, now

    def take(self, amount: float, now: float) -> float:
        """0 if `amount` was taken; else the seconds until it could be (nothing taken)."""
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if amount <= self.tokens:
            self.tokens -= amount
            return 0.0
        return (amount - self.tokens) / self.rate


class MutationLimiter:
    """A bucket per caller (its certificate identity, or its address in the clear)."""

    MAX_CALLERS = 10_000  # past that, the idlest buckets go (they are full again anyway)

    def __init__(self, rate: float = MUTATIONS_PER_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self._lock = threading.Lock()

    def admit(self, caller: str, method: str) -> None:
        """Raises RateLimited (RESOURCE_EXHAUSTED, with when to retry) if `caller` is over its rate."""
        now = self.clock()
        with self._lock:
            bucket = self._buckets.get(caller)
            if bucket is None:
                if len(self._buckets) >= self.MAX_CALLERS:
                    for stale in sorted(self._buckets, key=lambda c: self._buckets[c].at)[: self.MAX_CALLERS // 10]:
                        del self._buckets[stale]
                bucket = self._buckets[caller] = TokenBucket(self.rate, 2 * self.rate, now)
            wait = bucket.take(1, now)
        if wait:
            raise RateLimited(
                f"{method}: over {self.rate:g} mutations per second for this caller; retry in {wait:.2f} s", wait
            )


def telemetry_bucket(rate: float = TELEMETRY_RECORDS_PER_S, clock: Callable[[], float] = time.monotonic):
    """A stream's budget of records: `take(n)` raises RateLimited past it."""
    bucket = TokenBucket(rate, 2 * rate, clock())

    def take(records: int) -> None:
        wait = bucket.take(records, clock())
        if wait:
            raise RateLimited(f"over {rate:g} telemetry records per second on this stream; retry in {wait:.2f} s", wait)

    return take
