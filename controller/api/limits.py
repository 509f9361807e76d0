"""Rate limits: mutations per caller; telemetry records per caller over all
its streams, and its streams at once. One client must not keep the
controller busy for everyone else (a stream once kept the server parsing
18 M records in 127 s; eight streams once each got a budget of their own)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from controller.errors import RateLimited

MUTATIONS_PER_S = 50.0  # per caller, with bursts of twice that
# Per caller over all its streams, with bursts of as much. The daemon
# ingests 43-54k records/s on a whole core (ft2-16k); a budget at half of
# that leaves the API its share even with one caller at its limit.
TELEMETRY_RECORDS_PER_S = 25_000.0
TELEMETRY_STREAMS_PER_CALLER = 8
HOLD_S = 1.0  # how long a stream opened during its caller's pushback is held before it is refused
PACE_S = 0.25  # how far ahead of its budget a caller's batch may be, and wait for it rather than be cut


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


class TelemetryBudget:
    """Telemetry records per second per caller (its certificate identity,
    or its address in the clear), shared by all its streams, and at most
    `streams` of them open at once. A batch a little over (PACE_S of the
    rate) waits its turn; one further over ends the stream.

    A caller that goes over is told to come back once its budget has
    refilled, and until then every stream it opens is refused at once: a
    client that reopens a cut stream without waiting gets nothing more,
    and a fresh stream brings no fresh budget."""

    MAX_CALLERS = 10_000

    def __init__(
        self,
        rate: float = TELEMETRY_RECORDS_PER_S,
        streams: int = TELEMETRY_STREAMS_PER_CALLER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate, self.streams, self.clock = rate, streams, clock
        self._callers: dict[str, _Caller] = {}
        self._lock = threading.Lock()

    def open(self, caller: str) -> TelemetryStream:
        """A stream's share of `caller`'s budget; RateLimited if it is over
        its streams. A caller still told to wait gets its stream, counted,
        and is refused by its `hold()`."""
        now = self.clock()
        with self._lock:
            state = self._callers.get(caller)
            if state is None:
                if len(self._callers) >= self.MAX_CALLERS:
                    idle = [c for c, s in self._callers.items() if not s.open]
                    for stale in sorted(idle, key=lambda c: self._callers[c].bucket.at)[: self.MAX_CALLERS // 10]:
                        del self._callers[stale]
                state = self._callers[caller] = _Caller(TokenBucket(self.rate, self.rate, now))
            if state.open >= self.streams:
                raise RateLimited(f"at most {self.streams} telemetry streams at once per caller", 1.0)
            state.open += 1
        return TelemetryStream(self, state)

    def _take(self, state: _Caller, records: int, sleep: Callable[[float], None]) -> None:
        now, pace = self.clock(), 0.0
        with self._lock:
            bucket = state.bucket
            if now < state.blocked_until:
                wait = state.blocked_until - now
            else:
                bucket.tokens = min(bucket.burst, bucket.tokens + (now - bucket.at) * self.rate)
                bucket.at = now
                # A little over: the batch waits its turn (the stream is not
                # read meanwhile, so the client is slowed by flow control) and
                # what is accepted stays at the rate, without bursts.
                wait = 0.0
                if bucket.tokens - records >= -self.rate * PACE_S:
                    bucket.tokens -= records
                    pace = max(0.0, -bucket.tokens / self.rate)
                else:
                    # Far over: cut, and back once the bucket is full again:
                    # a retry any sooner would be cut again after a batch or two.
                    wait = (bucket.burst - bucket.tokens) / self.rate
                    state.blocked_until = now + wait
        if wait:
            raise RateLimited(
                f"over {self.rate:g} telemetry records per second for this caller; retry in {wait:.2f} s", wait
            )
        if pace:
            sleep(pace)

    def _hold(self, state: _Caller, sleep: Callable[[float], None]) -> None:
        wait = state.blocked_until - self.clock()
        if wait <= 0:
            return
        # Held, not refused at once: a client that reopens at once, ignoring
        # the pushback, gets at most `streams` answers a HOLD_S, each costing
        # a sleeping thread instead of a call's work.
        sleep(min(wait, HOLD_S))
        wait = state.blocked_until - self.clock()
        if wait > 0:
            raise RateLimited(
                f"over {self.rate:g} telemetry records per second for this caller; retry in {wait:.2f} s", wait
            )

    def _close(self, state: _Caller) -> None:
        with self._lock:
            state.open -= 1


class _Caller:
    def __init__(self, bucket: TokenBucket) -> None:
        self.bucket = bucket
        self.open = 0
        self.blocked_until = 0.0


class TelemetryStream:
    """One open stream: `take(n)` spends the caller's budget (RateLimited
    past it); `close()` when the stream ends."""

    def __init__(self, budget: TelemetryBudget, state: _Caller) -> None:
        self._budget, self._state, self._closed = budget, state, False

    def hold(self, sleep: Callable[[float], None] = time.sleep) -> None:
        """Before the stream's first batch: if its caller is still told to
        wait, wait with it (HOLD_S at most); still told to, refuse (RateLimited)."""
        self._budget._hold(self._state, sleep)

    def take(self, records: int, sleep: Callable[[float], None] = time.sleep) -> None:
        """Spends `records` of the caller's budget: at once, after a wait of
        PACE_S at most, or not at all (RateLimited: the stream ends)."""
        self._budget._take(self._state, records, sleep)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._budget._close(self._state)
