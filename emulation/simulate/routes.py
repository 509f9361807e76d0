"""The fabric as the fluid model sees it: links by index, and every flow's
candidate routes (one per via: spine, or a fat tree's core). Pure.

A route is the run of switch egresses between the source NIC and the last
leaf's port to the destination; it depends only on the two leaves and the
via, so routes are computed once per (leaf pair, via) from the fabric's own
`egress_path` and shared by every flow between those leaves.

How a flow is routed is a choice of one route per flow (ECMP, TE) or a
split over several with weights (spraying); either way it becomes the flow
x link share matrix the fluid model solves (`emulation.model.fluid`).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from controller.fabric import Endpoint, Fabric, NicId
from controller.te.load import link_name
from emulation.model.fluid import incidence

_U64 = np.uint64


class Network:
    """Every egress of the fabric (switch ports and NIC transmit sides) by index."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        capacity = fabric.capacity_bps
        self.egresses: list[Endpoint] = list(capacity)
        self.index: dict[Endpoint, int] = {e: i for i, e in enumerate(self.egresses)}
        self.capacity = np.fromiter(capacity.values(), dtype=float, count=len(self.egresses))
        uplinks = {e for ups in fabric.pod_uplinks.values() for e in ups}
        self.is_uplink = np.fromiter((e in uplinks for e in self.egresses), dtype=bool, count=len(self.egresses))
        # What a telemetry agent reports: switch egresses (a NIC's own transmit side is not a switch port).
        self.is_switch_port = np.fromiter((e.port != 0 for e in self.egresses), dtype=bool, count=len(self.egresses))

    @property
    def size(self) -> int:
        return len(self.egresses)

    def link_ends(self, name: str) -> tuple[int, int]:
        """Both directions (egress indices) of a link named 'switch:port' by either end."""
        switch, _, port = name.rpartition(":")
        link = self.fabric.ports(switch)[int(port)]
        return self.index[link.a], self.index[link.b]

    def capacity_without(self, dead: Iterable[str]) -> np.ndarray:
        capacity = self.capacity.copy()
        for name in dead:
            capacity[list(self.link_ends(name))] = 0.0
        return capacity

    @cached_property
    def link_names(self) -> list[str]:
        """Per egress, the stable name of its link (as drains and the engine name links)."""
        return [link_name(self.fabric, self.fabric.link_at(e)) for e in self.egresses]


@dataclass(frozen=True)
class Routes:
    """Candidate routes of a set of flows.

    Flow f's options are `options[start[f]:start[f + 1]]` (route ids), in the
    order of `fabric.vias` ("" alone when both ends share a leaf). Route r
    crosses the egresses `hops[r, :hop_count[r]]` between the two NICs' own
    ends, `src_egress[f]` and `dst_egress[f]`."""

    network: Network
    src_egress: np.ndarray  # per flow: the source NIC's transmit side
    dst_egress: np.ndarray  # per flow: the last leaf's port to the destination NIC
    start: np.ndarray  # per flow (+1): offset of its options
    options: np.ndarray  # route ids
    hops: np.ndarray  # per route: egress indices, padded with -1
    hop_count: np.ndarray
    via: tuple[str, ...]  # per route
    by_via: tuple[dict[str, int], ...]  # per flow: via -> route id

    @property
    def flow_count(self) -> int:
        return len(self.src_egress)

    @cached_property
    def option_flow(self) -> np.ndarray:
        """Per option: the flow it belongs to."""
        return np.repeat(np.arange(self.flow_count), np.diff(self.start))

    @cached_property
    def choices(self) -> np.ndarray:
        """Per flow: how many routes it has."""
        return np.diff(self.start)

    def first_hop(self, route: np.ndarray, flow: np.ndarray) -> np.ndarray:
        """The ingress leaf's egress each flow takes on `route` (its uplink,
        or its port to the destination when both ends share the leaf)."""
        first = self.hops[route, 0]
        return np.where(self.hop_count[route] > 0, first, self.dst_egress[flow])

    def shares(self, route: np.ndarray) -> sp.csr_matrix:
        """The flow x link matrix with every flow on one route (`route[f]`)."""
        flows = np.arange(self.flow_count)
        return self._matrix(flows, route, np.ones(self.flow_count))

    def spray_shares(self, usable: np.ndarray | None = None) -> sp.csr_matrix:
        """Every flow split evenly over its routes (only the `usable` ones, if given:
        a sprayer that knows a path is dead stops using it)."""
        keep = np.ones(len(self.options), dtype=bool) if usable is None else usable[self.options]
        flows = self.option_flow[keep]
        per_flow = np.bincount(flows, minlength=self.flow_count)
        lonely = per_flow == 0  # no usable route: spread over all (it gets nothing either way)
        if lonely.any():
            keep |= lonely[self.option_flow]
            flows = self.option_flow[keep]
            per_flow = np.bincount(flows, minlength=self.flow_count)
        return self._matrix(flows, self.options[keep], 1.0 / per_flow[flows])

    def _matrix(self, flows: np.ndarray, route: np.ndarray, weight: np.ndarray) -> sp.csr_matrix:
        """(flow, route, weight) triples -> shares; a flow's own two NIC ends carry all of it."""
        hops = self.hops[route]
        valid = hops >= 0
        per_row = valid.sum(axis=1)
        n = self.flow_count
        own = np.arange(n)
        rows = np.concatenate([own, own, np.repeat(flows, per_row)])
        cols = np.concatenate([self.src_egress, self.dst_egress, hops[valid]])
        vals = np.concatenate([np.ones(n), np.ones(n), np.repeat(weight, per_row)])
        return incidence(rows, cols, vals, n, self.network.size)

    def route_usable(self, capacity: np.ndarray) -> np.ndarray:
        """Per route: every egress on it has capacity."""
        hops = np.where(self.hops >= 0, self.hops, 0)
        live = capacity[hops] > 0
        return np.all(live | (self.hops < 0), axis=1)

    def ingress_usable(self, capacity: np.ndarray) -> np.ndarray:
        """Per route: its first hop (the ingress leaf's uplink) is up. That is
        all a hashing leaf knows: a bucket whose port is down is skipped."""
        first = np.where(self.hop_count > 0, self.hops[:, 0], 0)
        return (self.hop_count == 0) | (capacity[first] > 0)


