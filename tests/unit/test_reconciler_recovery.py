"""Reconcile passes against fake switches, when things are not new: a table
already right (nothing sent), the periodic audit, a restarted controller adopting
what the switches hold, switches that refuse, time out or disconnect, and jobs
reported programmed once every switch holds them."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.fabric import NicId
from controller.intent.drains import DrainTarget
from controller.intent.model import FlowMatch, FlowPin
from controller.runtime.te_runner import TeRunner
from controller.southbound import wire
from controller.southbound.overlay import (
    COOKIE_PREFIX,
    OverlayEntry,
    job_entries,
)
from controller.southbound.reconciler import ReconcileTrigger
from controller.southbound.switches import CallTable, SwitchSession
from controller.te.engine import Move
from controller.te.jobs import JobRequest, Pattern
from controller.telemetry.ingest import TelemetryIngest
from tests.fakes import StaticTe
from tests.fakes.fake_switch import parse
from tests.fakes.reconciler_rig import (
    FABRIC,
    STATE_READ_ONLY,
    A,
    B,
    C,
    Rig,
    clear,
    flow_mods,
    incast_plan,
    journal,
    make_rig,
    tcp_pin,
)


def test_a_pass_in_sync_sends_no_flow_mod_and_no_meter_mod(tmp_path):
    moves, meters = incast_plan()
    rig = make_rig(FABRIC, tmp_path / "intent.db", te=StaticTe(moves, meters))
    for n, dst in enumerate((B, C)):
        rig.intent.pin_flow(tcp_pin(f"p{n}", A, dst, "rys0", sport=40000 + n))
    assert rig.reconcile()
    assert len(rig.switches["ryl0r0"].flows) >= 3  # more than one dump reply's worth (stats_per_reply=2)
    counted = {metric: rig.sent(metric) for metric in ("flow_mods", "meter_mods")}
    assert all(counted.values())
    clear(rig)

    # The switches hold what was committed: the next intent pass reads nothing
    # and sends nothing; a connect (the only thing that forgets a table) dumps.
    assert rig.reconcile()
    assert journal(rig) == [] and all(sw.received == [] for sw in rig.switches.values())
    reconnect(rig, "ryl0r0")
    assert rig.reconciler.reconcile(ReconcileTrigger.CONNECT, {"ryl0r0"})
    assert journal(rig) == []
    assert {m for sw in rig.switches.values() for m in sw.received} == STATE_READ_ONLY  # dumps only
    # The dump was split over several replies and the session read them all:
    assert any(r.flags & ofp.OFPMPF_REPLY_MORE for r in rig.switches["ryl0r0"].replies)
    assert {metric: rig.sent(metric) for metric in counted} == counted


def reconnect(rig: Rig, name: str) -> None:
    rig.datapaths[name].close()
    rig.datapaths[name] = rig.switches[name].connect(rig.reconciler.calls.deliver, rig.reconciler.switch_disconnected)
    rig.reconciler.switch_connected(rig.datapaths[name])


def test_the_periodic_audit_counts_every_switch_and_reads_a_rotating_share_in_full(tmp_path):
    rig = make_rig(FABRIC, tmp_path / "intent.db")
    rig.reconciler.tables.audit_every = 3  # 6 switches: 2 read in full per periodic pass
    rig.intent.pin_flow(tcp_pin("p0", A, B, "rys0"))
    rig.intent.pin_flow(tcp_pin("p1", NicId(1, 0, 0), NicId(1, 1, 0), "rys1"))
    assert rig.reconcile()
    clear(rig)
    full_reads = dict.fromkeys(FABRIC.switches, 0)
    for _ in range(3):
        assert rig.reconciler.reconcile(ReconcileTrigger.PERIODIC)
        for name, sw in rig.switches.items():
            full_reads[name] += sw.received.count("OFPFlowStatsRequest")
            assert sorted(set(sw.received)) in (["OFPAggregateStatsRequest"], sorted(STATE_READ_ONLY))
        clear(rig)
    assert full_reads == dict.fromkeys(FABRIC.switches, 1)  # each once in audit_every passes
    assert journal(rig) == []

    # A Railyard entry deleted by hand, on a switch the next pass does not read
    # in full (ryl0r0 and ryl0r1 are next): its count shows it.
    leaf = rig.switches["ryl1r0"]
    key = next(iter(leaf.flows))
    deleted = leaf.flows.pop(key)
    assert rig.reconciler.reconcile(ReconcileTrigger.PERIODIC)
    assert leaf.flows[key].cookie == deleted.cookie and flow_mods(rig) == [("ryl1r0", "flow_add")]
    assert rig.count("overlay_drift", switch="ryl1r0", found_by="count") == 1

    # One edited in place (same count): found by the full audit within audit_every passes.
    clear(rig)
    edited = next(iter(rig.switches["ryl1r1"].flows))
    original = rig.switches["ryl1r1"].flows[edited]
    rig.switches["ryl1r1"].flows[edited] = replace_actions(original, [parser.OFPActionOutput(1)])
    for _ in range(3):
        assert rig.reconciler.reconcile(ReconcileTrigger.PERIODIC)
    assert rig.installed() == rig.desired()
    assert rig.count("overlay_drift", switch="ryl1r1", found_by="dump") == 1
    assert flow_mods(rig) == [("ryl1r1", "flow_add")]


def replace_actions(mod, actions: list):
    """A copy of an installed flow mod whose apply-actions are `actions` (as `ovs-ofctl mod-flows` does)."""
    parsed = parse(mod.datapath, bytes(mod.buf))
    parsed.instructions = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
    return parsed


def test_a_restarted_controller_adopts_correct_tables_without_changing_them(tmp_path):
    elephant = Move(("10.1.0.1", "10.1.1.1", "udp", 49152, 4791), NicId(1, 0, 0), NicId(1, 1, 0), "rys1", 1.0, 1.0)
    first = make_rig(FABRIC, tmp_path / "intent.db", te=StaticTe([elephant]))
    first.intent.pin_flow(tcp_pin("p1", A, B, "rys1"))
    first.intent.pin_flow(FlowPin("p2", FlowMatch(A, C), "rys0", symmetric=False))
    first.intent.place_job(JobRequest("j1", 8, Pattern.RING, 10.0))
    assert first.reconcile()
    before = first.installed()
    assert sum(map(len, before.values())) >= 8
    first.store.close()  # the old process is gone; the switches keep their tables

    clear(first)
    second = make_rig(FABRIC, tmp_path / "intent.db", switches=first.switches)
    runner = TeRunner(FABRIC, TelemetryIngest(second.metrics), second.intent, second.metrics)
    second.reconciler.te = runner
    assert second.reconcile()

    assert journal(second) == []
    assert {m for sw in second.switches.values() for m in sw.received} == STATE_READ_ONLY
    assert second.installed() == before
    assert [(m.key, m.via) for m in runner.plan()[1]] == [(elephant.key, "rys1")]  # adopted from the table
    assert second.reconciler.fabric_ready.is_set()


def test_a_restart_during_an_incast_adopts_its_meters_and_sends_no_meter_mod(tmp_path):
    moves, meters = incast_plan()
    first = make_rig(FABRIC, tmp_path / "intent.db", te=StaticTe(moves, meters))
    assert first.reconcile()
    before = first.installed()
    meters_before = {name: dict(sw.meters) for name, sw in first.switches.items() if sw.meters}
    assert sum(map(len, meters_before.values())) == 2
    first.store.close()

    clear(first)
    second = make_rig(FABRIC, tmp_path / "intent.db", switches=first.switches)
    runner = TeRunner(FABRIC, TelemetryIngest(second.metrics), second.intent, second.metrics, clock=lambda: 50.0)
    second.reconciler.te = runner
    assert second.reconcile()

    assert journal(second) == []  # neither a flow-mod nor a meter-mod
    assert {m for sw in second.switches.values() for m in sw.received} == STATE_READ_ONLY
    assert second.installed() == before
    assert {name: dict(sw.meters) for name, sw in second.switches.items() if sw.meters} == meters_before
    _, adopted_moves, adopted_meters = runner.plan()
    assert [(m.key, m.via) for m in adopted_moves] == [(moves[0].key, "rys1")]
    # The rates come back to within the switch's kbit/s step, as incasts seen now.
    assert sorted((m.key, m.src, m.dst) for m in adopted_meters) == sorted((m.key, m.src, m.dst) for m in meters)
    assert all(m.rate_bps == pytest.approx(100e9, rel=1e-3) and m.last_incast == 50.0 for m in adopted_meters)


def test_a_refused_bundle_changes_nothing_on_the_switch_and_fails_the_pass(tmp_path):
    rig = make_rig(FABRIC, tmp_path / "intent.db")
    pins = [tcp_pin("p1", A, B, "rys0"), FlowPin("p2", FlowMatch(A, C), "rys0", symmetric=False)]
    for pin in pins:
        rig.intent.pin_flow(pin)
    assert rig.reconcile()
    leaf = rig.switches["ryl0r0"]
    before = dict(leaf.flows)
    adds_before = rig.count("flow_mods", switch="ryl0r0", kind="add")

    clear(rig)
    for pin in pins:
        rig.intent.pin_flow(replace(pin, spine="rys1"))
    leaf.refuse_in_next_bundle = 1  # ryl0r0's bundle: two adds; the second is refused
    assert not rig.reconcile()

    assert leaf.flows == before  # not even the first add of the bundle applied
    assert leaf.received.count("ONFBundleAddMsg") == 2
    assert rig.count("bundle_commits", switch="ryl0r0", result="failed") == 1
    assert rig.count("switch_errors", switch="ryl0r0", reason="refused") == 1
    assert rig.count("errors", component="southbound", reason="bundle_failed") == 1  # the series the alert names
    assert rig.count("flow_mods", switch="ryl0r0", kind="add") == adds_before
    assert rig.count("reconcile_runs", trigger="intent", result="failed") == 1
    assert rig.installed()["ryl1r0"] == rig.desired()["ryl1r0"]  # the other switch went ahead

    assert rig.reconcile()  # the next pass repairs it
    assert rig.installed() == rig.desired()


def test_a_switch_out_of_bundles_is_refused_with_its_onf_error(tmp_path, caplog):
    rig = make_rig(FABRIC, tmp_path / "intent.db")
    rig.intent.pin_flow(tcp_pin("p1", A, B, "rys0"))
    rig.switches["ryl0r0"].out_of_bundles = True  # OVS answers with an ONF experimenter error: no code
    with caplog.at_level(logging.WARNING, logger="controller.southbound.reconciler"):
        assert not rig.reconcile()
    assert rig.count("switch_errors", switch="ryl0r0", reason="refused") == 1
    assert "ryl0r0: bundle refused: error type 65535 code 2305" in caplog.text  # ONFERR_ET_OUT_OF_BUNDLES
    assert rig.installed()["ryl1r0"] == rig.desired()["ryl1r0"]


def test_timeouts_and_disconnects_are_counted_apart(tmp_path):
    rig = make_rig(FABRIC, tmp_path / "intent.db", reply_timeout_s=0.05)
    rig.intent.pin_flow(tcp_pin("p0", A, B, "rys0"))
    rig.intent.pin_flow(tcp_pin("p1", NicId(1, 0, 0), NicId(1, 1, 0), "rys0"))
    rig.switches["ryl0r0"].drop_replies = True  # hung: answers nothing
    rig.switches["ryl1r0"].hang_up = True  # the connection drops while we wait (os-ken reports it DEAD)
    rig.datapaths["ryl0r1"].is_active = False  # already gone, os-ken has not noticed yet
    assert not rig.reconcile()

    def errors(switch: str) -> dict[str, float]:
        return {r: rig.count("switch_errors", switch=switch, reason=r) for r in ("timeout", "disconnected")}

    assert errors("ryl0r0") == {"timeout": 1, "disconnected": 0}
    assert errors("ryl1r0") == {"timeout": 0, "disconnected": 1}
    assert errors("ryl0r1") == {"timeout": 0, "disconnected": 1}
    assert errors("ryl1r1") == {"timeout": 0, "disconnected": 0}
    assert rig.count("errors", component="southbound", reason="dump_failed") == 3
    assert rig.installed()["ryl1r1"] == rig.desired()["ryl1r1"] != {}  # the healthy switch was served
    assert rig.reconciler.connected() == set(FABRIC.switches) - {"ryl1r0"}


def test_only_railyard_entries_are_dumped_and_changed(tmp_path):
    rig = make_rig(FABRIC, tmp_path / "intent.db")
    match = (("eth_type", 0x0800), ("ipv4_dst", "10.0.1.1"), ("ipv4_src", "10.0.0.1"))
    foreign = OverlayEntry("ryl0r0", 20000, match, ("dec_ttl", "output:3"), cookie=0x1234)
    stale = replace(foreign, match=(*match[:1], ("ipv4_dst", "10.0.1.2"), match[2]), cookie=COOKIE_PREFIX | 42)
    calls = CallTable()
    session = SwitchSession("ryl0r0", rig.switches["ryl0r0"].connect(calls.deliver), calls, 1.0)
    session.commit_bundle([wire.add_flow(e) for e in (foreign, stale)])
    assert session.dump_overlay() == {stale.key: stale}  # the dump is scoped to Railyard's cookie prefix

    assert rig.reconcile()
    assert flow_mods(rig)[-1] == ("ryl0r0", "flow_delete")
    assert rig.installed()["ryl0r0"] == {foreign.key: foreign}


def test_a_job_is_programmed_once_every_switch_it_uses_holds_its_entries(tmp_path):
    rig = make_rig(FABRIC, tmp_path / "intent.db")
    seen: list[tuple[str, str, int]] = []
    rig.intent.subscribe(lambda _i, events: seen.extend((e.kind, e.job.job_id, e.revision) for e in events))
    rig.datapaths["ryl1r1"].close()  # one switch of the job's is not connected
    job, _ = rig.intent.place_job(JobRequest("ring", 8, Pattern.RING, 100.0))
    uses = {e.switch for e in job_entries(FABRIC, job)}
    assert "ryl1r1" in uses and len(uses) > 1
    assert rig.reconcile()  # every connected switch takes its entries; ryl1r1 is not there to
    assert rig.intent.programmed_revision(job) == 0
    assert [k for k, *_ in seen] == ["placed"]
    assert rig.metrics.registry.get_sample_value("railyard_jobs_unprogrammed") == 1

    reconnect(rig, "ryl1r1")
    assert rig.reconciler.reconcile(ReconcileTrigger.CONNECT, {"ryl1r1"})
    revision = rig.intent.snapshot().revision
    assert seen[-1] == ("programmed", "ring", revision) and rig.intent.programmed_revision(job) == revision
    installed = rig.installed()
    assert all(e.key in installed[e.switch] for e in job_entries(FABRIC, job))  # on every switch, at that moment
    assert rig.metrics.registry.get_sample_value("railyard_jobs_unprogrammed") == 0

    # Its paths move (a drain): unprogrammed until the moved entries are in.
    _, moved = rig.intent.set_drain(DrainTarget.SWITCH, "rys0", True)
    assert [j.job_id for j in moved] == ["ring"]
    moved_job = rig.intent.snapshot().jobs["ring"]
    assert rig.intent.programmed_revision(moved_job) == 0
    assert rig.reconcile()
    assert seen[-1] == ("programmed", "ring", rig.intent.snapshot().revision)
    assert rig.reconcile() and [k for k, *_ in seen].count("programmed") == 2  # once per placement as it stands


def test_a_job_whose_flows_need_no_entry_is_programmed_by_the_first_pass(tmp_path):
    rig = make_rig(FABRIC, tmp_path / "intent.db")
    job, _ = rig.intent.place_job(JobRequest("local", 2, Pattern.RING, 100.0))  # one server: nothing to steer
    assert job_entries(FABRIC, job) == []
    assert rig.reconcile()
    assert rig.intent.programmed_revision(job) == rig.intent.snapshot().revision
