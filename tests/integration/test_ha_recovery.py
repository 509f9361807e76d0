"""Three replicas on a real three-member etcd, under a steady load of
placements and releases, through what a store can do to them: a revision
that is not a number, a job record that is not JSON, a leader key with no
lease, and every etcd member restarting.

Each time: nothing acknowledged is lost or duplicated; no replica names
itself leader when it is not; the replicas recover by themselves, with no
restart, once the value is repaired (or etcd is back: a leader within 3 s).
No fabric is attached: the API answers from the intent alone."""

from __future__ import annotations

import base64
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest

from controller.api.client import UNKNOWN_OUTCOME, Client
from controller.api.gen.railyard.v1 import placement_pb2 as ppb
from controller.api.gen.railyard.v1 import placement_pb2_grpc as ppb_grpc
from controller.intent.etcd_store import EtcdKv, EtcdUrl, compare_mod, delete_op, put_op
from emulation.processes.controller_process import ControllerProcess, Ports, total
from emulation.processes.etcd_local import LocalEtcd

# The client's, and UNKNOWN: a server that died mid-call.
MAY_HAVE_LANDED = UNKNOWN_OUTCOME | {grpc.StatusCode.UNKNOWN}


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    with LocalEtcd(members=3, workdir=tmp_path_factory.mktemp("etcd")) as cluster:
        yield cluster


