"""PlaceJob's retry key: validation first, a mismatch named, a late retry
after release answered with the original, kept across a restart, forgotten
after its window. The real intent service on a real SQLite store."""

from __future__ import annotations

import pytest

from controller.errors import AlreadyExists
from controller.fabric import load_fabric
from controller.intent.retries import RETRY_WINDOW_S
from controller.intent.service import IntentService
from controller.intent.store import SqliteIntentStore
from controller.metrics import Metrics
from controller.te.jobs import JobError, JobRequest, Pattern

FABRIC = load_fabric()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def service(path, clock) -> IntentService:
    return IntentService(FABRIC, SqliteIntentStore(path), Metrics(sorted(FABRIC.switches)), clock=clock)


def ring(gpus: int = 4, key: str = "key-1", **kw) -> JobRequest:
    return JobRequest("train", gpus, Pattern.RING, 100.0, request_id=key, **kw)


def test_a_retry_returns_the_original_and_a_changed_retry_names_the_mismatch(tmp_path):
    svc = service(tmp_path / "i.db", Clock())
    job, created = svc.place_job(ring())
    assert created
    again, created = svc.place_job(ring())
    assert again == job and not created
    revision = svc.snapshot().revision
    with pytest.raises(JobError) as err:
        svc.place_job(ring(gpus=8))
    assert err.value.field == "request_id" and "gpu_count=4" in err.value.problem and "gpu_count=8" in err.value.problem
    with pytest.raises(JobError, match="pattern"):
        svc.place_job(JobRequest("train", 4, Pattern.TREE, 100.0, request_id="key-1"))
    with pytest.raises(AlreadyExists) as exists:  # another key for a job that exists
        svc.place_job(ring(key="key-2"))
    assert "(placed at 1970-01-01T00:16:40.000Z)" in str(exists.value)  # the clock's 1000 s, as a time
    assert svc.snapshot().revision == revision and svc.snapshot().jobs == {"train": job}


def test_an_invalid_request_is_refused_even_with_a_matching_key(tmp_path):
    svc = service(tmp_path / "i.db", Clock())
    svc.place_job(ring())
    for bad, field in ((ring(gpus=10**9), "gpu_count"), (ring(gpus=4, max_pods=-1), "max_pods")):
        with pytest.raises(JobError) as err:
            svc.place_job(bad)
        assert err.value.field == field
    with pytest.raises(JobError) as err:
        svc.place_job(JobRequest("train", 4, Pattern.RING, float("nan"), request_id="key-1"))
    assert err.value.field == "flow_gbps"


def test_a_late_retry_after_release_gets_the_original_across_a_restart_until_its_window_ends(tmp_path):
    clock = Clock()
    svc = service(tmp_path / "i.db", clock)
    job, _ = svc.place_job(ring())
    svc.release_job("train")
    clock.now += 60
    late, created = svc.place_job(ring())  # the original call's retry: no second job
    assert late == job and not created and "train" not in svc.snapshot().jobs
    with pytest.raises(JobError):  # and still a retry: other parameters are refused
        svc.place_job(ring(gpus=8))
    svc.close()
    svc = service(tmp_path / "i.db", clock)  # the key is in the store
    assert svc.place_job(ring()) == (job, False)
    clock.now += RETRY_WINDOW_S
    placed, created = svc.place_job(ring())  # past the window: a new placement
    assert created and svc.snapshot().jobs["train"] == placed


def test_a_new_key_after_release_places_anew_and_ends_the_old_replay(tmp_path):
    clock = Clock()
    svc = service(tmp_path / "i.db", clock)
    svc.place_job(ring())
    svc.release_job("train")
    fresh, created = svc.place_job(ring(key="key-2"))
    assert created
    svc.release_job("train")
    assert svc.place_job(ring(key="key-2")) == (fresh, False)
    placed, created = svc.place_job(ring(key="key-1"))  # key-1's replay ended when key-2 placed
    assert created and placed != fresh
    # A release without a key leaves nothing to replay, and stores nothing.
    svc.place_job(JobRequest("plain", 4, Pattern.RING, 100.0))
    svc.release_job("plain")
    assert svc.place_job(JobRequest("plain", 4, Pattern.RING, 100.0))[1]


def test_a_placement_over_the_requests_utilization_limit_is_refused_uncommitted(tmp_path):
    from controller.errors import Conflict

    svc = service(tmp_path / "i.db", Clock())
    revision = svc.snapshot().revision
    with pytest.raises(Conflict, match="over its max_predicted_utilization 1e-06; nothing was placed"):
        svc.place_job(ring(max_predicted_utilization=1e-6))
    assert svc.snapshot().revision == revision and not svc.snapshot().jobs
    job, created = svc.place_job(ring(max_predicted_utilization=0.9))
    assert created and job.predicted_max_utilization <= 0.9
    svc.close()
    again = service(tmp_path / "i.db", Clock())  # the limit is part of the stored request: a retry still matches
    assert again.place_job(ring(max_predicted_utilization=0.9)) == (job, False)
    with pytest.raises(JobError) as err:
        again.place_job(ring(max_predicted_utilization=0.5))
    assert "max_predicted_utilization=0.9" in err.value.problem
