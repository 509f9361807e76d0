"""An emulated run's routing, valued in the simulator's fluid model: what
TE's paths were worth, TCP's own sharing aside.

The emulated figure of a run charges two things at once: the routing TE
chose, and how TCP shares each bottleneck (not max-min: flows that share a
NIC split it unevenly, and no routing changes that). Replaying the run's
path changes over the simulator's hash routing of the same 5-tuples, and
valuing each routing it had by its max-min rates, separates them: the
emulated figure below this one is TCP's; this one below 100% is the
routing's (and the time TE took to reach it).

For workloads whose flows all send for the whole run, on one placement,
with no events (Hedera's patterns, permutations): elsewhere the routing's
worth also depends on who sends when, which the run's records do not say.
Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from controller.fabric import Fabric
from controller.te.view import FlowKey, reverse_key
from emulation.model.fluid import max_min_rates
from emulation.simulate.bound import credited, optimum_bound
from emulation.simulate.routes import Network, build_routes, ecmp_routes, tier_hashes
from emulation.simulate.traffic import SimFlow, build_arms
from emulation.workload import Workload
from emulation.workload.model import Window


@dataclass(frozen=True)
class Rerouted:
    """From `at_s` (since traffic began) the flow `key` crosses `via`;
    "" gives it back to where the hash puts it."""

    at_s: float
    key: FlowKey
    via: str


@dataclass(frozen=True)
class RoutingWorth:
    """Credited fractions of the max-min optimum (as the reports define
    them) of the routing a run had: time-weighted over the judged window,
    and as it stood at the end. `strays`: flows TE moved that the workload
    does not have, left out of the valuation: TE moves any elephant it
    sees, and a run may carry a connection the workload does not name."""

    mean: float
    end: float
    strays: tuple[FlowKey, ...] = ()


class Replay:
    """The workload's flows on the fabric, hashed as Open vSwitch hashes them."""

    def __init__(self, fabric: Fabric, flows: Sequence[SimFlow]) -> None:
        self.flows = flows
        self.network = Network(fabric)
        self.routes = build_routes(self.network, [(f.src, f.dst) for f in self.flows])
        keys = [f.key for f in self.flows]
        self.position = {key: i for i, key in enumerate(keys)}
        self.hashed = ecmp_routes(self.routes, tier_hashes(keys))
        self.optimum = np.asarray(optimum_bound(fabric, self.flows).rates_bps, dtype=float)

    def worth(self, route: np.ndarray) -> float:
        rates = max_min_rates(self.routes.shares(route), self.network.capacity)
        return credited(rates, self.optimum) / float(self.optimum.sum())

    def acks(self, key: FlowKey) -> bool:
        """`key` is the reverse of one of the flows: its ACKs (TE may pin
        them, and they carry nothing the fluid model counts)."""
        return reverse_key(key) in self.position

    def knows(self, key: FlowKey) -> bool:
        """`key` is one of the flows, or their ACKs."""
        return key in self.position or self.acks(key)

    def rerouted(self, route: np.ndarray, change: Rerouted) -> np.ndarray:
        i = self.position.get(change.key)
        if i is None and self.acks(change.key):
            return route
        if i is None:
            raise ValueError(f"flow {change.key} is not one of the workload's (another seed or scenario?)")
        out = route.copy()
        if not change.via:
            out[i] = self.hashed[i]
        elif change.via in self.routes.by_via[i]:
            out[i] = self.routes.by_via[i][change.via]
        else:
            raise ValueError(f"flow {change.key}: no route via {change.via!r}; it has {sorted(self.routes.by_via[i])}")
        return out


def routing_worth(
    fabric: Fabric, workload: Workload, seed: int, changes: Sequence[Rerouted], from_s: float, duration_s: float
) -> RoutingWorth | None:
    """The routing the run had, from the hash and its `changes` in time
    order, valued over [from_s, duration_s] and at duration_s; None where
    not every flow sends for the whole run (jobs, windows, events)."""
    workload, arms = build_arms(fabric, workload, seed)
    flows = next(iter(arms.values())).flows
    # Who sends when matters to a routing's worth, and the run's records do not say it.
    if len(arms) > 1 or workload.events or any(f.window != Window() or f.bytes or f.job for f in flows):
        return None
    replay = Replay(fabric, flows)
    strays = {c.key for c in changes if not replay.knows(c.key)}
    route, at, total = replay.hashed, from_s, 0.0
    for change in sorted((c for c in changes if c.key not in strays), key=lambda c: c.at_s):
        if change.at_s >= duration_s:
            break
        if change.at_s > at:
            total += replay.worth(route) * (change.at_s - at)
            at = change.at_s
        route = replay.rerouted(route, change)
    end = replay.worth(route)
    total += end * (duration_s - at)
    return RoutingWorth(total / (duration_s - from_s), end, tuple(sorted(strays)))
