"""The fabric as the fluid model sees it: links by index, and every flow's
candidate routes (one per via: spine, or a fat tree's core). Pure.

A route is the run of switch egresses between the source NIC and the last
leaf's port to the destination; it depends only on the two leaves and the
via, so routes are computed once per (leaf pair, via) from the fabric's own
`egress_path` and shared by every flow between those leaves.

How a flow is routed is a choice of one route per flow (ECMP, TE) or a
split over several with weights (spraying); either way it becomes the flow
x link share matrix the fluid model solves (`emulation.model.fluid`).

ECMP is the emulated underlay's own choice, bucket for bucket: every switch
on a route that has more than one next hop forwards through an OVS select
group (emulation/net/underlay.py), and `ecmp_routes` picks at each of them
the bucket OVS 3.1 picks (`emulation.simulate.ovs_hash`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from controller.fabric import Endpoint, Fabric, NicId
from controller.te.load import link_name
from emulation.model.fluid import incidence
from emulation.net.underlay import UPPER_TIER_HASH_PARAM
from emulation.simulate import ovs_hash


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
    ends, `src_egress[f]` and `dst_egress[f]`.

    Where the underlay hashes: at route r's t-th hashing switch (one with
    more than one next hop, so a select group: a rail leaf; a fat tree's
    edge, then its aggregation switch) the route leaves by its hop
    `hops[r, tier_hop[r, t]]`, the group's bucket `bucket[r, t]` (both -1
    past the route's last hashing switch)."""

    network: Network
    src_egress: np.ndarray  # per flow: the source NIC's transmit side
    dst_egress: np.ndarray  # per flow: the last leaf's port to the destination NIC
    start: np.ndarray  # per flow (+1): offset of its options
    options: np.ndarray  # route ids
    hops: np.ndarray  # per route: egress indices, padded with -1
    hop_count: np.ndarray
    via: tuple[str, ...]  # per route
    by_via: tuple[dict[str, int], ...]  # per flow: via -> route id
    bucket: np.ndarray  # per route x hashing switch: the select group's bucket index it takes, -1 padded
    tier_hop: np.ndarray  # per route x hashing switch: which of its hops that bucket's port is, -1 padded

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

    def transit_hop(self, route: np.ndarray) -> np.ndarray:
        """The egress each flow on `route` leaves its second hashing switch by
        (a three-tier spine's core uplink, a fat tree's aggregation uplink),
        -1 where the route hashes once or not at all."""
        if self.tier_hop.shape[1] < 2:
            return np.full(len(route), -1, dtype=np.int64)
        at = self.tier_hop[route, 1]
        return np.where(at >= 0, self.hops[route, np.maximum(at, 0)], -1)

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

    def ingress_usable(self, capacity: np.ndarray, reserved: np.ndarray | None = None) -> np.ndarray:
        """Per route and hashing switch (as `bucket`): the port it leaves that
        switch by is up. That is all a select group knows: a bucket whose
        watch port is down is skipped. The ingress leaf is the first (on a
        two-tier fabric, the only) hashing switch; a fat tree's aggregation
        switch hashes again, over its own uplinks.

        With `reserved` (per egress: kept out of the hash for unpinned
        traffic, controller/te/headroom.py), those ports are skipped too,
        but for a flow left with no route that avoids them all."""
        hop = np.maximum(np.take_along_axis(self.hops, np.maximum(self.tier_hop, 0), axis=1), 0)
        usable = (self.tier_hop < 0) | (capacity[hop] > 0)
        if reserved is None:
            return usable
        strict = usable & ((self.tier_hop < 0) | ~reserved[hop])
        whole = strict.all(axis=1)[self.options]
        flow_ok = np.bincount(self.option_flow, weights=whole, minlength=self.flow_count) > 0
        route_ok = np.zeros(len(usable), dtype=bool)
        route_ok[self.options] = flow_ok[self.option_flow]
        return np.where(route_ok[:, None], strict, usable)


def build_routes(network: Network, pairs: Sequence[tuple[NicId, NicId]]) -> Routes:
    fabric = network.fabric
    index = network.index
    route_of: dict[tuple[str, str, str], int] = {}
    hop_lists: list[tuple[int, ...]] = []
    vias: list[str] = []
    group_routes: dict[tuple[str, str], tuple[int, ...]] = {}
    tier_lists: list[tuple[tuple[int, int], ...]] = []  # per route: (hop, bucket) at each hashing switch
    # (switch, destination leaf) -> the switch's select group towards it, as port -> bucket index.
    groups: dict[tuple[str, str], dict[int, int]] = {}
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
                    path = fabric.egress_path(src, dst, via or None)[1:-1]
                    hop_lists.append(tuple(index[e] for e in path))
                    tier_lists.append(_hashing_hops(fabric, path, dst, dst_end.node, groups))
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
    tiers = max((len(t) for t in tier_lists), default=0)
    tier_hop = np.full((len(tier_lists), tiers), -1, dtype=np.int64)
    bucket = np.full((len(tier_lists), tiers), -1, dtype=np.int64)
    for r, t in enumerate(tier_lists):
        for i, (hop, b) in enumerate(t):
            tier_hop[r, i], bucket[r, i] = hop, b
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
        bucket,
        tier_hop,
    )


def _hashing_hops(
    fabric: Fabric,
    path: Sequence[Endpoint],
    dst: NicId,
    dst_leaf: str,
    groups: dict[tuple[str, str], dict[int, int]],
) -> tuple[tuple[int, int], ...]:
    """(hop, bucket index) at each hop of `path` where the underlay hashes:
    the switch has more than one next hop towards dst, so build_underlay
    gave it a select group with one bucket per next hop, in next_hops order."""
    out = []
    for i, hop in enumerate(path):
        group = groups.get((hop.node, dst_leaf))
        if group is None:
            # Next hops depend on the destination's leaf only, so one lookup serves all its NICs.
            ports = fabric.next_hops(hop.node, dst)
            group = groups[(hop.node, dst_leaf)] = {p: b for b, p in enumerate(ports)} if len(ports) > 1 else {}
        if group:
            out.append((i, group[hop.port]))
    return tuple(out)


