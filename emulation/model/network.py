"""The optimum's view of a fabric and a set of flows. Pure.

- Capacities: every egress of the fabric, in real or emulated units, with an
  outage (dead or drained links and switches) at zero.
- Commodities: flows between the same two leaves cross the same equal-cost
  paths (a path's switch hops depend only on the two leaves and the via), so
  routing is decided per commodity, not per flow. A flow's own links are its
  NIC's transmit side and the leaf port into its destination NIC: they bound
  the flow's total, whichever path it takes.
- Bundles: flows of one commodity whose NIC links carry no other flow, with
  the same cap (demand, NIC links), are interchangeable: swapping two of them
  maps every constraint onto itself. The max-min fair allocation is unique,
  so they get the same rate in it, and one variable stands for all of them.
  That is exact, and it turns a 16K-flow permutation into one variable per
  pair of leaves. Flows that share a NIC link with another flow (incast,
  all-to-all) stay apart, with a row for each shared NIC link.

Everything is normalised by the largest capacity involved, so the LPs see
numbers near 1 whatever the units.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from controller.fabric import Endpoint, Fabric, FabricError, NicId


class Units(str, enum.Enum):
    REAL = "real"  # Link.capacity_bps: the fabric the spec describes (e.g. 400G NICs)
    EMULATED = "emulated"  # Link.emulated_bps: what the emulation shapes each link to


@dataclass(frozen=True)
class ModelFlow:
    src: NicId
    dst: NicId
    demand_bps: float = math.inf  # UDP flows have a sending rate; TCP is elastic


@dataclass(frozen=True)
class Outage:
    """What carries nothing: links named by either end ("switch:port", as
    drains and telemetry name them; both directions die) and whole switches
    (every port, both directions)."""

    links: frozenset[str] = frozenset()
    switches: frozenset[str] = frozenset()

    @classmethod
    def of(cls, links: Iterable[str] = (), switches: Iterable[str] = ()) -> Outage:
        return cls(frozenset(links), frozenset(switches))


NO_OUTAGE = Outage()


def capacities(fabric: Fabric, units: Units = Units.EMULATED, outage: Outage = NO_OUTAGE) -> dict[Endpoint, float]:
    """Capacity of every egress (switch ports and NIC transmit sides), bps."""
    if units is Units.REAL:
        caps = dict(fabric.capacity_bps)
    else:
        caps = {e: fabric.link_at(e).emulated_bps for e in fabric.capacity_bps}
    for name in sorted(outage.links):
        switch, _, port = name.rpartition(":")
        try:
            link = fabric.ports(switch)[int(port)]
        except (FabricError, KeyError, ValueError):
            raise FabricError(f"outage: no link {name!r} (switch:port) in fabric {fabric.spec.name}") from None
        caps[link.a] = caps[link.b] = 0.0
    for switch in sorted(outage.switches):
        for link in fabric.ports(switch).values():
            caps[link.a] = caps[link.b] = 0.0
    return caps


@dataclass(frozen=True, eq=False)
class Commodity:
    src_leaf: str
    dst_leaf: str
    vias: tuple[str, ...]  # per live path; "" where the leaves have a single path
    paths: tuple[np.ndarray, ...]  # per live path: indices (into Network.links) of its switch-to-switch hops


@dataclass(frozen=True, eq=False)
class Bundle:
    commodity: int
    members: np.ndarray  # flow indices
    cap: float  # per flow, normalised: demand and the flow's own NIC links
    shared: tuple[int, ...]  # NIC links (indices) it shares with other flows; () for a bundle of several


@dataclass(frozen=True, eq=False)
class Network:
    flows: tuple[ModelFlow, ...]
    scale_bps: float  # bps per model unit
    links: tuple[Endpoint, ...]  # every egress a live flow can touch
    link_cap: np.ndarray  # normalised, per link
    fabric_links: np.ndarray  # indices of the switch-to-switch links on live paths
    commodities: tuple[Commodity, ...]
    flow_commodity: np.ndarray  # per flow; -1 for a flow with no live path (rate 0)
    flow_access: np.ndarray  # per flow: (its NIC's transmit side, the leaf port into its destination)
    flow_cap: np.ndarray  # per flow, normalised; 0 for a dead flow
    bundles: tuple[Bundle, ...]

    def live(self) -> np.ndarray:
        return self.flow_commodity >= 0

    def flow_path(self, flow: int, path: int) -> np.ndarray:
        """Every link (index) of `flow` on its commodity's `path`-th live path."""
        commodity = self.commodities[int(self.flow_commodity[flow])]
        return np.concatenate([self.flow_access[flow][:1], commodity.paths[path], self.flow_access[flow][1:]])


