"""Intent store, intent service and generated API code, without a switch."""

import fcntl
import os
import sqlite3
from dataclasses import replace

import pytest

from controller.api import codegen
from controller.errors import Conflict, NotFound
from controller.fabric import NicId, load_fabric
from controller.intent.drains import DrainTarget
from controller.intent.etcd_store import EtcdUrl, StoreUrlError
from controller.intent.model import FlowMatch, FlowPin, IntentError, RecordKind
from controller.intent.service import IntentService
from controller.intent.store import BadStoredValue, Change, SqliteIntentStore, StoreError, StoreInUse
from controller.metrics import Metrics
from controller.te.jobs import JobRequest, Pattern, job_to_doc

FABRIC = load_fabric()
A, B, C = NicId(0, 0, 0), NicId(0, 1, 0), NicId(0, 1, 1)


def service(path):
    return IntentService(FABRIC, SqliteIntentStore(path), Metrics(sorted(FABRIC.switches)))


def test_pins_survive_a_restart_with_their_revision(tmp_path):
    svc = service(tmp_path / "i.db")
    events = []
    svc.subscribe(lambda intent, _: events.append(intent))
    svc.pin_flow(FlowPin("a", FlowMatch(A, B, "udp", 4791, 4791), "rys1", symmetric=False))
    svc.pin_flow(FlowPin("b", FlowMatch(A, C), "rys0"))
    svc.unpin("a")
    assert [e.revision for e in events] == [1, 2, 3]
    svc.close()  # the old process is gone
    again = service(tmp_path / "i.db").snapshot()
    assert again.revision == 3 and list(again.pins) == ["b"] and again.pins["b"] == svc.snapshot().pins["b"]


def test_identical_pin_is_a_no_op_and_rejections_change_nothing(tmp_path):
    svc = service(tmp_path / "i.db")
    pin = FlowPin("a", FlowMatch(A, B, "tcp", 1, 2), "rys1")
    svc.pin_flow(pin)
    svc.pin_flow(pin)
    assert svc.snapshot().revision == 1
    before = svc.snapshot()
    with pytest.raises(IntentError):
        svc.pin_flow(FlowPin("z", FlowMatch(A, B), "nope"))
    with pytest.raises(Conflict):
        svc.pin_flow(FlowPin("z", FlowMatch(B, A, "tcp", 2, 1), "rys0"))  # a's reverse direction
    with pytest.raises(NotFound):
        svc.unpin("z")
    assert svc.snapshot() is before
    svc.close()
    assert service(tmp_path / "i.db").snapshot().pins == before.pins


def test_a_pin_across_a_drain_is_refused_as_a_drain_across_a_pin_is(tmp_path):
    svc = service(tmp_path / "i.db")
    svc.set_drain(DrainTarget.SWITCH, "rys0", True)
    before = svc.snapshot()
    with pytest.raises(Conflict, match="across rys0, which is drained"):
        svc.pin_flow(FlowPin("p", FlowMatch(A, B), "rys0"))
    assert svc.snapshot() is before
    svc.pin_flow(FlowPin("p", FlowMatch(A, B), "rys1"))  # the other spine is in service
    svc.set_drain(DrainTarget.SWITCH, "rys0", False)
    with pytest.raises(Conflict, match="pin 'p' steers"):
        svc.set_drain(DrainTarget.SWITCH, "rys1", True)


def test_a_failed_write_leaves_store_and_snapshot_unchanged_and_each_commit_is_timed(tmp_path):
    timed = []
    store = SqliteIntentStore(tmp_path / "i.db", observe=lambda op, seconds, ok: timed.append((op, seconds, ok)))
    store.apply(Change(puts={(RecordKind.PIN, "a"): {"x": 1}}), 1)
    with pytest.raises(TypeError):  # not JSON-serialisable: fails mid-transaction
        store.apply(Change(puts={(RecordKind.PIN, "b"): {"x": 2}, (RecordKind.PIN, "c"): {"x": object()}}), 2)
    snap = store.load()
    assert snap.revision == 1 and list(snap.records) == [("pin", "a")]
    assert [(op, ok) for op, _, ok in timed] == [("commit", True), ("commit", False)]
    assert all(0 < seconds < 10 for _, seconds, _ in timed)


def test_store_refuses_a_newer_schema(tmp_path):
    SqliteIntentStore(tmp_path / "i.db").close()
    db = sqlite3.connect(tmp_path / "i.db")
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(StoreError, match="schema version 99"):
        SqliteIntentStore(tmp_path / "i.db")


def test_generated_protobuf_code_is_not_stale(tmp_path):
    codegen.generate(tmp_path)
    fresh, committed = codegen.generated_files(tmp_path), codegen.generated_files(codegen.GEN_DIR)
    assert fresh.keys() == committed.keys(), "run `make proto`"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"generated code differs from proto/ for {stale}: run `make proto`"


def test_stored_pins_the_fabric_cannot_honour_are_skipped_not_lost(tmp_path):
    from controller.intent.model import pin_to_doc

    store = SqliteIntentStore(tmp_path / "i.db")
    good = FlowPin("good", FlowMatch(A, B), "rys0")
    store.apply(
        Change(
            puts={
                (RecordKind.PIN, "good"): pin_to_doc(good),
                (RecordKind.PIN, "gone"): pin_to_doc(good) | {"spine": "rys7"},
            }
        ),
        3,
    )
    store.close()
    svc = service(tmp_path / "i.db")
    assert list(svc.snapshot().pins) == ["good"]
    svc.close()
    assert len(SqliteIntentStore(tmp_path / "i.db").load().records) == 2


