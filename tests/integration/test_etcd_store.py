"""The etcd intent store and leader election against a real etcd (Debian's
etcd-server, three members on loopback): compare-and-swap between writers,
the leadership fence, failover between members, and an election that moves
when its leader stops."""

import http.server
import socket
import threading
import time

import pytest

from controller.errors import AlreadyExists, NotLeader
from controller.fabric import load_fabric
from controller.intent.election import LEASE_TTL_S, Election, Leadership
from controller.intent.etcd_store import EtcdIntentStore, EtcdKv, EtcdUrl, StoreConflict, StoreUnavailable
from controller.intent.model import RecordKind
from controller.intent.service import IntentService
from controller.intent.store import Change
from controller.metrics import Metrics
from controller.te.jobs import JobRequest, Pattern
from emulation.processes.etcd_local import LocalEtcd

FABRIC = load_fabric()


@pytest.fixture(scope="module")
def etcd():
    with LocalEtcd(members=3) as cluster:
        yield cluster


def store(etcd, prefix: str) -> EtcdIntentStore:
    return EtcdIntentStore(EtcdKv(EtcdUrl.parse(etcd.store_url(prefix))))


def test_changes_round_trip_with_their_revision(etcd):
    first = store(etcd, "roundtrip")
    assert first.load().revision == 0
    first.apply(Change(puts={(RecordKind.PIN, "a"): {"x": 1}, (RecordKind.JOB, "j"): {"y": [1, 2]}}), 1)
    first.apply(Change(puts={(RecordKind.DRAINED_LINK, "ryl0r0:3"): {}}, deletes=frozenset({(RecordKind.PIN, "a")})), 2)
    again = store(etcd, "roundtrip").load()
    assert again.revision == 2
    assert dict(again.records) == {("job", "j"): {"y": [1, 2]}, ("drain-link", "ryl0r0:3"): {}}


def test_of_two_writers_that_read_the_same_intent_exactly_one_wins(etcd):
    writers = [store(etcd, "race"), store(etcd, "race")]
    for writer in writers:
        writer.load()
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def write(index: int) -> None:
        barrier.wait()
        try:
            writers[index].apply(Change(puts={(RecordKind.JOB, "same"): {"by": index}}), 1)
            outcomes.append(f"won {index}")
        except StoreConflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes)[0] == "conflict" and sorted(outcomes)[1].startswith("won"), outcomes
    winner = int(next(o for o in outcomes if o.startswith("won")).split()[1])
    assert dict(store(etcd, "race").load().records) == {(RecordKind.JOB, "same"): {"by": winner}}


def test_two_replicas_placing_the_same_job_through_the_store_one_wins(etcd):
    metrics = Metrics(sorted(FABRIC.switches))
    replicas = [IntentService(FABRIC, store(etcd, "place-race"), metrics) for _ in range(2)]
    request = JobRequest("contended", 4, Pattern.RING, 0.0)
    barrier = threading.Barrier(2)
    outcomes: list[object] = []

    def place(replica: IntentService) -> None:
        barrier.wait()
        try:
            outcomes.append(replica.place_job(request)[0])
        except StoreConflict as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=place, args=(r,)) for r in replicas]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    placed = [o for o in outcomes if not isinstance(o, Exception)]
    assert len(placed) == 1 and sum(isinstance(o, StoreConflict) for o in outcomes) == 1, outcomes
    stored = IntentService(FABRIC, store(etcd, "place-race"), metrics).snapshot()
    assert list(stored.jobs) == ["contended"] and stored.jobs["contended"] == placed[0]
    # The loser reloads before its next change: the job is there, and a second
    # placement of it is refused as such, not as a conflict.
    for replica in replicas:
        with pytest.raises(AlreadyExists):
            replica.place_job(JobRequest("contended", 2, Pattern.RING, 0.0))


def test_a_deposed_leaders_write_is_refused_by_the_fence(etcd):
    kv = EtcdKv(EtcdUrl.parse(etcd.store_url("fence")))
    changes: list[Leadership] = []
    first = Election(kv, "replica-a:1", changes.append)
    first.step()
    assert first.state.ours and first.state.generation > 0
    writer = store(etcd, "fence")
    writer.load()
    writer.fence = first.state.generation
    writer.apply(Change(puts={(RecordKind.PIN, "p"): {}}), 1)
    kv.revoke(first._lease)  # the lease is gone (as if it expired): another replica takes over
    second = Election(EtcdKv(EtcdUrl.parse(etcd.store_url("fence"))), "replica-b:1", changes.append)
    second.step()
    assert second.state.ours and second.state.generation > first.state.generation
    with pytest.raises(StoreConflict):
        writer.apply(Change(puts={(RecordKind.PIN, "late"): {}}), 2)
    assert ("pin", "late") not in store(etcd, "fence").load().records


