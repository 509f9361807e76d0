"""Path placement: which spine each cross-leaf flow takes, minimizing the
maximum link utilization. Pure.

Greedy (largest demand first, each flow onto the spine whose path ends least
utilized), then an improvement pass that moves flows off the most utilized
link while that lowers the maximum of the paths involved. Min-max routing is
NP-hard in general; for the equal-demand collectives of one job on a
two-tier fabric, greedy already reaches the bound, and the improvement pass
handles what earlier jobs left uneven.

Loads are layered: a `Layer` reads through to the base load (everything
already placed, possibly tens of thousands of egresses on a large fabric)
and records only what the flows being placed add, so evaluating a candidate
costs in proportion to its own flows.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from controller.errors import RailyardError
from controller.fabric import Endpoint, Fabric, NicId
from controller.te.jobs import Drains, JobFlow
from controller.te.load import drained, flow_path

MAX_IMPROVEMENT_MOVES = 64


class NoPath(RailyardError):
    """No undrained path for `flow`; callers say which job or request that refuses."""

    def __init__(self, flow: JobFlow, reason: str) -> None:
        self.flow = flow
        super().__init__(reason)


class Loads(Protocol):
    """Load in bps per egress port, read with `get(egress, 0.0)`: a plain
    mapping, or a Layer, so layers stack."""

    def get(self, egress: Endpoint, default: float, /) -> float: ...


class Layer:
    """Base load plus the load of the flows placed on top of it."""

    def __init__(self, fabric: Fabric, base: Loads) -> None:
        self.fabric = fabric
        self.base = base
        self.added: dict[Endpoint, float] = {}

    def bps(self, egress: Endpoint) -> float:
        return self.base.get(egress, 0.0) + self.added.get(egress, 0.0)

    def get(self, egress: Endpoint, default: float = 0.0) -> float:
        """A Layer reads like a load mapping, so layers stack."""
        return self.base.get(egress, default) + self.added.get(egress, 0.0)

    def add(self, path: Sequence[Endpoint], bps: float) -> None:
        for egress in path:
            self.added[egress] = self.added.get(egress, 0.0) + bps

    def peak(self, path: Sequence[Endpoint], extra: float = 0.0) -> float:
        """Highest utilization on `path` if `extra` more bps crossed it."""
        capacity = self.fabric.capacity_bps
        return max((self.bps(e) + extra) / capacity[e] for e in path)

    def touched_peak(self) -> float:
        """Highest utilization among the egresses the placed flows use."""
        return self.peak(list(self.added)) if self.added else 0.0


def candidate_vias(fabric: Fabric, drains: Drains, src: NicId, dst: NicId) -> list[str]:
    """Spines (fat-tree cores) on an equal-cost path whose path is not drained."""
    vias = fabric.vias(src, dst)
    if not drains.switches and not drains.links:
        return list(vias)
    return [via for via in vias if not drained(fabric, drains, fabric.egress_path(src, dst, via))]


def _same_leaf(fabric: Fabric, flow: JobFlow) -> bool:
    return fabric.attachment(flow.src).node == fabric.attachment(flow.dst).node


def _vias_or_fail(fabric: Fabric, drains: Drains, flow: JobFlow) -> list[str]:
    vias = candidate_vias(fabric, drains, flow.src, flow.dst)
    if not vias:
        raise NoPath(flow, "every spine path between the two leaves is drained")
    return vias


def assign_greedy(fabric: Fabric, drains: Drains, base: Loads, flows: Sequence[JobFlow]) -> tuple[list[JobFlow], Layer]:
    """Gives every flow that crosses spines a `via` (flows sharing a leaf keep
    via ''); returns the flows, in input order, and their load layer."""
    layer = Layer(fabric, base)
    placed: list[JobFlow] = list(flows)
    capacity = fabric.capacity_bps
    # Without drains, a path's middle (the hops a via chooses) depends only on
    # the two leaves: worked out once per leaf pair, not per flow and via.
    middles: dict[tuple[str, str], list[tuple[str, tuple[Endpoint, ...]]]] = {}
    for i in sorted(range(len(flows)), key=lambda i: (-flows[i].demand_bps, flows[i].src, flows[i].dst)):
        flow = flows[i]
        src_leaf, dst_leaf = fabric.attachment(flow.src).node, fabric.attachment(flow.dst).node
        if src_leaf == dst_leaf:
            chosen = replace(flow, via="")
        elif drains.switches or drains.links:
            chosen = replace(
                flow,
                via=min(
                    _vias_or_fail(fabric, drains, flow),
                    key=lambda v: (layer.peak(fabric.egress_path(flow.src, flow.dst, v), flow.demand_bps), v),
                ),
            )
        else:
            options = middles.get((src_leaf, dst_leaf))
            if options is None:
                vias = _vias_or_fail(fabric, drains, flow)
                options = [(v, fabric.egress_path(flow.src, flow.dst, v)[1:-1]) for v in vias]
                middles[(src_leaf, dst_leaf)] = options
            demand = flow.demand_bps
            ends = fabric.nic_egress(flow.src), fabric.attachment(flow.dst)
            # The peak over the whole path first, the ends shared by every via. Where
            # the ends decide it (a NIC its flows fill), the middle's own peak breaks
            # the tie: else every such flow takes the first spine, and a NIC-limited
            # all-to-all runs its uplinks full while the others idle.
            common = max((layer.bps(e) + demand) / capacity[e] for e in ends)

            def key(
                option: tuple[str, tuple[Endpoint, ...]], common: Any = common, demand: Any = demand
            ) -> tuple[float, float, str]:
                middle = max(((layer.bps(e) + demand) / capacity[e] for e in option[1]), default=0.0)
                return max(common, middle), middle, option[0]

            chosen = replace(flow, via=min(options, key=key)[0])
        layer.add(flow_path(fabric, chosen), chosen.demand_bps)
        placed[i] = chosen
    return improve(fabric, drains, layer, placed), layer


def improve(fabric: Fabric, drains: Drains, layer: Layer, flows: list[JobFlow]) -> list[JobFlow]:
    """Moves single flows off the hottest link they use while that strictly
    lowers the peak. Only egresses these flows touch are considered: the rest
    of the fabric cannot change."""
    for _ in range(MAX_IMPROVEMENT_MOVES):
        if not layer.added:
            break
        capacity = fabric.capacity_bps
        hot = max(layer.added, key=lambda e: layer.bps(e) / capacity[e])
        peak = layer.bps(hot) / capacity[hot]
        best = None
        for i, flow in enumerate(flows):
            if not flow.via or flow.demand_bps <= 0:
                continue
            path = flow_path(fabric, flow)
            if hot not in path:
                continue
            layer.add(path, -flow.demand_bps)
            for via in candidate_vias(fabric, drains, flow.src, flow.dst):
                if via != flow.via:
                    new_peak = layer.peak(fabric.egress_path(flow.src, flow.dst, via), flow.demand_bps)
                    if new_peak < peak - 1e-9 and (best is None or new_peak < best[0]):
                        best = (new_peak, i, via)
            layer.add(path, flow.demand_bps)
        if best is None:
            break
        _, i, via = best
        layer.add(flow_path(fabric, flows[i]), -flows[i].demand_bps)
        flows[i] = replace(flows[i], via=via)
        layer.add(flow_path(fabric, flows[i]), flows[i].demand_bps)
    return flows


def assign_hashed(fabric: Fabric, drains: Drains, base: Loads, flows: Sequence[JobFlow]) -> tuple[list[JobFlow], Layer]:
    """What ECMP would do: a fixed hash of the NIC pair picks the spine. The
    naive baseline, and a candidate the placer also evaluates."""
    layer = Layer(fabric, base)
    out = []
    for flow in flows:
        if _same_leaf(fabric, flow):
            chosen = replace(flow, via="")
        else:
            vias = _vias_or_fail(fabric, drains, flow)
            chosen = replace(flow, via=vias[zlib.crc32(f"{flow.src}{flow.dst}".encode()) % len(vias)])
        layer.add(flow_path(fabric, chosen), chosen.demand_bps)
        out.append(chosen)
    return out, layer
