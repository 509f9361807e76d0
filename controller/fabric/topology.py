"""Routing by formula: each builder knows its topology, so nothing searches it.

A builder hands its Fabric one Topology (RipL style): the port numbering the
builder cables with, and, from NIC and switch coordinates alone, the
equal-cost paths between two leaves, the switches in their middle (vias), the
egress ports of the path across one via, and a switch's ECMP set towards a
NIC. Answers cost O(1) (or O(paths) when the paths themselves are asked for)
and nothing per leaf pair is stored: memory is O(links) at any size.

Conventions the Fabric relies on (and tests/unit/test_fabric_routing.py
checks against a breadth-first search of the graph, for every kind):
- a path is a tuple of switch names from src's leaf to dst's leaf; paths
  come sorted; a NIC's own leaf is the one-switch path (leaf,);
- vias are the middle switches of those paths, sorted by name: spines,
  fat-tree cores across pods, fat-tree aggregation switches within a pod;
- every via lies on exactly one of a leaf pair's paths.

Port numbering:
- rail leaf: ports 1..S face servers (server s on port s+1), then uplinks,
  spine j on port S+1+j;
- shared spine: leaf (pod p, rail r) on port 1 + p*R + r;
- per-rail spine: leaf (pod p, its rail) on port 1 + p;
- fat tree: edge ports 1..k/2 face hosts, k/2+1..k face aggs; agg ports
  1..k/2 face edges, k/2+1..k face cores; core port p+1 faces pod p.
"""

from __future__ import annotations

import abc

from controller.fabric import addressing as ad
from controller.fabric.addressing import NicId
from controller.fabric.model import Endpoint, Switch, Tier
from controller.fabric.spec import FabricSpec, Kind, PlaneMode

Path = tuple[str, ...]


class Topology(abc.ABC):
    """Routing of one fabric kind. NICs passed in are known to the fabric."""

    @abc.abstractmethod
    def paths(self, src: NicId, dst: NicId) -> list[Path]:
        """Every shortest switch path from src's leaf to dst's leaf, sorted."""

    @abc.abstractmethod
    def path_count(self, src: NicId, dst: NicId) -> int:
        """len(paths(src, dst)), without building them."""

    @abc.abstractmethod
    def vias(self, src: NicId, dst: NicId) -> tuple[str, ...]:
        """The middle switches of the src->dst paths, sorted; () within a leaf."""

    @abc.abstractmethod
    def via_hops(self, src: NicId, dst: NicId, via: str) -> tuple[Endpoint, ...] | None:
        """Egress ports from src's leaf up to (not including) dst's leaf on the
        path across `via`; None when `via` is not one of vias(src, dst)."""

    @abc.abstractmethod
    def next_hops(self, switch: Switch, dst: NicId) -> tuple[int, ...]:
        """Ports of `switch` (not dst's own leaf) on every shortest path to dst's leaf."""


