"""Token buckets, with an explicit clock."""

import pytest

from controller.api.limits import MutationLimiter, TokenBucket, telemetry_bucket
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


def test_a_telemetry_stream_budget_counts_records():
    now = [0.0]
    take = telemetry_bucket(rate=10.0, clock=lambda: now[0])
    take(20)
    with pytest.raises(RateLimited):
        take(1)
    now[0] = 1.0
    take(10)
