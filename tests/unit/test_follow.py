"""A follower applying the leader's stored changes one at a time holds what
a full reload would: the same intent, capacity and job events."""

from dataclasses import replace

import pytest

from controller.fabric import NicId, load_fabric
from controller.intent.drains import DrainTarget
from controller.intent.model import FlowMatch, FlowPin
from controller.intent.service import IntentService
from controller.intent.store import BadStoredValue, Change, SqliteIntentStore
from controller.metrics import Metrics
from controller.te.jobs import JobRequest, Pattern, job_to_doc

FABRIC = load_fabric()


class Recording(SqliteIntentStore):
    """A store that keeps each change it wrote: what a follower's watch delivers."""

    def __init__(self, path) -> None:
        super().__init__(path)
        self.changes: list[tuple[Change, int]] = []

    def apply(self, change: Change, revision: int) -> None:
        super().apply(change, revision)
        self.changes.append((change, revision))


def replicas(tmp_path):
    metrics = Metrics(sorted(FABRIC.switches))
    leader_store = Recording(tmp_path / "leader.db")
    leader = IntentService(FABRIC, leader_store, metrics, clock=lambda: 1000.0)
    follower = IntentService(FABRIC, SqliteIntentStore(tmp_path / "follower.db"), metrics)
    return leader, leader_store, follower


def test_a_follower_applying_each_change_holds_what_a_reload_would(tmp_path):
    leader, store, follower = replicas(tmp_path)
    heard: list[tuple[str, str, int]] = []
    follower.subscribe(lambda intent, events: heard.extend((e.kind, e.job.job_id, e.revision) for e in events))
    told: list[tuple[str, str, int]] = []
    leader.subscribe(lambda intent, events: told.extend((e.kind, e.job.job_id, e.revision) for e in events))
    leader.pin_flow(FlowPin("p", FlowMatch(NicId(0, 0, 0), NicId(1, 0, 0)), "rys0"))
    leader.place_job(JobRequest("a", 4, Pattern.RING, 10.0, request_id="ra"))
    leader.place_job(JobRequest("b", 2, Pattern.RING, 10.0))
    leader.set_drain(DrainTarget.SWITCH, "rys1", True)  # moves the jobs' flows off it: one change, several records
    leader.release_job("a")  # its retry key stays, as a retired record
    leader.unpin("p")
    leader.set_drain(DrainTarget.SWITCH, "rys1", False)
    for change, revision in store.changes:
        follower.follow(change, revision)
    ours, theirs = follower.snapshot(), leader.snapshot()
    assert (ours.revision, dict(ours.jobs), dict(ours.pins), ours.drains) == (
        theirs.revision,
        dict(theirs.jobs),
        dict(theirs.pins),
        theirs.drains,
    )
    assert follower.free_capacity() == leader.free_capacity()
    assert follower._retired.keys() == leader._retired.keys() == {"a"}
    assert heard == told  # a follower's WatchJobs streams what the leader's does
    reloaded = IntentService(FABRIC, store, Metrics(sorted(FABRIC.switches)))
    assert dict(reloaded.snapshot().jobs) == dict(ours.jobs) and reloaded.snapshot().revision == ours.revision


def test_a_change_with_a_record_that_does_not_decode_applies_nothing(tmp_path):
    leader, store, follower = replicas(tmp_path)
    leader.place_job(JobRequest("a", 2, Pattern.RING, 10.0))
    change, revision = store.changes[-1]
    before = follower.snapshot()
    broken = Change(puts={**change.puts, ("job", "b"): {"gpus": "garbage"}})
    with pytest.raises(BadStoredValue, match="stored job 'b' is not a valid job record"):
        follower.follow(broken, revision)
    assert follower.snapshot() is before
    follower.follow(change, revision)
    assert list(follower.snapshot().jobs) == ["a"]


def test_a_followed_job_on_gpus_already_held_is_skipped_and_reported(tmp_path):
    leader, store, follower = replicas(tmp_path)
    job, _ = leader.place_job(JobRequest("a", 2, Pattern.RING, 10.0))
    follower.follow(*store.changes[-1])
    twin = replace(job, request=replace(job.request, job_id="twin"))
    follower.follow(Change(puts={("job", "twin"): job_to_doc(twin)}), 2)
    assert list(follower.snapshot().jobs) == ["a"] and follower.snapshot().revision == 2