class RailTopology(Topology):
    """Rail-optimized (shared spines or one plane of spines per rail) and
    rail-only (no spines: a leaf reaches only its own NICs)."""

    def __init__(self, spec: FabricSpec) -> None:
        self.rails = spec.rails
        self.pods = spec.pods
        self.servers = spec.servers_per_pod
        self.spines = spec.spines if spec.kind is Kind.RAIL_OPTIMIZED else 0
        self.per_rail = spec.kind is Kind.RAIL_OPTIMIZED and spec.plane_mode is PlaneMode.PER_RAIL
        # Leaves are indexed pod * rails + rail; planes are rails when per-rail, else the one plane 0.
        self._leaves = [ad.leaf_name(p, r) for p in range(self.pods) for r in range(self.rails)]
        planes = range(self.rails) if self.per_rail else range(1 if self.spines else 0)
        self.spine_names = [[self.spine_name(j, plane) for j in range(self.spines)] for plane in planes]
        self._spine_at = {
            name: (plane, j) for plane, names in enumerate(self.spine_names) for j, name in enumerate(names)
        }
        self._vias = [tuple(sorted(names)) for names in self.spine_names]
        self._uplink_ports = tuple(self.leaf_uplink_port(j) for j in range(self.spines))
        # Egress ends of every uplink and downlink: the hops of any path, shared, never rebuilt.
        self._up = [tuple(Endpoint(leaf, port) for port in self._uplink_ports) for leaf in self._leaves]
        # A spine's downlinks by pod (per-rail) or by leaf index (shared).
        self._down = [
            [
                tuple(Endpoint(name, self.spine_port(p, plane)) for p in range(self.pods))
                if self.per_rail
                else tuple(Endpoint(name, self.spine_port(p, r)) for p in range(self.pods) for r in range(self.rails))
                for name in names
            ]
            for plane, names in enumerate(self.spine_names)
        ]

    # --- the numbering the builder cables with ----------------------------
    def spine_name(self, j: int, plane: int) -> str:
        return ad.spine_name(j, plane=plane) if self.per_rail else ad.spine_name(j)

    def access_port(self, server: int) -> int:
        return server + 1

    def leaf_uplink_port(self, j: int) -> int:
        return self.servers + 1 + j

    def spine_port(self, pod: int, rail: int) -> int:
        """The port of a spine (of this rail's plane, when per-rail) facing leaf (pod, rail)."""
        return 1 + pod if self.per_rail else 1 + pod * self.rails + rail

    # --- routing ----------------------------------------------------------
    def _plane(self, src: NicId, dst: NicId) -> int | None:
        """The plane joining two different leaves; None when nothing does."""
        if not self.spines or (self.per_rail and src.rail != dst.rail):
            return None
        return src.rail if self.per_rail else 0

    @staticmethod
    def _same_leaf(src: NicId, dst: NicId) -> bool:
        return src.pod == dst.pod and src.rail == dst.rail

    def paths(self, src: NicId, dst: NicId) -> list[Path]:
        a = self._leaves[src.pod * self.rails + src.rail]
        if self._same_leaf(src, dst):
            return [(a,)]
        plane = self._plane(src, dst)
        if plane is None:
            return []
        b = self._leaves[dst.pod * self.rails + dst.rail]
        return [(a, spine, b) for spine in self._vias[plane]]

    def path_count(self, src: NicId, dst: NicId) -> int:
        if self._same_leaf(src, dst):
            return 1
        return 0 if self._plane(src, dst) is None else self.spines

    def vias(self, src: NicId, dst: NicId) -> tuple[str, ...]:
        plane = None if self._same_leaf(src, dst) else self._plane(src, dst)
        return () if plane is None else self._vias[plane]

    def via_hops(self, src: NicId, dst: NicId, via: str) -> tuple[Endpoint, ...] | None:
        # Placement and TE call this per flow and candidate: plain indexing, no helper calls.
        at = self._spine_at.get(via)
        if at is None:
            return None
        plane, j = at
        rails = self.rails
        a, b = src.pod * rails + src.rail, dst.pod * rails + dst.rail
        if a == b:
            return None
        if self.per_rail:
            if src.rail != plane or dst.rail != plane:
                return None
            return (self._up[a][j], self._down[plane][j][dst.pod])
        return (self._up[a][j], self._down[plane][j][b])

    def next_hops(self, switch: Switch, dst: NicId) -> tuple[int, ...]:
        if not self.per_rail or switch.rail == dst.rail:  # shared spines have no rail: they reach all
            if switch.tier is Tier.LEAF:
                return self._uplink_ports  # any other leaf: up to every spine it has
            if switch.tier is Tier.SPINE:
                return (self.spine_port(dst.pod, dst.rail),)
        return ()


