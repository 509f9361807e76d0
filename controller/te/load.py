"""Link load: bits per second leaving each egress port, against its capacity.

Keys are egress `Endpoint`s (switch, port), or (NIC name, 0) for a NIC's
transmit side: links are full duplex, so each direction is its own resource.
Loads are in the real fabric's units (Link.capacity_bps).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping

from controller.fabric import Endpoint, Fabric, Link
from controller.te.jobs import Drains, Job, JobFlow

Load = dict[Endpoint, float]


def flow_path(fabric: Fabric, flow: JobFlow) -> tuple[Endpoint, ...]:
    return fabric.egress_path(flow.src, flow.dst, flow.via or None)


def jobs_load(fabric: Fabric, jobs: Iterable[Job]) -> Load:
    load: Load = defaultdict(float)
    for job in jobs:
        for flow in job.flows:
            for egress in flow_path(fabric, flow):
                load[egress] += flow.demand_bps
    return load


def utilization(fabric: Fabric, load: Mapping[Endpoint, float], egress: Endpoint) -> float:
    return load.get(egress, 0.0) / fabric.link_at(egress).capacity_bps


def max_utilization(fabric: Fabric, load: Mapping[Endpoint, float]) -> float:
    return max((utilization(fabric, load, e) for e in load), default=0.0)


def merged(*loads: Mapping[Endpoint, float]) -> Load:
    """Per egress, the largest of the loads (predicted jobs vs measured traffic:
    measured includes the jobs' own traffic, so adding them would double count)."""
    out: Load = defaultdict(float)
    for load in loads:
        for egress, bps in load.items():
            out[egress] = max(out[egress], bps)
    return out


def link_name(fabric: Fabric, link: Link) -> str:
    """One stable name per link: its switch-side end for access links, else the
    lexicographically smaller 'switch:port' of its two ends."""
    ends = [e for e in (link.a, link.b) if e.port]
    return min(f"{e.node}:{e.port}" for e in ends)


def drained(fabric: Fabric, drains: Drains, egresses: Iterable[Endpoint]) -> str:
    """The first drained element on a path ('' if none)."""
    for egress in egresses:
        if egress.port and egress.node in drains.switches:
            return egress.node
        link = fabric.link_at(egress)
        peer = link.peer(egress.node)
        if peer.port and peer.node in drains.switches:
            return peer.node
        if drains.links and link_name(fabric, link) in drains.links:
            return link_name(fabric, link)
    return ""
