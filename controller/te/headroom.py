"""Uplinks a placed job fills, kept out of the underlay's hash. Pure.

A placed job's flows are pinned across the spines placement chose, and they
come back every iteration. Traffic nobody placed (storage, checkpoints,
other tenants) is hashed by the underlay when it starts, before TE has seen
it: hashed onto an uplink a job already fills, it slows the job until TE
moves it a cycle later. That cycle is the whole gap between a reactive TE's
worst iteration and ideal spraying's.

So the underlay's owner leaves those uplinks out of its select groups for
unpinned traffic: an egress is reserved when its headroom after the placed
jobs' demand is under half the best headroom among the ports it is hashed
with. The ports with the most headroom always stay, so no destination loses
every next hop, and where jobs load a group's ports evenly nothing is
reserved: the hash is already as good as it can be there. Pinned traffic
(jobs, TE's moves, operators' pins) outranks the underlay and is untouched.
With rendezvous hashing (Open vSwitch's select groups and bundle action), a
port leaving the hash moves only the flows that were on it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping

from controller.fabric import Endpoint, Fabric
from controller.te.jobs import Job

# An egress whose headroom is under this share of its best sibling's is reserved.
HEADROOM_SHARE = 0.5


def reserved_egresses(fabric: Fabric, jobs: Iterable[Job], down: Collection[Endpoint] = ()) -> frozenset[Endpoint]:
    """The egresses the underlay's hash should keep unpinned traffic off.
    A port that is `down` has no headroom: when the one a group kept dies,
    the ports it reserved take the traffic again."""
    load: dict[Endpoint, float] = defaultdict(float)  # the placed jobs' pinned demand, bps
    groups: set[tuple[str, tuple[int, ...]]] = set()  # (switch, the next hops it hashes over)
    for job in jobs:
        for flow in job.flows:
            if flow.via:
                for hop in fabric.steering_hops(flow.src, flow.dst, flow.via):
                    load[hop] += flow.demand_bps
                    groups.add((hop.node, fabric.next_hops(hop.node, flow.dst)))
    capacity, dead = fabric.capacity_bps, frozenset(down)
    reserved: set[Endpoint] = set()
    for switch, ports in groups:
        egresses = [Endpoint(switch, p) for p in ports]
        headroom = {e: 0.0 if e in dead else capacity[e] - load.get(e, 0.0) for e in egresses}
        best = max(headroom.values())
        if best <= 0:
            continue  # every port full or dead: no port is better for the hash to favour
        reserved.update(e for e, room in headroom.items() if room < HEADROOM_SHARE * best and e not in dead)
    return frozenset(reserved)


def hashed_ports(switch: str, ports: tuple[int, ...], reserved: Mapping[str, frozenset[int]]) -> tuple[int, ...]:
    """The ports a select group over `ports` hashes unpinned traffic across:
    all but the reserved, or all where every one is reserved."""
    kept = tuple(p for p in ports if p not in reserved.get(switch, frozenset()))
    return kept or ports


def by_switch(reserved: Iterable[Endpoint]) -> dict[str, frozenset[int]]:
    ports: dict[str, set[int]] = defaultdict(set)
    for egress in reserved:
        ports[egress.node].add(egress.port)
    return {switch: frozenset(p) for switch, p in ports.items()}