def test_the_election_moves_within_the_lease_when_the_leader_stops(etcd):
    seen: dict[str, list[Leadership]] = {"a": [], "b": []}
    a = Election(EtcdKv(EtcdUrl.parse(etcd.store_url("elect"))), "a:1", seen["a"].append)
    b = Election(EtcdKv(EtcdUrl.parse(etcd.store_url("elect"))), "b:1", seen["b"].append)
    a.start()
    deadline = time.monotonic() + 5
    while not a.state.ours:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    b.start()
    time.sleep(0.5)
    assert not b.state.ours and b.state.leader == "a:1"
    a.stop(resign=False)  # a crash: no resignation, the lease must run out
    stopped = time.monotonic()
    while not b.state.ours:
        assert time.monotonic() - stopped < LEASE_TTL_S + 1.0, "no takeover within the lease TTL"
        time.sleep(0.05)
    assert b.state.generation > seen["a"][-1].generation
    b.stop()


def test_the_store_answers_while_one_member_is_down(etcd):
    writer = store(etcd, "failover")
    writer.load()
    first = etcd.members[0].name
    etcd.stop_member(first)
    try:
        writer.apply(Change(puts={(RecordKind.PIN, "still"): {}}), 1)
        assert ("pin", "still") in store(etcd, "failover").load().records
    finally:
        etcd.start_member(first)
        etcd.wait_healthy()


def test_a_follower_refuses_changes_naming_the_leader(etcd):
    def follower() -> None:
        raise NotLeader("10.0.0.7:50051")

    replica = IntentService(FABRIC, store(etcd, "gate"), Metrics(sorted(FABRIC.switches)), gate=follower)
    with pytest.raises(NotLeader, match=r"the leader is at 10\.0\.0\.7:50051"):
        replica.place_job(JobRequest("nope", 2, Pattern.RING, 0.0))
    assert store(etcd, "gate").load().revision == 0


def test_a_change_whose_answer_never_came_is_unknown_not_retried_elsewhere(etcd):
    """A member that takes the request and never answers: the change may have
    landed, so it is not sent again to another member (that could apply it
    twice); reads, harmless to repeat, move on."""
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel does) and never answers
    try:
        url = EtcdUrl.parse(f"etcd://127.0.0.1:{silent.getsockname()[1]},{etcd.endpoints}/silent")
        kv = EtcdKv(url, timeout_s=0.5)
        writer = EtcdIntentStore(kv)
        writer.load()  # a read: the silent member times out, the next answers
        with pytest.raises(StoreUnavailable, match="may or may not have landed"):
            EtcdIntentStore(EtcdKv(url, timeout_s=0.5)).apply(Change(puts={(RecordKind.PIN, "p"): {}}), 1)
        assert store(etcd, "silent").load().revision == 0  # not sent twice: nothing landed anywhere
    finally:
        silent.close()


class _Failing(http.server.BaseHTTPRequestHandler):
    """A member that fails on every request (HTTP 500), as one stopping mid-proposal does."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b'{"error":"raft: stopped","code":2}'
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_a_change_a_member_failed_on_is_unknown_not_refused(etcd):
    """A member that answers 500 may have proposed the change before it
    failed: the change is of unknown outcome (a client retries it, as it does
    one whose answer never came), not refused with 'nothing was written'
    (a client then gives the job up while it holds its GPUs); reads move on."""
    failing = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    threading.Thread(target=failing.serve_forever, daemon=True).start()
    try:
        url = EtcdUrl.parse(f"etcd://127.0.0.1:{failing.server_address[1]},{etcd.endpoints}/failing")
        EtcdIntentStore(EtcdKv(url)).load()  # a read: the failing member, then the next answers
        with pytest.raises(StoreUnavailable, match="may or may not have landed"):
            EtcdIntentStore(EtcdKv(url)).apply(Change(puts={(RecordKind.PIN, "p"): {}}), 1)
        assert store(etcd, "failing").load().revision == 0  # not sent twice: nothing landed anywhere
    finally:
        failing.shutdown()
        failing.server_close()
