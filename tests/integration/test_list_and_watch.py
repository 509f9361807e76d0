"""Informer-style list and watch over a real gRPC channel, against the real
daemon (no fabric needed: placement answers once intent is loaded): list,
change, watch from the listed revision: every event exactly once; a revision
the history has dropped, or one in the future, is OUT_OF_RANGE."""

import threading

import grpc
import pytest

from controller.api.gen.railyard.v1 import placement_pb2 as ppb
from tests.integration.helpers import api_daemon


@pytest.fixture
def daemon(tmp_path):
    with api_daemon(tmp_path, "--watch-history", "8") as ctl:
        yield ctl


def collect(stream, events: list, wanted: int, done: threading.Event) -> None:
    try:
        for event in stream:
            events.append(event)
            if len(events) == wanted:
                done.set()
    except grpc.RpcError:
        pass


def test_list_change_watch_shows_every_event_exactly_once(daemon):
    with daemon.client() as client:
        jobs, listed_at = client.list_jobs_at()
        assert jobs == []
        client.place_job("a", 2, "ring")  # after the list, before the watch: replayed
        events: list = []
        done = threading.Event()
        stream = client.watch_jobs(timeout_s=30, since_revision=listed_at)
        reader = threading.Thread(target=collect, args=(stream, events, 3, done), daemon=True)
        reader.start()
        client.place_job("b", 2, "ring")  # live
        client.release_job("a")
        assert done.wait(10), [(e.kind, e.job.job_id) for e in events]
        stream.cancel()
        got = [(ppb.JobEvent.Kind.Name(e.kind), e.job.job_id, e.intent_revision) for e in events]
        assert got == [
            ("KIND_PLACED", "a", listed_at + 1),
            ("KIND_PLACED", "b", listed_at + 2),
            ("KIND_RELEASED", "a", listed_at + 3),
        ]


def test_a_revision_the_history_dropped_or_a_future_one_is_out_of_range(daemon):
    with daemon.client() as client:
        _, listed_at = client.list_jobs_at()
        for i in range(5):  # ten events: two more than the history keeps
            client.place_job(f"j{i}", 2, "ring")
            client.release_job(f"j{i}")
        for since in (listed_at + 1, listed_at + 1000):
            with pytest.raises(grpc.RpcError) as err:
                next(iter(client.watch_jobs(timeout_s=10, since_revision=since)))
            assert err.value.code() is grpc.StatusCode.OUT_OF_RANGE, err.value.details()
            assert "list again" in (err.value.details() or "")
        # Still in reach: the last eight events replayed, in order.
        _, now = client.list_jobs_at()
        stream = client.watch_jobs(timeout_s=10, since_revision=now - 8)
        replayed = [next(stream).intent_revision for _ in range(8)]
        stream.cancel()
        assert replayed == list(range(now - 7, now + 1))
