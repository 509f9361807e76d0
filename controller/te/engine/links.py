"""The engine's view of the fabric as arrays: every egress port a number, and
every leaf pair's equal-cost routes as a (vias × hops) matrix of those
numbers. Built once per fabric and leaf pair, so a cycle does array
arithmetic instead of walking paths. Pure."""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from controller.fabric import Endpoint, Fabric, NicId
from controller.te.jobs import Drains
from controller.te.load import drained

PAIR_CACHE = 1 << 18


@dataclass(frozen=True)
class Routes:
    """The equal-cost routes between two leaves: `hops[i]` are the switch
    egresses (link ids) from the source leaf up to, not including, the
    destination leaf, on the path across `vias[i]`."""

    vias: tuple[str, ...]
    hops: np.ndarray  # (len(vias), hops per path) of link ids
    capacity: np.ndarray  # capacity of each of `hops`
    position: dict[str, int]  # via -> row
    bottleneck_bps: float  # the widest any route is at its narrowest hop
    disjoint: bool  # no two routes share a link (a two-tier fabric): gains need no masks
    base: int  # row of vias[0] in the index's route table


class LinkIndex:
    """Egress ids 0..n-1, plus one padding id `pad` (infinite capacity, never
    reported) that fills the route table's short rows."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        egresses = list(fabric.capacity_bps)
        self.ids: dict[Endpoint, int] = {e: i for i, e in enumerate(egresses)}
        self.egresses = egresses
        self.pad = len(egresses)
        self.capacity = np.array([*(fabric.capacity_bps[e] for e in egresses), np.inf], dtype=float)
        self._rows: list[np.ndarray] = []  # every known route's hops, in table order
        self._table: np.ndarray | None = None
        self._routes: dict[tuple[str, str], Routes] = {}
        self._pairs: dict[tuple[NicId, NicId], Routes] = {}  # a cycle asks for every elephant's
        self._dead: tuple[Drains, np.ndarray] | None = None
        self._vias_at: dict[tuple[int, Endpoint, Endpoint | None], str] = {}  # (routes, reported ports) -> via

    def routes(self, src: NicId, dst: NicId) -> Routes:
        found = self._pairs.get((src, dst))
        if found is None:
            if len(self._pairs) > PAIR_CACHE:
                self._pairs.clear()  # flows come and go: bounded, and rebuilt from the leaf pairs in O(1) each
            found = self._pairs[(src, dst)] = self._leaf_routes(src, dst)
        return found

    def _leaf_routes(self, src: NicId, dst: NicId) -> Routes:
        a, b = self.fabric.attachment(src).node, self.fabric.attachment(dst).node
        found = self._routes.get((a, b))
        if found is None:
            vias = self.fabric.vias(src, dst)
            rows = [[self.ids[e] for e in self.fabric.egress_path(src, dst, via)[1:-1]] for via in vias]
            hops = np.array(rows, dtype=np.int64) if rows else np.zeros((0, 0), dtype=np.int64)
            widest = float(self.capacity[hops].min(axis=1).max()) if len(vias) else 0.0
            disjoint = len(np.unique(hops)) == hops.size
            found = Routes(
                vias, hops, self.capacity[hops], {v: i for i, v in enumerate(vias)}, widest, disjoint, len(self._rows)
            )
            self._rows.extend(hops)
            self._table = None
            self._routes[(a, b)] = found
        return found

    def via_of(self, routes: Routes, ingress: Endpoint | None, transit: Endpoint | None = None) -> str:
        """The via a flow takes, from the egress port its ingress leaf sends it
        out of and, where a second switch hashes (a three-tier spine, a fat
        tree's aggregation switch), the port that one chose; "" if unreported
        or if what is reported does not tell (the leaf's port alone names
        a spine, which hashes among several cores)."""
        if ingress is None:
            return ""
        found = self._vias_at.get((routes.base, ingress, transit))
        if found is None:
            reported = [self.ids.get(e, -1) for e in (ingress, transit) if e is not None]
            on = np.flatnonzero(np.all([(routes.hops == link).any(axis=1) for link in reported], axis=0))
            found = routes.vias[int(on[0])] if len(on) == 1 else ""
            self._vias_at[(routes.base, ingress, transit)] = found
        return found

    def table(self) -> np.ndarray:
        """(known routes, longest route) of link ids, padded with `pad`: the
        links of many flows in one fancy index, `table[routes.base + row]`."""
        if self._table is None:
            width = max((len(r) for r in self._rows), default=0)
            table = np.full((len(self._rows), width), self.pad, dtype=np.int64)
            for i, row in enumerate(self._rows):
                table[i, : len(row)] = row
            self._table = table
        return self._table

    def loads(self, rows: np.ndarray, bps: np.ndarray) -> np.ndarray:
        """Per egress (and pad), the sum of `bps` of flows on route-table `rows`."""
        links = self.table()[rows]
        return np.bincount(links.ravel(), np.repeat(bps, links.shape[1]), len(self.capacity))

    def dead(self, drains: Drains) -> np.ndarray:
        """Per egress: True if drained (its link, its switch or the switch it faces)."""
        if self._dead is None or self._dead[0] != drains:
            mask = np.zeros(len(self.capacity), dtype=bool)
            if drains.links or drains.switches:
                for i, egress in enumerate(self.egresses):
                    mask[i] = bool(drained(self.fabric, drains, (egress,)))
            self._dead = (drains, mask)
        return self._dead[1]


_INDEXES: weakref.WeakKeyDictionary[Fabric, LinkIndex] = weakref.WeakKeyDictionary()


def link_index(fabric: Fabric) -> LinkIndex:
    """The fabric's index, made on first use (a Fabric is immutable)."""
    index = _INDEXES.get(fabric)
    if index is None:
        index = _INDEXES[fabric] = LinkIndex(fabric)
    return index
