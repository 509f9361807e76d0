"""The os-ken app's handlers, driven as os-ken drives them: real event classes,
dispatched through the handlers the app registers for the current state.
Hermetic: the app is never registered with os-ken's AppManager, no listener."""

from __future__ import annotations

import logging
import time
from typing import Any, cast

import pytest
from os_ken.controller import handler, ofp_event
from os_ken.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER
from os_ken.ofproto import ofproto_common
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.fabric import DEFAULT_SPEC, NicId, build_fabric, load_spec
from controller.intent.model import FlowMatch, FlowPin
from controller.intent.service import IntentService
from controller.intent.store import SqliteIntentStore
from controller.metrics import Metrics
from controller.southbound.app import RailyardApp
from controller.southbound.reconciler import Reconciler, ReconcileTrigger
from controller.te.engine import Meter
from tests.fakes import FakeDatapath, FakeSwitch, StaticTe
from tests.fakes.fake_switch import parse

FABRIC = build_fabric(load_spec(DEFAULT_SPEC))


def dispatch(app: RailyardApp, ev, state: str) -> int:
    """What os-ken's event loop does with one event; how many handlers ran."""
    handlers = list(app.get_handlers(ev, state))
    for run in handlers:
        run(ev)
    return len(handlers)


def state_change(datapath, state: str):
    ev = ofp_event.EventOFPStateChange(datapath)
    ev.state = state
    return ev


@pytest.fixture
def app(tmp_path) -> RailyardApp:
    metrics = Metrics(sorted(FABRIC.switches))
    intent = IntentService(FABRIC, SqliteIntentStore(tmp_path / "intent.db"), metrics)
    app = RailyardApp(reconciler=Reconciler(FABRIC, intent, metrics, reply_timeout_s=0.5))
    handler.register_instance(app)  # what AppManager.register_app does, minus the global registry
    return app


def connect(app: RailyardApp, name: str) -> FakeDatapath:
    """A fake switch whose replies come back as os-ken events through the app."""
    switch = FakeSwitch(name, FABRIC.switch(name).dpid)
    datapath = switch.connect(lambda _dpid, msg: dispatch(app, ofp_event.ofp_msg_to_ev(msg), MAIN_DISPATCHER))
    assert dispatch(app, state_change(datapath, MAIN_DISPATCHER), MAIN_DISPATCHER) == 1
    return datapath


def count(app: RailyardApp, reason: str) -> float:
    labels = {"component": "southbound", "reason": reason}
    return app.reconciler.metrics.registry.get_sample_value("railyard_errors_total", labels) or 0.0


def test_main_connects_a_switch_and_dead_disconnects_it(app):
    reconciler = app.reconciler
    datapath = connect(app, "ryl0r0")
    assert reconciler.connected() == {"ryl0r0"}
    assert reconciler.metrics.registry.get_sample_value("railyard_switch_up", {"switch": "ryl0r0"}) == 1

    older = FakeSwitch("ryl0r0", datapath.switch.dpid).connect(lambda *_: None)  # an older connection, dying late
    assert dispatch(app, state_change(older, DEAD_DISPATCHER), DEAD_DISPATCHER) == 1
    assert reconciler.connected() == {"ryl0r0"}
    assert dispatch(app, state_change(datapath, DEAD_DISPATCHER), DEAD_DISPATCHER) == 1
    assert reconciler.connected() == set()

    nameless = FakeSwitch("?", 0).connect(lambda *_: None)
    nameless.id = None  # died before the handshake said who it was
    dispatch(app, state_change(nameless, MAIN_DISPATCHER), MAIN_DISPATCHER)
    stranger = FakeSwitch("stranger", 0xBAD).connect(lambda *_: None)
    dispatch(app, state_change(stranger, MAIN_DISPATCHER), MAIN_DISPATCHER)
    assert reconciler.connected() == set() and count(app, "unknown_dpid") == 1
    assert count(app, "handler_exception") == 0


