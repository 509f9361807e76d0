"""Watching from a revision: the intent service's bounded history of job
events replays what came after it, then the listener gets the rest, each
event exactly once; a revision the history no longer reaches, or one ahead
of the intent, is refused (RevisionGone: OUT_OF_RANGE on the API). The
history is bounded by events and by what their jobs weigh."""

from __future__ import annotations

import pytest

from controller.errors import RevisionGone
from controller.fabric import NicId, load_fabric
from controller.intent.events import JobEvent, JobEventKind, JobEvents, weight
from controller.intent.model import FlowMatch, FlowPin
from controller.intent.service import IntentService
from controller.intent.store import SqliteIntentStore
from controller.metrics import Metrics
from controller.te.jobs import JobRequest, Pattern

FABRIC = load_fabric()


def test_a_watch_from_a_revision_replays_then_follows_each_event_once(tmp_path):
    svc = IntentService(FABRIC, SqliteIntentStore(tmp_path / "i.db"), Metrics(sorted(FABRIC.switches)), watch_history=3)
    start = svc.snapshot().revision
    for name in ("a", "b"):
        svc.place_job(JobRequest(name, 2, Pattern.RING, 100.0))
    svc.release_job("a")
    svc.place_job(JobRequest("c", 2, Pattern.RING, 100.0))  # four events: the first is out of the history
    with pytest.raises(RevisionGone, match="older than the watch history"):
        svc.watch_from(start, lambda *_: None)
    live: list = []
    replayed = svc.watch_from(start + 1, lambda _intent, events: live.extend(events))
    assert [(e.kind.value, e.job.job_id, e.revision) for e in replayed] == [
        ("placed", "b", start + 2),
        ("released", "a", start + 3),
        ("placed", "c", start + 4),
    ]
    svc.place_job(JobRequest("d", 2, Pattern.RING, 100.0))
    assert [(e.job.job_id, e.revision) for e in live] == [("d", start + 5)]
    events, items = svc.events.held()
    assert events == 3 and items == sum(weight(e) for e in replayed[1:] + live)
    gauge = svc._metrics.watch_history  # what railyard_watch_history reads
    assert (gauge.labels("events")._value.get(), gauge.labels("items")._value.get()) == (events, items)
    # A change that is no job's (a pin) moves the revision on: watching from it is fine.
    svc.pin_flow(FlowPin("p", FlowMatch(NicId(0, 0, 0), NicId(0, 1, 0)), "rys0"))
    assert svc.watch_from(svc.snapshot().revision, lambda *_: None) == []
    with pytest.raises(RevisionGone, match="ahead of the intent"):
        svc.watch_from(svc.snapshot().revision + 1, lambda *_: None)


def test_the_history_also_keeps_no_more_than_its_weight_in_gpus_and_flows_and_always_the_last_event(tmp_path):
    svc = IntentService(FABRIC, SqliteIntentStore(tmp_path / "i.db"), Metrics(sorted(FABRIC.switches)))
    start = svc.snapshot().revision
    jobs = [svc.place_job(JobRequest(name, 2, Pattern.ALL_TO_ALL, 100.0))[0] for name in ("a", "b", "c")]
    heavy = len(jobs[0].gpus) + len(jobs[0].flows)
    events = JobEvents(svc.snapshot, history=100, items=2 * heavy)
    for revision, job in enumerate(jobs, start + 1):
        events.publish(svc.snapshot(), [JobEvent(JobEventKind.PLACED, job, revision)])
    assert sum(weight(e) for e in events.watch_from(start + 1, lambda *_: None)) <= 2 * heavy
    with pytest.raises(RevisionGone, match="older than the watch history"):
        events.watch_from(start, lambda *_: None)  # the first job's event went for its weight
    alone, now = JobEvents(svc.snapshot, history=100, items=1), svc.snapshot().revision
    alone.publish(svc.snapshot(), [JobEvent(JobEventKind.RELEASED, jobs[0], now + 1)])
    assert [e.job.job_id for e in alone.watch_from(now, lambda *_: None)] == ["a"]  # over the weight, yet kept