class Replicas:
    def __init__(self, etcd: LocalEtcd, tmp: Path, prefix: str, count: int = 3) -> None:
        self.url = etcd.store_url(prefix)
        self.prefix = prefix
        self.kv = EtcdKv(EtcdUrl.parse(self.url))
        self.ports = [Ports.pick() for _ in range(count)]
        self.procs = [self._replica(tmp, i, ports) for i, ports in enumerate(self.ports)]
        self.tmp = tmp

    def _replica(self, tmp: Path, i: int, ports: Ports) -> ControllerProcess:
        return ControllerProcess(
            None,
            tmp / f"unused-{i}.db",
            ports,
            tmp / f"replica-{i}.log",
            extra_args=("--store", self.url, "--advertise", self.address(ports)),
        )

    @staticmethod
    def address(ports: Ports) -> str:
        return f"127.0.0.1:{ports.grpc}"

    @property
    def targets(self) -> str:
        return ",".join(self.address(p) for p in self.ports)

    def __enter__(self) -> Replicas:
        for proc in self.procs:
            proc.start()
        for proc in self.procs:
            proc.wait_serving_api()
        self.pids = [proc.proc.pid for proc in self.procs if proc.proc]
        self.wait_leader()
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            proc.stop()

    def leading(self) -> list[int]:
        found = []
        for i, proc in enumerate(self.procs):
            try:
                if total(proc.metrics(), "railyard_leader") == 1:
                    found.append(i)
            except OSError:
                pass
        return found

    def wait_leader(self, timeout_s: float = 15.0) -> float:
        """Seconds until a replica leads."""
        started = time.monotonic()
        while not self.leading():
            assert time.monotonic() - started < timeout_s, f"no leader within {timeout_s:g} s; see {self.tmp}"
            time.sleep(0.05)
        return time.monotonic() - started

    def gauge(self, name: str) -> list[float]:
        return [total(proc.metrics(), name) for proc in self.procs]

    def wait_all(self, name: str, value: float, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.gauge(name) != [value] * len(self.procs):
            assert time.monotonic() < deadline, f"{name}: {self.gauge(name)}, expected {value:g} everywhere"
            time.sleep(0.1)

    def put(self, key: str, value: bytes | str) -> None:
        self.kv.txn([], [put_op(f"{self.prefix}/{key}", value)])

    def get(self, key: str) -> bytes | None:
        found = self.kv.get(f"{self.prefix}/{key}")
        return base64.b64decode(found["value"]) if found else None

    def still_the_same_processes(self) -> bool:
        return [proc.proc.pid for proc in self.procs if proc.proc and proc.proc.poll() is None] == self.pids


class Load:
    """One-GPU jobs placed and released through every replica (the client
    follows the leader), and what each acknowledged reply said. A placement
    whose reply never came is retried with its request_id until it has an
    answer: the retry returns the first if it landed."""

    def __init__(self, targets: str) -> None:
        self.targets = targets
        self.placed: dict[str, tuple[str, ...]] = {}  # acknowledged: job -> its NICs
        self.released: set[str] = set()
        self.unknown: set[str] = set()
        self.errors: Counter[str] = Counter()
        self.last_errors: dict[str, str] = {}  # job -> the status of its last failed attempt
        self.acks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def live(self) -> list[str]:
        return [job for job in self.placed if job not in self.released]

    def _run(self) -> None:
        with Client(self.targets) as client:
            serial = 0
            while not self._stop.is_set():
                for job in sorted(self.unknown):
                    self._place(client, job)
                live = self.live()
                if len(live) < 6:
                    serial += 1
                    self._place(client, f"load-{serial}")
                else:
                    self._release(client, live[0])
                self._stop.wait(0.05)

    def _place(self, client: Client, job: str) -> None:
        try:
            reply = client.place_job(job, 1, "ring", request_id=f"r-{job}")
        except grpc.RpcError as exc:
            self.errors[exc.code().name] += 1
            self.last_errors[job] = exc.code().name
            # A refused retry says nothing of whether the first attempt landed:
            # no replica leads yet, the store moved, or this caller is over its
            # rate (RESOURCE_EXHAUSTED, before any leader looked for the job).
            # Only a first attempt's refusal says nothing was placed.
            if exc.code() in MAY_HAVE_LANDED or job in self.unknown:
                self.unknown.add(job)
            return
        self.unknown.discard(job)
        self.acks += 1
        self.placed[job] = tuple(gpu.nic_address for gpu in reply.job.gpus)

    def _release(self, client: Client, job: str) -> None:
        try:
            client.release_job(job)
        except grpc.RpcError as exc:
            self.errors[exc.code().name] += 1
            if exc.code() is not grpc.StatusCode.NOT_FOUND:
                return  # not known to be done: released again next round
        self.acks += 1
        self.released.add(job)

    def settle(self, timeout_s: float = 20.0) -> None:
        """Every placement of unknown outcome answered, once the replicas serve again."""
        deadline = time.monotonic() + timeout_s
        with Client(self.targets) as client:
            while self.unknown:
                assert time.monotonic() < deadline, f"placements still without an answer: {sorted(self.unknown)}"
                for job in sorted(self.unknown):
                    self._place(client, job)
                time.sleep(0.2)


class Naming:
    """Asks every replica, ten times a second, to change something it may
    not (release a job that does not exist): a follower's refusal names the
    leader, and must never name the replica itself."""

    def __init__(self, replicas: Replicas) -> None:
        self.replicas = replicas
        self.violations: list[str] = []
        self.rounds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Naming:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        channels = [grpc.insecure_channel(self.replicas.address(p)) for p in self.replicas.ports]
        stubs = [ppb_grpc.PlacementServiceStub(channel) for channel in channels]
        while not self._stop.wait(0.1):
            for ports, stub in zip(self.replicas.ports, stubs, strict=True):
                try:
                    stub.ReleaseJob(ppb.ReleaseJobRequest(job_id="no-such-job"), timeout=2)
                except grpc.RpcError as exc:
                    trailers: dict = dict(exc.trailing_metadata() or ()) if isinstance(exc, grpc.Call) else {}
                    named = trailers.get("railyard-leader", "")
                    if exc.code() is grpc.StatusCode.FAILED_PRECONDITION and named == self.replicas.address(ports):
                        self.violations.append(f"{named} named itself the leader while refusing to lead")
            self.rounds += 1
        for channel in channels:
            channel.close()


def check_nothing_lost_or_duplicated(replicas: Replicas, load: Load) -> None:
    expected = {job: nics for job, nics in load.placed.items() if job not in load.released}
    for i, proc in enumerate(replicas.procs):
        deadline = time.monotonic() + 5
        while True:  # a follower holds what the leader does once its watch has caught up
            with proc.client() as client:
                listed = {job.job_id: tuple(g.nic_address for g in job.gpus) for job in client.list_jobs()}
            if listed == expected or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        unacknowledged = {job: load.last_errors.get(job) for job in set(listed) - set(expected)}
        assert listed == expected, (
            f"replica {i} lists {sorted(listed)}, acknowledged {sorted(expected)}; "
            f"listed but not acknowledged, with their last error: {unacknowledged}; errors {dict(load.errors)}"
        )
    held = Counter(nic for nics in expected.values() for nic in nics)
    assert not [nic for nic, count in held.items() if count > 1], f"GPUs held twice: {held}"


def run_through(replicas: Replicas, damage, repair, settle_s: float = 2.0) -> dict:
    """Load on, `damage()`, then `repair()`: the figures of the recovery."""
    with Naming(replicas) as naming, Load(replicas.targets) as load:
        time.sleep(2.0)
        before = load.acks
        damage()
        time.sleep(settle_s)
        during = {
            "leaders": replicas.leading(),
            "unreadable": replicas.gauge("railyard_intent_unreadable"),
            "leaseless": replicas.gauge("railyard_leader_key_leaseless"),
        }
        repaired_at = time.monotonic()
        repair()
        back_s = replicas.wait_leader()
        acks = load.acks
        deadline = time.monotonic() + 10
        while load.acks < acks + 5:
            assert time.monotonic() < deadline, f"mutations do not succeed after the repair: {load.errors}"
            time.sleep(0.05)
        resumed_s = time.monotonic() - repaired_at
        time.sleep(1.0)
    load.settle()
    check_nothing_lost_or_duplicated(replicas, load)
    assert replicas.still_the_same_processes(), "a replica restarted"
    assert not naming.violations, naming.violations
    assert naming.rounds > 10
    print(f"acks before {before}, total {load.acks}, errors {dict(load.errors)}; during {during}; "
          f"a leader {back_s:.2f} s after the repair, mutations again {resumed_s:.2f} s after it")  # fmt: skip
    return during | {"back_s": back_s, "resumed_s": resumed_s, "load": load}


def test_a_revision_that_is_not_a_number_stops_the_leader_and_the_repair_brings_one_back(etcd, tmp_path):
    with Replicas(etcd, tmp_path, "bad-revision") as replicas:
        good: list[bytes] = []

        def damage() -> None:
            good.append(replicas.get("revision") or b"0")
            replicas.put("revision", "garbage")

        def repair() -> None:
            # The documented recovery: the revision the replicas last read
            # (railyard_intent_revision, or the number in their log line).
            held = int(max(replicas.gauge("railyard_intent_revision")))
            replicas.put("revision", str(max(held, int(good[0]))))

        def meanwhile() -> None:
            late = ControllerProcess(
                None, tmp_path / "late.db", Ports.pick(), tmp_path / "late.log",
                extra_args=("--store", replicas.url),
            )  # fmt: skip
            late.start()
            assert late.proc is not None
            assert late.proc.wait(timeout=60) == 2
            lines = (tmp_path / "late.log").read_text().strip().splitlines()
            said = [line for line in lines if line.startswith("railyard:")]
            assert said == [
                "railyard: etcd key bad-revision/revision: 'garbage' is not an intent revision (a whole number >= 0)"
            ], lines[-5:]

        def damage_then_start_one() -> None:
            damage()
            time.sleep(1.0)
            meanwhile()

        figures = run_through(replicas, damage_then_start_one, repair)
    assert figures["leaders"] == [] and figures["unreadable"] == [1, 1, 1]


def test_a_job_record_that_is_not_json_stops_the_leader_and_the_repair_brings_one_back(etcd, tmp_path):
    with Replicas(etcd, tmp_path, "bad-job") as replicas:
        saved: dict[str, tuple[bytes, int]] = {}

        def damage() -> None:
            # The newest job: the load releases the oldest, so nothing but
            # the repair writes this key again.
            job = max(replicas.kv.range_prefix("bad-job/intent/job/")[0], key=lambda kv: int(kv["create_revision"]))
            key = base64.b64decode(job["key"]).decode()
            _, reply = replicas.kv.txn([], [put_op(key, "{garbage")])
            saved[key] = (base64.b64decode(job["value"]), int(reply["header"]["revision"]))

        def repair() -> None:
            ((key, (value, garbage_at)),) = saved.items()
            repaired, _ = replicas.kv.txn([compare_mod(key, garbage_at)], [put_op(key, value)])
            assert repaired, "someone wrote over the bad value before the repair"

        figures = run_through(replicas, damage, repair)
    assert figures["leaders"] == [] and figures["unreadable"] == [1, 1, 1]


def test_a_leader_key_with_no_lease_is_reported_and_its_deletion_brings_a_leader_back(etcd, tmp_path):
    with Replicas(etcd, tmp_path, "leaseless") as replicas:

        def damage() -> None:
            # A put with no lease, naming a replica that is not leading:
            # etcd would never expire this key.
            follower = next(i for i in range(3) if i not in replicas.leading())
            replicas.put("leader", replicas.address(replicas.ports[follower]))

        def repair() -> None:
            replicas.kv.txn([], [delete_op("leaseless/leader")])

        figures = run_through(replicas, damage, repair)
        log = "".join((tmp_path / f"replica-{i}.log").read_text() for i in range(3))
    assert figures["leaders"] == [] and figures["leaseless"] == [1, 1, 1]
    assert "has no lease, so no replica can lead until it is deleted" in log
    assert figures["back_s"] <= 3.0


def test_a_leader_is_back_within_3_s_of_etcd_returning_from_a_restart_of_every_member(etcd, tmp_path):
    with Replicas(etcd, tmp_path, "etcd-restart") as replicas:
        returned: list[float] = []

        def damage() -> None:
            for member in etcd.members:
                etcd.stop_member(member.name)

        def repair() -> None:
            for member in etcd.members:
                etcd.start_member(member.name)
            etcd.wait_healthy()
            returned.append(time.monotonic())

        figures = run_through(replicas, damage, repair, settle_s=4.0)
    assert figures["leaders"] == []  # the leader stepped down within its lease
    print(f"a leader {figures['back_s']:.2f} s after etcd was healthy again")
    assert figures["back_s"] <= 3.0, f"a leader only {figures['back_s']:.2f} s after etcd returned"


def test_a_replica_started_on_a_bad_store_value_says_so_in_one_line_and_exits_2(etcd, tmp_path):
    kv = EtcdKv(EtcdUrl.parse(etcd.store_url("bad-start")))
    kv.txn([], [put_op("bad-start/intent/pin/p", "[1, 2")])
    proc = subprocess.run(
        [sys.executable, "-m", "controller.cli", "controller", "run", "--store", etcd.store_url("bad-start"),
         "--grpc-listen", f"127.0.0.1:{Ports.pick().grpc}", "--metrics-listen", f"127.0.0.1:{Ports.pick().metrics}",
         "--openflow-listen", f"127.0.0.1:{Ports.pick().openflow}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1:] == [
        "railyard: etcd key bad-start/intent/pin/p: '[1, 2' is not a Railyard record (a JSON object)"
    ]