def build_network(fabric: Fabric, flows: Sequence[ModelFlow], caps: Mapping[Endpoint, float]) -> Network:
    n = len(flows)
    index: dict[Endpoint, int] = {}
    links: list[Endpoint] = []

    def link_id(e: Endpoint) -> int:
        i = index.get(e)
        if i is None:
            i = index[e] = len(links)
            links.append(e)
        return i

    # Commodities, each path computed once from a representative flow.
    by_leaves: dict[tuple[str, str], int] = {}
    commodities: list[Commodity] = []
    flow_commodity = np.full(n, -1, dtype=np.int64)
    flow_access = np.zeros((n, 2), dtype=np.int64)
    flow_cap = np.zeros(n)
    for i, f in enumerate(flows):
        src_e, dst_e = fabric.nic_egress(f.src), fabric.attachment(f.dst)
        key = (fabric.attachment(f.src).node, dst_e.node)
        c = by_leaves.get(key)
        if c is None:
            c = by_leaves[key] = len(commodities)
            commodities.append(_commodity(fabric, f, key, caps, link_id))
        flow_access[i] = (link_id(src_e), link_id(dst_e))
        cap = min(f.demand_bps, caps[src_e], caps[dst_e])
        if commodities[c].paths and cap > 0:
            flow_commodity[i] = c
            flow_cap[i] = cap

    link_cap = np.array([caps[e] for e in links], dtype=float)
    live = flow_commodity >= 0
    finite = [x for x in (*link_cap, *flow_cap[live]) if math.isfinite(x) and x > 0]
    scale = float(max(finite, default=1.0))
    link_cap = link_cap / scale
    flow_cap = flow_cap / scale

    # NIC links carrying two or more live flows need a row; the others are a bound on their flow.
    users = np.bincount(flow_access[live].ravel(), minlength=len(links))
    groups: dict[tuple[int, float], list[int]] = {}
    bundles: list[Bundle] = []
    for i in np.flatnonzero(live).tolist():
        shared = tuple(int(a) for a in flow_access[i] if users[a] > 1)
        if shared:
            bundles.append(Bundle(int(flow_commodity[i]), np.array([i]), float(flow_cap[i]), shared))
        else:
            groups.setdefault((int(flow_commodity[i]), float(flow_cap[i])), []).append(i)
    bundles += [Bundle(c, np.array(members), cap, ()) for (c, cap), members in groups.items()]
    used = sorted({int(j) for k in commodities for p in k.paths for j in p})
    return Network(
        tuple(flows),
        scale,
        tuple(links),
        link_cap,
        np.array(used, dtype=np.int64),
        tuple(commodities),
        flow_commodity,
        flow_access,
        flow_cap,
        tuple(bundles),
    )


def _commodity(
    fabric: Fabric, rep: ModelFlow, key: tuple[str, str], caps: Mapping[Endpoint, float], link_id
) -> Commodity:
    """The live equal-cost paths between two leaves: a path with a dead hop is no path."""
    vias: tuple[str | None, ...] = fabric.vias(rep.src, rep.dst) or (None,)
    live_vias, paths = [], []
    for via in vias:
        try:
            hops = fabric.egress_path(rep.src, rep.dst, via)[1:-1]
        except FabricError:  # no path at all (e.g. across rails of a rail-only fabric)
            continue
        if all(caps[e] > 0 for e in hops):
            live_vias.append(via or "")
            paths.append(np.array([link_id(e) for e in hops], dtype=np.int64))
    return Commodity(key[0], key[1], tuple(live_vias), tuple(paths))