def build_routes(network: Network, pairs: Sequence[tuple[NicId, NicId]]) -> Routes:
    fabric = network.fabric
    index = network.index
    route_of: dict[tuple[str, str, str], int] = {}
    hop_lists: list[tuple[int, ...]] = []
    vias: list[str] = []
    group_routes: dict[tuple[str, str], tuple[int, ...]] = {}
    src_egress = np.empty(len(pairs), dtype=np.int64)
    dst_egress = np.empty(len(pairs), dtype=np.int64)
    per_flow: list[tuple[int, ...]] = []
    for f, (src, dst) in enumerate(pairs):
        src_egress[f] = index[fabric.nic_egress(src)]
        dst_end = fabric.attachment(dst)
        dst_egress[f] = index[dst_end]
        leaves = (fabric.attachment(src).node, dst_end.node)
        routes = group_routes.get(leaves)
        if routes is None:
            ids = []
            for via in fabric.vias(src, dst) or ("",):
                key = (*leaves, via)
                if key not in route_of:
                    route_of[key] = len(hop_lists)
                    hop_lists.append(tuple(index[e] for e in fabric.egress_path(src, dst, via or None)[1:-1]))
                    vias.append(via)
                ids.append(route_of[key])
            routes = group_routes[leaves] = tuple(ids)
        per_flow.append(routes)
    longest = max((len(h) for h in hop_lists), default=0)
    hops = np.full((len(hop_lists), max(longest, 1)), -1, dtype=np.int64)
    for r, h in enumerate(hop_lists):
        hops[r, : len(h)] = h
    counts = np.fromiter((len(r) for r in per_flow), dtype=np.int64, count=len(per_flow))
    start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    options = np.fromiter((r for routes in per_flow for r in routes), dtype=np.int64, count=int(counts.sum()))
    via_maps: dict[tuple[int, ...], dict[str, int]] = {}
    by_via = tuple(via_maps.setdefault(r, {vias[i]: i for i in r}) for r in per_flow)
    return Routes(
        network,
        src_egress,
        dst_egress,
        start,
        options,
        hops,
        np.fromiter((len(h) for h in hop_lists), dtype=np.int64, count=len(hop_lists)),
        tuple(vias),
        by_via,
    )


# --- the underlay's hash ----------------------------------------------------------


def flow_hash(keys: Sequence[tuple]) -> np.ndarray:
    """A fixed hash of each flow's 5-tuple, the fields the underlay's select
    groups hash (emulation/net/underlay.py HASH_FIELDS)."""
    return np.fromiter((zlib.crc32("|".join(map(str, key)).encode()) for key in keys), dtype=np.uint64, count=len(keys))


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a well-spread 64-bit hash of each value."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
        return x ^ (x >> _U64(31))


def ecmp_routes(routes: Routes, hashes: np.ndarray, usable: np.ndarray | None = None) -> np.ndarray:
    """Per flow, the route its 5-tuple hashes onto. Like an OVS select group
    with selection_method=hash, the pick is by highest score of (flow hash,
    bucket): rendezvous hashing, so a dead bucket (a route not `usable` at
    the ingress leaf) moves only the flows that were on it.

    One pick per flow over its vias: on a two-tier fabric the ingress leaf is
    the only switch with a choice. In a fat tree the edge and then the
    aggregation switch each hash; one pick over the cores has the same spread
    (without the polarisation identical hashes at both tiers could add), and
    only the edge's failover is modelled."""
    via_hash = np.fromiter((zlib.crc32(v.encode()) for v in routes.via), dtype=np.uint64, count=len(routes.via))
    flow_of = routes.option_flow
    with np.errstate(over="ignore"):
        score = _mix(hashes[flow_of] * _U64(0x9E3779B97F4A7C15) ^ via_hash[routes.options])
    if usable is not None:
        alive = usable[routes.options]
        # Usable buckets first; a flow with none keeps its hash over all of them.
        score = np.where(alive, score >> _U64(1) | _U64(1 << 63), score >> _U64(1))
    # Per flow (a contiguous run of options), the first option with the run's highest score.
    best = np.maximum.reduceat(score, routes.start[:-1])
    winners = np.flatnonzero(score == best[flow_of])
    first = winners[np.r_[True, flow_of[winners[1:]] != flow_of[winners[:-1]]]]
    return routes.options[first]
