"""A controller's southbound in one process, against fake switches: metrics,
an IntentService over a SQLite file, a Reconciler, and a FakeSwitch per switch
of the fabric, connected. What test_reconciler and test_reconciler_recovery run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.fabric import DEFAULT_SPEC, Fabric, NicId, build_fabric, load_spec, parse_spec
from controller.intent.model import FlowMatch, FlowPin
from controller.intent.service import IntentService
from controller.intent.store import SqliteIntentStore
from controller.metrics import Metrics
from controller.southbound import ofcodec
from controller.southbound.overlay import (
    EntryKey,
    OverlayEntry,
    desired_overlay,
)
from controller.southbound.reconciler import Reconciler, ReconcileTrigger, TePlanner
from controller.te.engine import Meter, Move
from tests.fakes import Applied, FakeDatapath, FakeSwitch

FABRIC = build_fabric(load_spec(DEFAULT_SPEC))  # 2 pods x 2 servers x 2 rails; leaves ryl<pod>r<rail>, spines rys0/1
FAT_TREE = build_fabric(parse_spec("kind: fat-tree\nk: 4\nrates: {nic_gbps: 100, emulated_nic_mbps: 20}\n"))

A = NicId(rail=0, pod=0, server=0)
B = NicId(rail=0, pod=1, server=0)
C = NicId(rail=0, pod=1, server=1)
STATE_READ_ONLY = {"OFPFlowStatsRequest", "OFPMeterConfigStatsRequest"}


def tcp_pin(name: str, src: NicId, dst: NicId, spine: str, sport: int = 40000, symmetric: bool = True) -> FlowPin:
    return FlowPin(name, FlowMatch(src, dst, "tcp", sport, 5201), spine, symmetric)


@dataclass
class Rig:
    """One controller process (metrics, intent over a store file, reconciler)
    and the fake switches it is connected to."""

    fabric: Fabric
    store: SqliteIntentStore
    intent: IntentService
    metrics: Metrics
    reconciler: Reconciler
    switches: dict[str, FakeSwitch]
    datapaths: dict[str, FakeDatapath] = field(default_factory=dict)

    def reconcile(self) -> bool:
        return self.reconciler.reconcile(ReconcileTrigger.INTENT)

    def count(self, metric: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(f"railyard_{metric}_total", labels) or 0.0

    def sent(self, metric: str) -> float:
        """Flow or meter mods the reconciler counted, over every switch and kind."""
        kinds = ("add", "modify", "delete")
        return sum(self.count(metric, switch=s, kind=k) for s in self.fabric.switches for k in kinds)

    def installed(self) -> dict[str, dict[EntryKey, OverlayEntry]]:
        """What the switches hold, read straight from their tables."""
        return {
            name: {e.key: e for e in (ofcodec.entry_from_stats(name, f) for f in sw.flows.values())}
            for name, sw in self.switches.items()
        }

    def desired(self) -> dict[str, dict[EntryKey, OverlayEntry]]:
        te = self.reconciler.te
        _, moves, meters = te.plan() if te is not None else (0, [], [])
        return desired_overlay(self.fabric, self.intent.snapshot(), None, moves, meters)


def make_rig(
    fabric: Fabric,
    store_path: Path,
    switches: dict[str, FakeSwitch] | None = None,
    te: TePlanner | None = None,
    reply_timeout_s: float = 1.0,
) -> Rig:
    metrics = Metrics(sorted(fabric.switches))
    store = SqliteIntentStore(store_path)
    intent = IntentService(fabric, store, metrics)
    reconciler = Reconciler(fabric, intent, metrics, reply_timeout_s=reply_timeout_s)
    reconciler.te = te  # a TeRunner in the daemon
    if switches is None:
        journal: list[Applied] = []  # one for all switches: the order across them is the point
        switches = {name: FakeSwitch(name, sw.dpid, journal) for name, sw in fabric.switches.items()}
    rig = Rig(fabric, store, intent, metrics, reconciler, switches)
    for name, switch in switches.items():
        rig.datapaths[name] = switch.connect(reconciler.calls.deliver, on_close=reconciler.switch_disconnected)
        reconciler.switch_connected(rig.datapaths[name])
    return rig


def journal(rig: Rig) -> list[Applied]:
    return next(iter(rig.switches.values())).journal


def flow_mods(rig: Rig) -> list[tuple[str, str]]:
    return [(a.switch, a.kind) for a in journal(rig) if a.kind.startswith("flow")]


def clear(rig: Rig) -> None:
    journal(rig).clear()
    for switch in rig.switches.values():
        switch.received.clear()
        switch.replies.clear()


def incast_plan() -> tuple[list[Move], list[Meter]]:
    """An incast on C: a remote sender moved and metered, a local one metered (see test_overlay)."""
    remote = ("10.0.0.1", "10.0.1.2", "udp", 41000, 4791)
    local = ("10.0.1.1", "10.0.1.2", "udp", 0, 0)
    return [Move(remote, A, C, "rys1", 1.0, 1.0)], [Meter(remote, A, C, 100e9, 1.0), Meter(local, B, C, 100e9, 1.0)]


def meter_of(applied: Applied) -> int | None:
    return next((i.meter_id for i in applied.msg.instructions if isinstance(i, parser.OFPInstructionMeter)), None)