# --- the underlay's hash ----------------------------------------------------------

_PROTOCOLS = {"tcp": ovs_hash.TCP, "udp": ovs_hash.UDP, "icmp": 1}


@functools.lru_cache(maxsize=1 << 17)
def _address(text: str) -> int:
    """An IPv4 address as an integer: by hand and memoised, as ipaddress's
    parser costs several times more and this runs per flow."""
    octets = bytes(map(int, text.split(".")))  # ValueError past 255
    if len(octets) != 4:
        raise ValueError(f"not an IPv4 address: {text!r}")
    return int.from_bytes(octets, "big")


def flow_hash(keys: Sequence[tuple], param: int = 0) -> np.ndarray:
    """Per flow, the hash the underlay's select groups with basis `param`
    compute from its 5-tuple (FlowKey: source and destination address,
    protocol name or number, source and destination port): OVS's own, so
    `ecmp_routes` picks the bucket the emulated switch picks. uint32."""
    n = len(keys)
    protocols = _PROTOCOLS
    src = np.fromiter((_address(k[0]) for k in keys), dtype=np.uint32, count=n)
    dst = np.fromiter((_address(k[1]) for k in keys), dtype=np.uint32, count=n)
    proto = np.fromiter((k[2] if isinstance(k[2], int) else protocols[k[2]] for k in keys), dtype=np.uint32, count=n)
    sport = np.fromiter((k[3] for k in keys), dtype=np.uint32, count=n)
    dport = np.fromiter((k[4] for k in keys), dtype=np.uint32, count=n)
    return ovs_hash.select_hash(src, dst, proto, sport, dport, param)


def tier_hashes(keys: Sequence[tuple]) -> np.ndarray:
    """Per flow (rows), the hash at each hashing tier (columns): the leaf's
    basis, then the upper tier's (emulation/net/underlay.py hash_param)."""
    return np.column_stack([flow_hash(keys), flow_hash(keys, UPPER_TIER_HASH_PARAM)])


def ecmp_routes(routes: Routes, hashes: np.ndarray, usable: np.ndarray | None = None) -> np.ndarray:
    """Per flow, the route the underlay's select groups send it along, given
    each flow's hashes (`tier_hashes`: a column per hashing tier; one column,
    or a vector, serves every tier): at every hashing switch, the bucket OVS picks
    (group_best_live_bucket: the highest score, the later bucket on a tie,
    buckets whose port is down skipped). `usable` is `Routes.ingress_usable`
    (per route and hashing switch), or per route for the ingress leaf alone.

    As in OVS, the choices are rendezvous hashing: a dead bucket moves only
    the flows that were on it. A switch with no live bucket drops the flow;
    here it keeps its best bucket, which crosses a dead link, so it gets
    nothing either way.

    A fat tree hashes twice, at the edge over its aggregation switches and at
    the aggregation switch over its cores; a three-tier rail fabric at the
    leaf over its cluster's spines and at the spine over its plane's cores.
    Both are modelled, each tier with its own basis as the underlay seeds
    them: with one basis the two score orders would agree and the second
    choice would follow the first (polarisation)."""
    hashes = np.asarray(hashes, dtype=np.uint32)
    if hashes.ndim == 1:
        hashes = hashes[:, None]
    flow_of = routes.option_flow
    options = routes.options
    tiers = routes.bucket.shape[1]
    if tiers > 2:
        raise ValueError(f"routes hash at {tiers} switches; ecmp_routes models at most two")
    if usable is not None and usable.ndim == 1:
        usable = np.column_stack([usable, np.ones((len(usable), max(tiers - 1, 0)), dtype=bool)])[:, :tiers]
    # Per option, a key whose per-flow maximum is OVS's choice: at each
    # hashing switch in turn (32 bits each, the first one highest),
    # live | score (16 bits) | bucket index (15 bits). Liveness first: any
    # live bucket beats every dead one; the index last: a tie goes to the
    # later bucket. All options of a flow that share the first switch's
    # bucket share its liveness and score, so the second switch decides
    # among exactly those.
    key = np.zeros(len(options), dtype=np.uint64)
    for t in range(tiers):
        bucket = routes.bucket[options, t]
        hashing = bucket >= 0
        size = int(bucket.max(initial=-1)) + 1
        if size > 1 << 15:
            raise ValueError(f"a select group of {size} buckets")
        # Scores per (flow, bucket id), then gathered per option: a group has no more buckets than a flow has options.
        column = hashes[:, min(t, hashes.shape[1] - 1), None]
        scores = ovs_hash.bucket_scores(column, np.arange(max(size, 1), dtype=np.uint32)[None, :])
        field = scores[flow_of, np.maximum(bucket, 0)].astype(np.uint64) << np.uint64(15)
        field |= np.maximum(bucket, 0).astype(np.uint64)
        if usable is not None:
            field |= usable[options, t].astype(np.uint64) << np.uint64(31)
        else:
            field |= np.uint64(1 << 31)
        key |= np.where(hashing, field, np.uint64(0)) << np.uint64(32 * (1 - t))
    # Per flow (a contiguous run of options), the first option with the run's highest key.
    best = np.maximum.reduceat(key, routes.start[:-1])
    winners = np.flatnonzero(key == best[flow_of])
    first = winners[np.r_[True, flow_of[winners[1:]] != flow_of[winners[:-1]]]]
    return routes.options[first]