class FatTreeTopology(Topology):
    """A k-ary fat tree: k pods of k/2 edge and k/2 aggregation switches, and
    (k/2)^2 cores; core c joins aggregation switch c // (k/2) of every pod."""

    def __init__(self, spec: FabricSpec) -> None:
        self.k = spec.k
        self.half = half = spec.k // 2
        self.core_names = [ad.spine_name(c) for c in range(half * half)]
        self._core_at = {name: c for c, name in enumerate(self.core_names)}
        self._agg_at = {ad.agg_name(p, x): (p, x) for p in range(self.k) for x in range(half)}
        self._cores_sorted = tuple(sorted(self.core_names))
        self._aggs_sorted = [tuple(sorted(ad.agg_name(p, x) for x in range(half))) for p in range(self.k)]
        self._up_ports = tuple(self.up_port(i) for i in range(half))
        # Egress ends by (pod, switch index, port index), shared by every path.
        self._edge_up = [
            [tuple(Endpoint(ad.edge_name(p, e), self.up_port(x)) for x in range(half)) for e in range(half)]
            for p in range(self.k)
        ]
        self._agg_up = [
            [tuple(Endpoint(ad.agg_name(p, x), self.up_port(i)) for i in range(half)) for x in range(half)]
            for p in range(self.k)
        ]
        self._agg_down = [
            [tuple(Endpoint(ad.agg_name(p, x), self.down_port(e)) for e in range(half)) for x in range(half)]
            for p in range(self.k)
        ]
        self._core_down = [tuple(Endpoint(name, self.down_port(p)) for p in range(self.k)) for name in self.core_names]

    # --- the numbering the builder cables with ----------------------------
    def down_port(self, i: int) -> int:
        """Edge: host i; aggregation: edge i; core: pod i."""
        return i + 1

    def up_port(self, i: int) -> int:
        """Edge: aggregation switch i of its pod; aggregation: its i-th core."""
        return self.half + 1 + i

    def core_of(self, agg: int, i: int) -> int:
        """The core that aggregation switch `agg`'s i-th uplink reaches."""
        return agg * self.half + i

    # --- routing ----------------------------------------------------------
    def edge_of(self, nic: NicId) -> int:
        return nic.server // self.half

    def _edge(self, nic: NicId) -> str:
        return ad.edge_name(nic.pod, nic.server // self.half)

    def paths(self, src: NicId, dst: NicId) -> list[Path]:
        a, b = self._edge(src), self._edge(dst)
        if a == b:
            return [(a,)]
        if src.pod == dst.pod:
            return [(a, agg, b) for agg in self._aggs_sorted[src.pod]]
        return sorted(
            (a, ad.agg_name(src.pod, c // self.half), core, ad.agg_name(dst.pod, c // self.half), b)
            for c, core in enumerate(self.core_names)
        )

    def path_count(self, src: NicId, dst: NicId) -> int:
        if src.pod != dst.pod:
            return self.half * self.half
        return 1 if self.edge_of(src) == self.edge_of(dst) else self.half

    def vias(self, src: NicId, dst: NicId) -> tuple[str, ...]:
        if src.pod != dst.pod:
            return self._cores_sorted
        return () if self.edge_of(src) == self.edge_of(dst) else self._aggs_sorted[src.pod]

    def via_hops(self, src: NicId, dst: NicId, via: str) -> tuple[Endpoint, ...] | None:
        half = self.half
        ea, eb = src.server // half, dst.server // half
        if src.pod == dst.pod:
            at = self._agg_at.get(via)
            if at is None or at[0] != src.pod or ea == eb:
                return None
            x = at[1]
            return (self._edge_up[src.pod][ea][x], self._agg_down[src.pod][x][eb])
        c = self._core_at.get(via)
        if c is None:
            return None
        x, i = divmod(c, half)
        return (
            self._edge_up[src.pod][ea][x],
            self._agg_up[src.pod][x][i],
            self._core_down[c][dst.pod],
            self._agg_down[dst.pod][x][eb],
        )

    def next_hops(self, switch: Switch, dst: NicId) -> tuple[int, ...]:
        if switch.tier is Tier.LEAF:
            return self._up_ports  # any other edge: up to every aggregation switch of its pod
        if switch.tier is Tier.AGG:
            return (self.down_port(self.edge_of(dst)),) if switch.pod == dst.pod else self._up_ports
        return (self.down_port(dst.pod),)