def test_a_second_connection_claiming_a_live_switchs_dpid_is_refused_a_dead_ones_replaced(app):
    reconciler = app.reconciler
    first = connect(app, "ryl0r0")

    def claim() -> FakeDatapath:
        other = FakeSwitch("ryl0r0", first.switch.dpid).connect(
            lambda _dpid, msg: dispatch(app, ofp_event.ofp_msg_to_ev(msg), MAIN_DISPATCHER)
        )
        other.address = ("127.0.0.1", 40000)
        dispatch(app, state_change(other, MAIN_DISPATCHER), MAIN_DISPATCHER)
        return other

    impostor = claim()
    deadline = time.monotonic() + 5
    while count(app, "duplicate_dpid") < 1:  # decided off the app thread, after an echo on the first
        assert time.monotonic() < deadline, "the second connection was never judged"
        time.sleep(0.01)
    assert not impostor.is_active and reconciler.connected() == {"ryl0r0"}
    assert reconciler.connections.session("ryl0r0").datapath is first
    assert "OFPEchoRequest" in first.switch.received
    # The first connection dies unnoticed (the switch rebooted): the next claim takes over.
    first.is_active = False
    successor = claim()
    deadline = time.monotonic() + 5
    while reconciler.connections.session("ryl0r0").datapath is not successor:
        assert time.monotonic() < deadline, "a dead connection kept the switch"
        time.sleep(0.01)
    assert successor.is_active and count(app, "duplicate_dpid") == 1


def test_every_reply_the_reconciler_waits_for_reaches_it_through_the_app(app):
    # A pin (flow dumps, bundles) and a metered flow (meter dump, meter mods + barrier).
    reconciler = app.reconciler
    local = ("10.0.1.1", "10.0.1.2", "udp", 0, 0)
    cast(Any, reconciler).te = StaticTe(meters=[Meter(local, NicId(0, 1, 0), NicId(0, 1, 1), 100e9, 1.0)])
    reconciler.intent.pin_flow(FlowPin("p", FlowMatch(NicId(0, 0, 0), NicId(0, 1, 0)), "rys0"))
    datapaths = [connect(app, name) for name in FABRIC.switches]
    assert reconciler.reconcile(ReconcileTrigger.CONNECT)  # a reply lost on the way would time out
    replies = {type(r).__name__ for dp in datapaths for r in dp.switch.replies}
    assert replies == {"OFPFlowStatsReply", "OFPMeterConfigStatsReply", "ONFBundleCtrlMsg", "OFPBarrierReply"}
    assert reconciler.fabric_ready.is_set()


def error_event(datapath, xid: int, type_: int = ofp.OFPET_BAD_REQUEST, code: int = ofp.OFPBRC_BAD_TYPE, **exp):
    msg = parser.OFPErrorMsg(datapath, type_, code, b"", **exp)
    msg.set_xid(xid)
    msg.serialize()
    return ofp_event.ofp_msg_to_ev(parse(datapath, bytes(msg.buf)))


def test_an_error_goes_to_its_call_or_is_counted(app, caplog):
    datapath = connect(app, "ryl0r0")
    calls = app.reconciler.calls
    xid = calls.next_xid()
    call = calls.open(datapath.id, [xid])
    dispatch(app, error_event(datapath, xid), MAIN_DISPATCHER)
    assert call.replies.get_nowait().code == ofp.OFPBRC_BAD_TYPE
    assert count(app, "openflow_error") == 0

    with caplog.at_level(logging.WARNING, logger="controller.southbound.app"):
        dispatch(app, error_event(datapath, 12345), MAIN_DISPATCHER)  # nobody waits for it
        # OVS answers a refused bundle commit with an ONF experimenter error (no code).
        onf = dict(exp_type=ofp.ONFERR_ET_FAILED, experimenter=ofproto_common.ONF_EXPERIMENTER_ID)
        dispatch(app, error_event(datapath, 12346, ofp.OFPET_EXPERIMENTER, 0, **onf), MAIN_DISPATCHER)
    assert count(app, "openflow_error") == 2
    assert [r.getMessage() for r in caplog.records] == [
        "switch 0001000000000000: OpenFlow error type 1 code 1 (xid 12345)",
        "switch 0001000000000000: OpenFlow error type 65535 code 2313 (xid 12346)",
    ]
    assert count(app, "handler_exception") == 0


def test_a_failing_handler_is_counted_and_does_not_raise(app, monkeypatch):
    datapath = connect(app, "ryl0r0")

    def broken(*_args):
        raise RuntimeError("boom")

    monkeypatch.setattr(app.reconciler, "switch_connected", broken)
    monkeypatch.setattr(app.reconciler.calls, "deliver", broken)
    assert dispatch(app, state_change(datapath, MAIN_DISPATCHER), MAIN_DISPATCHER) == 1
    barrier = parse(datapath, bytes.fromhex("04150008" + "52590000"))  # OF1.3 BARRIER_REPLY, xid
    assert dispatch(app, ofp_event.ofp_msg_to_ev(barrier), MAIN_DISPATCHER) == 1
    assert count(app, "handler_exception") == 2
