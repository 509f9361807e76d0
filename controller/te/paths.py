"""Path placement: which spine each cross-leaf flow takes, minimizing the
maximum link utilization. Pure.

Greedy (largest demand first, each flow onto the spine whose path ends least
utilized), then an improvement pass that moves flows off the most utilized
link while that lowers the maximum of the paths involved. Min-max routing is
NP-hard in general; for the equal-demand collectives of one job on a
two-tier fabric, greedy already reaches the bound, and the improvement pass
handles what earlier jobs left uneven.
"""

from __future__ import annotations

import zlib
from dataclasses import replace
from typing import Callable, Mapping, Sequence

from controller.fabric import Endpoint, Fabric, NicId
from controller.intent import spines_between
from controller.te.jobs import Drains, JobFlow
from controller.te.load import Load, drained, flow_path

MAX_IMPROVEMENT_MOVES = 64


class NoPath(Exception):
    def __init__(self, flow: JobFlow, reason: str) -> None:
        self.flow = flow
        super().__init__(reason)


def candidate_vias(fabric: Fabric, drains: Drains, src: NicId, dst: NicId) -> list[str]:
    """Spines (fat-tree cores) on an equal-cost path whose path is not drained."""
    return [via for via in spines_between(fabric, src, dst)
            if not drained(fabric, drains, fabric.egress_path(src, dst, via))]


def _peak(fabric: Fabric, load: Mapping[Endpoint, float], path: Sequence[Endpoint], extra: float) -> float:
    return max((load.get(e, 0.0) + extra) / fabric.link_at(e).capacity_bps for e in path)


def _add(load: Load, path: Sequence[Endpoint], bps: float) -> None:
    for e in path:
        load[e] = load.get(e, 0.0) + bps


def assign_greedy(fabric: Fabric, drains: Drains, base: Mapping[Endpoint, float],
                  flows: Sequence[JobFlow]) -> tuple[list[JobFlow], Load]:
    """Gives every flow that crosses spines a `via`; returns the flows and the
    load including them. Flows that share a leaf keep via ''."""
    load: Load = dict(base)
    placed: list[JobFlow | None] = [None] * len(flows)
    order = sorted(range(len(flows)), key=lambda i: (-flows[i].demand_bps, flows[i].src, flows[i].dst))
    for i in order:
        flow = flows[i]
        if fabric.attachment(flow.src).node == fabric.attachment(flow.dst).node:
            chosen = replace(flow, via="")
        else:
            vias = candidate_vias(fabric, drains, flow.src, flow.dst)
            if not vias:
                raise NoPath(flow, "every spine path between the two leaves is drained")
            chosen = replace(flow, via=min(vias, key=lambda v: (
                _peak(fabric, load, fabric.egress_path(flow.src, flow.dst, v), flow.demand_bps), v)))
        _add(load, flow_path(fabric, chosen), chosen.demand_bps)
        placed[i] = chosen
    flows_out = [f for f in placed if f is not None]
    return improve(fabric, drains, load, flows_out)


def improve(fabric: Fabric, drains: Drains, load: Load, flows: list[JobFlow]) -> tuple[list[JobFlow], Load]:
    """Moves single flows off the hottest link while that lowers its utilization
    without making the flow's new path hotter than the old peak."""
    for _ in range(MAX_IMPROVEMENT_MOVES):
        movable = [i for i, f in enumerate(flows) if f.via and f.demand_bps > 0]
        if not movable:
            break
        util = {e: load[e] / fabric.link_at(e).capacity_bps for e in load}
        hot = max(util, key=util.get)
        peak = util[hot]
        best = None
        for i in movable:
            flow = flows[i]
            path = flow_path(fabric, flow)
            if hot not in path:
                continue
            _add(load, path, -flow.demand_bps)
            for via in candidate_vias(fabric, drains, flow.src, flow.dst):
                if via == flow.via:
                    continue
                new_peak = _peak(fabric, load, fabric.egress_path(flow.src, flow.dst, via), flow.demand_bps)
                if new_peak < peak - 1e-9 and (best is None or new_peak < best[0]):
                    best = (new_peak, i, via)
            _add(load, path, flow.demand_bps)
        if best is None:
            break
        _, i, via = best
        _add(load, flow_path(fabric, flows[i]), -flows[i].demand_bps)
        flows[i] = replace(flows[i], via=via)
        _add(load, flow_path(fabric, flows[i]), flows[i].demand_bps)
    return flows, load


def assign_hashed(fabric: Fabric, drains: Drains, base: Mapping[Endpoint, float],
                  flows: Sequence[JobFlow]) -> tuple[list[JobFlow], Load]:
    """What ECMP would do: a fixed hash of the NIC pair picks the spine. The
    naive baseline, and a candidate the placer also evaluates."""
    load: Load = dict(base)
    out = []
    for flow in flows:
        if fabric.attachment(flow.src).node == fabric.attachment(flow.dst).node:
            chosen = replace(flow, via="")
        else:
            vias = candidate_vias(fabric, drains, flow.src, flow.dst)
            if not vias:
                raise NoPath(flow, "every spine path between the two leaves is drained")
            key = f"{flow.src}{flow.dst}".encode()
            chosen = replace(flow, via=vias[zlib.crc32(key) % len(vias)])
        _add(load, flow_path(fabric, chosen), chosen.demand_bps)
        out.append(chosen)
    return out, load


Assigner = Callable[[Fabric, Drains, Mapping[Endpoint, float], Sequence[JobFlow]], tuple[list[JobFlow], Load]]
