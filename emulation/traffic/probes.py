"""Reusable fabric probes: rail reachability and an ECMP elephant run with its evidence.

Used by the integration tests and the calibration benchmark, so what they show
is exactly what the tests assert.
"""

from __future__ import annotations

import random
import subprocess
from dataclasses import dataclass, field

from controller.fabric import Endpoint, Fabric, NicId, Tier
from controller.fabric import addressing as ad
from emulation.model.pairs import TCP_BASE_PORT
from emulation.net.fabric import EmulatedFabric
from emulation.traffic.counters import counter_delta, ecmp_uplink, port_counters
from emulation.traffic.iperf import FlowResult, FlowSpec, TrafficRun


def rail_pairs(fabric: Fabric) -> list[tuple[NicId, NicId]]:
    return [(a, b) for a in fabric.nics for b in fabric.nics if a != b and a.rail == b.rail]


def unreachable_pairs(emu: EmulatedFabric, pairs: list[tuple[NicId, NicId]] | None = None) -> list[tuple[NicId, NicId]]:
    """Ping every pair (in parallel, per source); return the pairs that failed."""
    pairs = pairs if pairs is not None else rail_pairs(emu.fabric)
    procs = [
        (
            pair,
            emu.popen(
                pair[0],
                ["ping", "-c", "2", "-i", "0.2", "-W", "2", "-I", ad.nic_ip(pair[0]), ad.nic_ip(pair[1])],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ),
        )
        for pair in pairs
    ]
    return [pair for pair, proc in procs if proc.wait(timeout=30) != 0]


@dataclass(frozen=True)
class ElephantRun:
    flows: tuple[FlowSpec, ...]
    results: tuple[FlowResult, ...]
    ecmp_port: tuple[Endpoint | None, ...]  # the source leaf's choice, per flow
    uplink_bps: dict[Endpoint, float]  # measured tx rate of every leaf uplink
    nic_rate_bps: float
    duration_s: float
    collisions: dict[Endpoint, tuple[int, ...]] = field(default_factory=dict)  # uplink -> flow indexes

    @property
    def aggregate_bps(self) -> float:
        return sum(r.goodput_bps for r in self.results)

    def to_dict(self) -> dict:
        return {
            "nic_rate_bps": self.nic_rate_bps,
            "duration_s": self.duration_s,
            "aggregate_goodput_bps": self.aggregate_bps,
            "aggregate_vs_nic_rate_sum": self.aggregate_bps / (self.nic_rate_bps * len(self.flows)),
            "flows": [
                {
                    "five_tuple": f.five_tuple,
                    "ecmp_uplink": None if p is None else f"{p.node}:{p.port}",
                    "goodput_bps": r.goodput_bps,
                    "fraction_of_nic_rate": r.goodput_bps / self.nic_rate_bps,
                    "error": r.error,
                }
                for f, r, p in zip(self.flows, self.results, self.ecmp_port)
            ],
            "uplinks": {f"{p.node}:{p.port}": bps for p, bps in sorted(self.uplink_bps.items(), key=str)},
            "collisions": {f"{p.node}:{p.port}": list(ix) for p, ix in self.collisions.items()},
        }


def run_elephants(emu: EmulatedFabric, flows: list[FlowSpec], duration_s: float = 8.0) -> ElephantRun:
    fabric = emu.fabric
    choice = [ecmp_uplink(fabric, f) for f in flows]
    before = port_counters(fabric)
    run = TrafficRun(emu.popen, flows, duration_s).start()
    try:
        results = run.wait()
    finally:
        run.stop()
    delta = counter_delta(before, port_counters(fabric))
    uplinks = {
        port: delta[port].tx_bytes * 8 / duration_s
        for leaf in fabric.switches_in(Tier.LEAF)
        for port in fabric.uplinks(leaf.name)
        if port in delta
    }
    by_port: dict[Endpoint, list[int]] = {}
    for i, port in enumerate(choice):
        if port is not None and port in uplinks:
            by_port.setdefault(port, []).append(i)
    collisions = {p: tuple(ix) for p, ix in by_port.items() if len(ix) > 1}
    nic_rate = fabric.access_link(flows[0].src).emulated_bps
    return ElephantRun(tuple(flows), tuple(results), tuple(choice), uplinks, nic_rate, duration_s, collisions)


def steer_by_source_port(
    emu: EmulatedFabric,
    pairs: list[tuple[NicId, NicId]],
    *,
    seed: int = 0,
    want_collision: bool = False,
    tries: int = 64,
) -> list[FlowSpec]:
    """TCP flows whose source ports make the leaves' own ECMP hash spread them
    evenly over the uplinks (or, with want_collision, stack the first two).

    Asks the switches (ofproto/trace), so it is the real hash, not a model of it.
    """
    rng = random.Random(seed)
    load: dict[Endpoint | None, int] = {}  # None: the switch's trace named no output port
    flows: list[FlowSpec] = []
    first_port: Endpoint | None = None
    for i, (src, dst) in enumerate(pairs):
        best: tuple[int, FlowSpec, Endpoint | None] | None = None
        for _ in range(tries):
            flow = FlowSpec(src, dst, "tcp", rng.randrange(20000, 60000), TCP_BASE_PORT + i)
            port = ecmp_uplink(emu.fabric, flow)
            score = load.get(port, 0)
            if want_collision and i == 1:
                score = 0 if port == first_port else 1
            if best is None or score < best[0]:
                best = (score, flow, port)
            if score == 0:
                break
        assert best is not None  # tries >= 1: the loop above ran
        _, flow, port = best
        if i == 0:
            first_port = port
        load[port] = load.get(port, 0) + 1
        flows.append(flow)
    return flows