def test_a_second_writer_on_a_store_in_use_is_refused_naming_the_holder(tmp_path):
    first = SqliteIntentStore(tmp_path / "i.db")
    with pytest.raises(StoreInUse, match=rf"in use by another Railyard controller \(pid {os.getpid()}\)"):
        SqliteIntentStore(tmp_path / "i.db")
    first.apply(Change(puts={(RecordKind.PIN, "a"): {"x": 1}}), 1)  # the first keeps writing
    first.close()
    assert SqliteIntentStore(tmp_path / "i.db").load().revision == 1  # and once it is gone, the store is free


def test_jobs_that_share_a_gpu_in_the_store_load_only_the_first(tmp_path):
    # What two writers on one store used to leave behind.
    svc = service(tmp_path / "i.db")
    svc.place_job(JobRequest("a", 2, Pattern.RING, 0.0))
    job = svc.snapshot().jobs["a"]
    svc.close()
    store = SqliteIntentStore(tmp_path / "i.db")
    store.apply(
        Change(puts={(RecordKind.JOB, "b"): job_to_doc(replace(job, request=replace(job.request, job_id="b")))}), 2
    )
    store.close()
    again = service(tmp_path / "i.db")
    assert list(again.snapshot().jobs) == ["a"]
    assert again.free_capacity()[0].free_gpus == FABRIC.gpu_count - 2


def test_a_corrupt_store_is_refused_in_one_line(tmp_path):
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a usable Railyard store") as err:
        SqliteIntentStore(garbage)
    assert "\n" not in str(err.value)
    fcntl.flock(os.open(tmp_path / "garbage.db.lock", os.O_RDWR), fcntl.LOCK_EX | fcntl.LOCK_NB)  # let go


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        (
            "INSERT INTO intent VALUES ('pin', 'broken', '{not json')",
            "record pin/broken: '{not json' is not a Railyard record",
        ),
        ("INSERT INTO intent VALUES ('job', 'j', '[1, 2]')", "record job/j: '[1, 2]' is not a Railyard record"),
        (
            "INSERT INTO intent VALUES ('job', 'j', '{\"gpus\": []}')",
            "stored job 'j' is not a valid job record: no field 'request'",
        ),
        (
            "UPDATE meta SET value = 'garbage' WHERE key = 'revision'",
            "meta.revision: 'garbage' is not an intent revision",
        ),
        (
            "INSERT INTO intent VALUES ('pin', 'junk', '{\"src\": \"x\"}')",
            "stored pin 'junk' is not a valid pin record",
        ),
    ],
)
def test_a_stored_value_that_does_not_read_is_one_line_naming_it_and_nothing_loads(tmp_path, sql, words):
    # A record that cannot be read may hold GPUs: serving without it could hand them out twice.
    svc = service(tmp_path / "i.db")
    svc.pin_flow(FlowPin("good", FlowMatch(A, B), "rys0"))
    svc.close()
    db = sqlite3.connect(tmp_path / "i.db")
    db.execute(sql)
    db.commit()
    db.close()
    with pytest.raises(BadStoredValue) as err:
        service(tmp_path / "i.db")
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_well_formed_record_the_fabric_cannot_honour_is_skipped_and_reported(tmp_path, caplog):
    svc = service(tmp_path / "i.db")
    svc.pin_flow(FlowPin("good", FlowMatch(A, B), "rys0"))
    svc.close()
    store = SqliteIntentStore(tmp_path / "i.db")
    store.apply(Change(puts={("drain-switch", "rys9"): {}, ("future-kind", "x"): {}}), 2)
    store.close()
    metrics = Metrics(sorted(FABRIC.switches))
    again = IntentService(FABRIC, SqliteIntentStore(tmp_path / "i.db"), metrics)
    assert list(again.snapshot().pins) == ["good"] and not again.snapshot().drains.switches
    assert "stored drain-switch 'rys9' ignored" in caplog.text and "unknown record kind 'future-kind'" in caplog.text
    assert metrics.errors.labels("intent", "invalid_stored_intent")._value.get() == 2


def test_an_empty_store_file_starts_empty_with_a_warning(tmp_path, caplog):
    (tmp_path / "i.db").write_bytes(b"")
    assert service(tmp_path / "i.db").snapshot().revision == 0
    assert "is empty (0 bytes)" in caplog.text


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://127.0.0.1:2379/railyard", "is not an etcd URL"),
        ("etcd://127.0.0.1:2379", "prefix ''"),
        ("etcd://127.0.0.1:2379/a/b", "prefix 'a/b'"),
        ("etcd://127.0.0.1/railyard", "is not HOST:PORT"),
        ("etcd://127.0.0.1:99999/railyard", "is not HOST:PORT"),
        ("etcd://a:1,,b:2/railyard", "endpoint ''"),
    ],
)
def test_a_bad_etcd_url_names_what_is_wrong(url, words):
    with pytest.raises(StoreUrlError) as err:
        EtcdUrl.parse(url)
    assert err.value.field == "store" and words in str(err.value)


def test_an_etcd_url_lists_its_endpoints_and_prefix():
    url = EtcdUrl.parse("etcd://10.0.0.1:2379,[::1]:2380,etcd-2:2379/railyard-prod")
    assert url.endpoints == (("10.0.0.1", 2379), ("::1", 2380), ("etcd-2", 2379)) and url.prefix == "railyard-prod"
