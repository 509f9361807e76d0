"""The client's leader following over a real gRPC channel, against two
in-process servers that answer as a leader and a follower would."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from controller.api import client as client_module
from controller.api.client import LEADER_METADATA_KEY, Client
from controller.api.gen.railyard.v1 import placement_pb2_grpc as ppb_grpc


class Replica(ppb_grpc.PlacementServiceServicer):
    """Answers every PlaceJob with `code`, naming `leader` where it refuses to lead."""

    def __init__(self, code: grpc.StatusCode, leader: str | None = None) -> None:
        self.code, self.leader, self.calls = code, leader, 0

    def PlaceJob(self, request, context):
        self.calls += 1
        if self.leader is not None:
            context.set_trailing_metadata(((LEADER_METADATA_KEY, self.leader),))
        context.abort(self.code, f"{self.code.name} from a test replica")


@pytest.fixture
def replicas():
    started = []

    def start(*servicers: Replica) -> str:
        targets = []
        for servicer in servicers:
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
            ppb_grpc.add_PlacementServiceServicer_to_server(servicer, server)
            targets.append(f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}")
            server.start()
            started.append(server)
        return ",".join(targets)

    yield start
    for server in started:
        server.stop(None)


def test_a_placement_whose_first_attempt_went_unanswered_is_of_unknown_outcome_when_followers_then_refuse(
    replicas, monkeypatch
):
    monkeypatch.setattr(client_module, "ELECTION_WAIT_S", 1.0)
    # The leader fails mid-call; the other replica does not lead (yet).
    leader, follower = Replica(grpc.StatusCode.UNAVAILABLE), Replica(grpc.StatusCode.FAILED_PRECONDITION, leader="")
    with Client(replicas(leader, follower)) as client, pytest.raises(grpc.RpcError) as raised:
        client.place_job("job-1", 1, request_id="r-1")
    assert leader.calls == 1 and follower.calls > 1  # it followed, and kept asking for a leader
    assert raised.value.code() is grpc.StatusCode.UNAVAILABLE  # not the follower's refusal: it may have landed


def test_a_placement_refused_by_a_follower_alone_is_refused(replicas, monkeypatch):
    monkeypatch.setattr(client_module, "ELECTION_WAIT_S", 0.5)
    follower = Replica(grpc.StatusCode.FAILED_PRECONDITION, leader="")
    with Client(replicas(follower)) as client, pytest.raises(grpc.RpcError) as raised:
        client.place_job("job-1", 1, request_id="r-1")
    assert raised.value.code() is grpc.StatusCode.FAILED_PRECONDITION


def test_a_leaders_own_refusal_after_an_unanswered_attempt_is_its_answer(replicas):
    # The retry reached a leader, which looked for the job: its answer stands.
    lost, leader = Replica(grpc.StatusCode.UNAVAILABLE), Replica(grpc.StatusCode.RESOURCE_EXHAUSTED)
    with Client(replicas(lost, leader)) as client, pytest.raises(grpc.RpcError) as raised:
        client.place_job("job-1", 1, request_id="r-1")
    assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
