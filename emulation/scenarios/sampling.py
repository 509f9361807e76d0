"""What a scenario run measures on the emulated fabric itself, beside the
controller and independently of it: each egress's rate and queue, drops at
the queues, packets Railyard's meters policed, and where the underlay's own
hash sends each job flow."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from controller.fabric import Endpoint, Fabric, Tier
from controller.southbound.overlay import is_railyard_meter
from emulation.agent.telemetry_agent import FabricSampler, read_queues
from emulation.net import ovs
from emulation.traffic.counters import ecmp_uplink
from emulation.traffic.iperf import FlowSpec
from emulation.workload.expand import Plan

SAMPLE_INTERVAL_S = 0.25


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since traffic start
    tx_bps: dict[Endpoint, float]  # per switch egress, emulated units
    queue_bytes: dict[Endpoint, int]


def _sample(fabric: Fabric, start: float, stop: threading.Event, out: list[Sample]) -> None:
    """Transmit rate and queue per egress, read the way the telemetry agent reads
    them (kernel counters and tc, one pass), independently of the controller."""
    sampler = FabricSampler(fabric)
    before, then = sampler.ports_now(), time.time()
    while not stop.wait(SAMPLE_INTERVAL_S):
        now_counters, now = sampler.ports_now(), time.time()
        dt = max(now - then, 1e-3)
        tx = {e: max(c.tx_bytes - before[e].tx_bytes, 0) * 8 / dt for e, c in now_counters.items() if e in before}
        out.append(Sample(now - start, tx, {e: c.queue_bytes for e, c in now_counters.items()}))
        before, then = now_counters, now


def _drops() -> dict[str, int]:
    """Drops so far at every fabric queue, by interface."""
    return {dev: drops for dev, (_, drops) in read_queues().items() if dev.startswith("ry")}


class PolicedTally:
    """Packets Railyard's meters dropped, summed over the run. A meter is
    removed seconds after its incast ends, and its id may come back with a
    fresh count, so counts are read while the run goes on, not once at its end.
    Read at the leaves only: Railyard meters a sender at its ingress leaf
    (southbound/overlay.py, meter_ids), and every read is an ovs-ofctl
    process and a request to the one ovs-vswitchd that also forwards the
    run's traffic (the k=4 fat tree has 8 leaves of 20 switches)."""

    def __init__(self, fabric: Fabric) -> None:
        self.switches = sorted(s.name for s in fabric.switches_in(Tier.LEAF))
        self.last: dict[tuple[str, int], int] = {}
        self.total = 0

    def sample(self) -> None:
        seen = {}
        for switch in self.switches:
            for meter_id, n in ovs.meter_band_packets(switch).items():
                if is_railyard_meter(meter_id):
                    before = self.last.get((switch, meter_id), 0)
                    self.total += n - before if n >= before else n
                    seen[(switch, meter_id)] = n
        self.last = seen  # a meter gone is forgotten: if its id returns, it counts from zero

    def run(self, stop: threading.Event, interval_s: float = 0.5) -> None:
        while not stop.wait(interval_s):
            self.sample()
        self.sample()


class FabricWatch:
    """The samplers of one run: made before traffic starts (drops count from
    then), started with it, stopped when it ends."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.samples: list[Sample] = []
        self.policed = PolicedTally(fabric)
        self.drops_by_port: dict[str, int] = {}  # interface -> drops at its queue, once stopped
        self._drops_before = _drops()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self, start: float) -> None:
        """`start`: when traffic started (samples' t counts from it)."""
        self._threads = [
            threading.Thread(target=_sample, args=(self.fabric, start, self._stop, self.samples), daemon=True),
            threading.Thread(target=self.policed.run, args=(self._stop,), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self.drops_by_port = {dev: n - self._drops_before.get(dev, 0) for dev, n in _drops().items()}


def underlay_vias(fabric: Fabric, plan: Plan) -> dict[int, str]:
    """Where the switches' own hash sends each job flow (ofproto/trace at its
    ingress leaf; a rail-optimized leaf's uplink names the spine)."""
    out = {}
    for i, t in enumerate(plan.transfers):
        if not t.job:
            continue
        uplink = ecmp_uplink(fabric, FlowSpec(t.src, t.dst, t.protocol, t.src_port, t.dst_port))
        if uplink is not None and uplink.port:
            link = fabric.ports(uplink.node).get(uplink.port)
            out[i] = link.peer(uplink.node).node if link is not None and not link.is_access else ""
    return out
