"""The optimum a scenario is judged against: max-min fair per-flow rates with
the routing chosen optimally, on a flow-level model of the fabric. Pure.

Rates follow progressive filling (water-filling): every flow grows at the
same pace until some link (or the flow's own demand) saturates; flows
through it freeze; repeat. Routing: every combination of spines is tried
when there are few (the demo fabric's permutations have at most 2^8), and
the lexicographically best sorted rate vector wins (the max-min optimum);
beyond that a min-max greedy assignment stands in, which is exact for the
equal-demand permutations scenarios use.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from controller.fabric import Fabric, NicId
from controller.te.jobs import Drains, JobFlow
from controller.te.paths import assign_greedy

EXHAUSTIVE_LIMIT = 4096


@dataclass(frozen=True)
class ModelFlow:
    src: NicId
    dst: NicId
    demand_bps: float = float("inf")  # UDP flows have a sending rate; TCP is elastic


@dataclass(frozen=True)
class Optimum:
    rates_bps: tuple[float, ...]
    vias: tuple[str, ...]

    @property
    def aggregate_bps(self) -> float:
        return sum(self.rates_bps)


_Link = TypeVar("_Link", bound=Hashable)


def max_min_rates(
    capacity: Mapping[_Link, float], paths: Sequence[Sequence[_Link]], demands: Sequence[float]
) -> list[float]:
    """Progressive filling over `paths` (egress lists) with per-flow demand caps."""
    n = len(paths)
    rates = [0.0] * n
    frozen = [False] * n
    remaining = dict(capacity)
    while not all(frozen):
        active = [i for i in range(n) if not frozen[i]]
        users: dict[_Link, list[int]] = {}
        for i in active:
            for e in paths[i]:
                users.setdefault(e, []).append(i)
        # The next level every active flow can reach together.
        step = min([remaining[e] / len(fl) for e, fl in users.items()] + [demands[i] - rates[i] for i in active])
        step = max(step, 0.0)
        for i in active:
            rates[i] += step
            for e in paths[i]:
                remaining[e] -= step
        for i in active:
            if rates[i] >= demands[i] - 1e-6 or any(remaining[e] <= 1e-6 for e in paths[i]):
                frozen[i] = True
    return rates


def optimum(
    fabric: Fabric, flows: Sequence[ModelFlow], emulated: bool = True, dead_links: Sequence[str] = ()
) -> Optimum:
    """Best max-min allocation over routings; capacities in emulated units by
    default. `dead_links` ("switch:port", either end) carry nothing: the
    optimum after a failure."""
    capacity = {e: (fabric.link_at(e).emulated_bps if emulated else c) for e, c in fabric.capacity_bps.items()}
    for name in dead_links:
        switch, _, port = name.rpartition(":")
        link = fabric.ports(switch)[int(port)]
        capacity[link.a] = capacity[link.b] = 0.0
    choices = [fabric.vias(f.src, f.dst) or ("",) for f in flows]
    combos = 1
    for c in choices:
        combos *= len(c)
    candidates: Iterable[tuple[str, ...]]
    if combos <= EXHAUSTIVE_LIMIT:
        candidates = itertools.product(*choices)
    else:
        equal = [
            JobFlow(f.src, f.dst, min(f.demand_bps, fabric.link_at(fabric.nic_egress(f.src)).capacity_bps))
            for f in flows
        ]
        placed, _ = assign_greedy(fabric, Drains(), {}, equal)
        candidates = [tuple(p.via for p in placed)]
    best: Optimum | None = None
    for vias in candidates:
        paths = [fabric.egress_path(f.src, f.dst, v or None) for f, v in zip(flows, vias)]
        rates = max_min_rates(capacity, paths, [f.demand_bps for f in flows])
        if best is None or sorted(rates) > sorted(best.rates_bps):
            best = Optimum(tuple(rates), tuple(vias))
    assert best is not None
    return best
