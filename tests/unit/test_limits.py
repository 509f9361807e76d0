"""Token buckets, with an explicit clock."""

import pytest

from controller.api.limits import MutationLimiter, TelemetryBudget, TokenBucket
from controller.errors import RateLimited


def test_a_bucket_takes_its_burst_then_refills_at_its_rate():
    bucket = TokenBucket(rate=2.0, burst=4.0, now=0.0)
    assert [bucket.take(1, 0.0) for _ in range(4)] == [0.0] * 4
    assert bucket.take(1, 0.0) == pytest.approx(0.5)  # one token in half a second
    assert bucket.take(1, 0.5) == 0.0
    assert bucket.take(10, 100.0) == pytest.approx(3.0)  # never more than the burst: 4 there, 6 to wait for


def test_each_caller_has_its_own_budget_and_the_refusal_says_when_to_retry():
    now = [0.0]
    limiter = MutationLimiter(rate=1.0, clock=lambda: now[0])
    limiter.admit("a", "PlaceJob")
    limiter.admit("a", "PlaceJob")
    with pytest.raises(RateLimited) as err:
        limiter.admit("a", "PlaceJob")
    assert err.value.retry_after_s == pytest.approx(1.0) and "retry in 1.00 s" in str(err.value)
    limiter.admit("b", "PlaceJob")  # another caller is not affected
    now[0] = 1.0
    limiter.admit("a", "PlaceJob")


def test_a_callers_telemetry_budget_is_shared_by_its_streams_and_a_refusal_waits_out_the_refill():
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    budget = TelemetryBudget(rate=100.0, streams=8, clock=lambda: now[0])
    first, second = budget.open("agent"), budget.open("agent")
    first.take(80, sleep)
    second.take(40, sleep)  # the same caller's bucket: 20 over, a fifth of a second's worth, waits its turn
    assert slept == [pytest.approx(0.2)]
    with pytest.raises(RateLimited) as err:
        first.take(50, sleep)  # half a second over: cut
    # Back once the bucket is full again (100 records at 100/s), not in the
    # half second the batch alone would need.
    assert err.value.retry_after_s == pytest.approx(1.0)
    reopened = budget.open("agent")
    reopened.hold(sleep)  # a fresh stream brings no fresh budget: it is held until the bucket has refilled
    assert slept[-1] == pytest.approx(1.0)
    reopened.take(100, sleep)
    with pytest.raises(RateLimited):
        reopened.take(100, sleep)  # blocked again, for a second
    early = budget.open("agent")
    now[0] += 0.1
    with pytest.raises(RateLimited, match=r"retry in 0\.90 s"):
        early.hold(lambda s: None)  # a sleep that does not pass time: still told to wait, so refused
    other = budget.open("another")  # another caller is not affected
    other.take(100, sleep)


def test_a_caller_may_hold_only_so_many_streams():
    budget = TelemetryBudget(rate=10.0, streams=2, clock=lambda: 0.0)
    streams = [budget.open("agent"), budget.open("agent")]
    with pytest.raises(RateLimited, match="at most 2 telemetry streams"):
        budget.open("agent")
    streams[0].close()
    streams[0].close()  # twice is once
    budget.open("agent")
    with pytest.raises(RateLimited):
        budget.open("agent")
