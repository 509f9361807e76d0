"""The engine's view of the fabric as arrays: every egress port a number, and
every leaf pair's equal-cost routes as a (vias × hops) matrix of those
numbers. Built once per fabric and leaf pair, so a cycle does array
arithmetic instead of walking paths. Pure."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from controller.fabric import Endpoint, Fabric, Link, NicId
from controller.te.jobs import Drains
from controller.te.load import link_name

PAIR_CACHE = 1 << 18
RELEASED_AT_ONCE = 256  # leaf pairs' routes freed between two pauses (~0.15 ms on ft2-16k)
UNKNOWN = -2  # a reported port that is no egress of this fabric: it names no route


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
    reported) that fills the route table's short rows. The route table has
    one row per route of every leaf pair asked for so far, a pair's routes
    in one block of rows from its `base`."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        egresses = list(fabric.capacity_bps)
        self.ids: dict[Endpoint, int] = {e: i for i, e in enumerate(egresses)}
        self.egresses = egresses
        self.pad = len(egresses)
        self.capacity = np.array([*(fabric.capacity_bps[e] for e in egresses), np.inf], dtype=float)
        self._dead: tuple[Drains, np.ndarray] | None = None
        self._no_routes()

    def _no_routes(self) -> None:
        """The route table and everything derived from it, empty: as new, and
        as `release` leaves it (what the fabric alone gives is kept)."""
        # Every known route's hops, in table order, padded with `pad`: a
        # buffer that doubles, so a new leaf pair appends its rows in O(its rows).
        self._buf = np.zeros((0, 0), dtype=np.int64)
        self._n = 0
        self.via_at: list[str] = []  # every known route's via, in table order
        self._table: np.ndarray | None = None
        self._table_by_hop: np.ndarray | None = None
        self._blocks: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._through: tuple[np.ndarray, np.ndarray] | None = None
        self._routes: dict[tuple[str, str], Routes] = {}
        self._pairs: dict[tuple[NicId, NicId], Routes] = {}  # a cycle asks for every elephant's
        self._at: list[tuple[Routes, NicId, NicId]] = []  # per block: its routes, and a NIC pair they join
        self._block_at: dict[int, int] = {}  # base -> block
        self._row_block: list[int] = []  # per row, its block
        self._reverse = np.zeros(0, dtype=np.int64)  # per row: the way back across its via (-2: unknown yet)
        self._via_rows: dict[int, int] = {}  # (routes, reported port ids), packed -> route-table row (via_rows)

    def __len__(self) -> int:
        """Route-table rows: every leaf pair's routes asked for so far."""
        return self._n

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
            found = Routes(vias, hops, self.capacity[hops], {v: i for i, v in enumerate(vias)}, widest, disjoint, 0)
            self._append(hops)
            found = self._add_block((a, b), found, src, dst)
        return found

    def _add_block(self, leaves: tuple[str, str], routes: Routes, src: NicId, dst: NicId) -> Routes:
        """`routes`, whose rows are in the table from row `_n` on, as the
        block of the leaf pair `leaves` (src and dst: a NIC pair they join)."""
        r = routes  # dataclasses.replace costs more than the copy itself, thousands of times a restart
        routes = Routes(r.vias, r.hops, r.capacity, r.position, r.bottleneck_bps, r.disjoint, self._n)
        self._n += len(routes.vias)
        self.via_at.extend(routes.vias)
        self._table = self._blocks = self._through = None
        self._routes[leaves] = routes
        self._block_at[routes.base] = len(self._at)
        self._row_block.extend([len(self._at)] * len(routes.vias))
        self._at.append((routes, src, dst))
        return routes

    def carrying(self, bases: Iterable[int]) -> LinkIndex:
        """A new index holding only the blocks at `bases`, each copied from
        this one rather than worked out again from the fabric (on ft2-16k,
        the ~5,500 leaf pairs of the soak's live view took 0.8 s to work
        out, and take under 0.1 s to copy). Their rows are new."""
        carried = LinkIndex(self.fabric)
        kept = [self._at[self._block_at[base]] for base in bases]
        sizes = np.array([len(routes.vias) for routes, _, _ in kept], dtype=np.int64)
        starts = np.array([routes.base for routes, _, _ in kept], dtype=np.int64)
        carried._buf = self._buf[np.repeat(starts - np.cumsum(sizes) + sizes, sizes) + np.arange(sizes.sum())]
        attachment = self.fabric.attachment
        for routes, src, dst in kept:
            carried._add_block((attachment(src).node, attachment(dst).node), routes, src, dst)
        return carried

    def release(self, pause: Callable[[], None]) -> None:
        """Empties this index (a restart's old one), a few hundred leaf pairs
        at a time with `pause` between: a thread that frees objects holds the
        interpreter until they are all gone, and the ~11,000 leaf pairs'
        routes of ft2-16k's index held it 12-18 ms at once in the daemon,
        while placement calls waited."""
        for cache in (self._pairs, self._routes, self._block_at, self._via_rows):
            cache.clear()  # references only: the routes are freed with `_at`
        while self._at:
            del self._at[-RELEASED_AT_ONCE:]
            pause()
        self._no_routes()  # with the same egress ids: one asked again works

    def _append(self, hops: np.ndarray) -> None:
        count, width = hops.shape
        if not count:
            return
        if width > self._buf.shape[1]:
            self._buf = np.pad(self._buf, ((0, 0), (0, width - self._buf.shape[1])), constant_values=self.pad)
        if self._n + count > len(self._buf):
            grown = np.full((max(2 * len(self._buf), self._n + count, 64), self._buf.shape[1]), self.pad, np.int64)
            grown[: self._n] = self._buf[: self._n]
            self._buf = grown
        self._buf[self._n : self._n + count, :width] = hops

    def routes_at(self, base: int) -> Routes:
        """The routes whose block starts at row `base`."""
        return self._at[self._block_at[base]][0]

    def row_of(self, base: int, via: str) -> int:
        """The route-table row of the route across `via` in the block at
        `base`; -1 if none crosses it."""
        position = self.routes_at(base).position.get(via)
        return -1 if position is None else base + position

    def via_rows(self, base: np.ndarray, ingress: np.ndarray, transit: np.ndarray) -> np.ndarray:
        """The via a flow takes, for many flows at once, as route-table rows:
        per flow (its routes' `base`, and the egress ids reported for it: its
        ingress leaf's, and where a second switch hashes (a three-tier
        spine, a fat tree's aggregation switch) that one's; -1 where
        unreported, UNKNOWN where no egress of this fabric) the row of the
        one route they name, -1 where they name none or several (the leaf's
        port alone names a spine, which hashes among several cores). Worked
        out once per distinct (routes, ports): a cycle's flows repeat a few
        thousand of them."""
        if not len(base):
            return np.full(0, -1, dtype=np.int64)
        distinct, inverse = np.unique(self._code(base, ingress, transit), return_inverse=True)
        get = self._via_rows.get
        rows = np.fromiter((get(code, -2) for code in distinct.tolist()), dtype=np.int64, count=len(distinct))
        new = np.flatnonzero(rows == -2)
        if len(new):
            rows[new] = self._find_rows(distinct[new])
            if len(self._via_rows) > PAIR_CACHE:
                self._via_rows.clear()
            self._via_rows.update(zip(distinct[new].tolist(), rows[new].tolist()))
        return rows[inverse]

    def via_row(self, base: int, ingress: int, transit: int = -1) -> int:
        """`via_rows` for one flow."""
        return int(self.via_rows(np.array([base]), np.array([ingress]), np.array([transit]))[0])

    def _code(self, base: np.ndarray, ingress: np.ndarray, transit: np.ndarray) -> np.ndarray:
        width = self.pad + 3  # ids UNKNOWN .. pad
        out: np.ndarray = (base * width + (ingress + 2)) * width + (transit + 2)
        return out

    def _find_rows(self, codes: np.ndarray) -> np.ndarray:
        width = self.pad + 3
        rest, transit = np.divmod(codes, width)
        base, ingress = np.divmod(rest, width)
        ingress, transit = ingress - 2, transit - 2
        table = self.table()
        size = np.array([len(self._at[self._row_block[b]][0].vias) for b in base.tolist()], dtype=np.int64)
        offsets = np.arange(int(size.max()))
        hops = table[np.minimum(base[:, None] + offsets, len(table) - 1)]  # (codes, routes, hops)
        on = (offsets < size[:, None]) & (hops == ingress[:, None, None]).any(axis=2)
        on &= (transit[:, None] == -1) | (hops == transit[:, None, None]).any(axis=2)
        return np.where((on.sum(axis=1) == 1) & (ingress != -1), base + on.argmax(axis=1), -1)

    def table(self) -> np.ndarray:
        """(known routes, longest route) of link ids, padded with `pad`: the
        links of many flows in one fancy index, `table[routes.base + row]`."""
        if self._table is None:
            self._table = self._buf[: self._n]
        return self._table

    def table_by_hop(self) -> np.ndarray:
        """`table`, transposed: (longest route, known routes)."""
        if self._table_by_hop is None or self._table_by_hop.shape[1] != self._n:
            self._table_by_hop = np.ascontiguousarray(self.table().T)
        return self._table_by_hop

    def hops(self, row: int) -> np.ndarray:
        """The links of the route on route-table row `row`, unpadded."""
        row_hops: np.ndarray = self._buf[row]
        hops: np.ndarray = row_hops[row_hops != self.pad]
        return hops

    def blocks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the first row and the size of every block that has rows, in table
        order; per row, the position of its block among those)."""
        if self._blocks is None:
            sizes = np.array([len(routes.vias) for routes, _, _ in self._at], dtype=np.int64)
            bases = np.array([routes.base for routes, _, _ in self._at], dtype=np.int64)
            nonempty = sizes > 0
            block = np.repeat(np.arange(int(nonempty.sum())), sizes[nonempty])
            self._blocks = (bases[nonempty], sizes[nonempty], block)
        return self._blocks

    def rows_through(self, links: list[int]) -> np.ndarray:
        """The route-table rows whose routes cross any of `links` (a row
        crossing two of them comes twice)."""
        if self._through is None:
            table = self.table()
            order = np.argsort(table.ravel(), kind="stable")
            self._through = (table.ravel()[order], order // max(table.shape[1], 1))
        sorted_links, rows = self._through
        lo = np.searchsorted(sorted_links, links)
        hi = np.searchsorted(sorted_links, links, side="right")
        return np.concatenate([rows[a:b] for a, b in zip(lo.tolist(), hi.tolist())] or [rows[:0]])

    def reverse_rows(self, rows: np.ndarray) -> np.ndarray:
        """Per route-table row, the row of the route back (the reverse leaf
        pair's) across the same via; -1 if none crosses it."""
        self._grow_reverse()
        found = {}
        for row in np.unique(rows[self._reverse[rows] == -2]).tolist():
            _, src, dst = self._at[self._row_block[row]]
            found[row] = self.row_of(self.routes(dst, src).base, self.via_at[row])  # may add rows
        self._grow_reverse()
        for row, back in found.items():
            self._reverse[row] = back
        out: np.ndarray = self._reverse[rows]
        return out

    def _grow_reverse(self) -> None:
        if len(self._reverse) < self._n:
            self._reverse = np.append(self._reverse, np.full(self._n - len(self._reverse), -2))

    def loads(self, rows: np.ndarray, bps: np.ndarray) -> np.ndarray:
        """Per egress (and pad), the sum of `bps` of flows on route-table `rows`."""
        links = self.table()[rows]
        # With no rows numpy counts in integers, weights or not: a cycle whose
        # elephants were all unlocated then failed adding rates to it.
        return np.bincount(links.ravel(), np.repeat(bps, links.shape[1]), len(self.capacity)).astype(float, copy=False)

    def dead(self, drains: Drains) -> np.ndarray:
        """Per egress: True if drained (its link, its switch or the switch it faces)."""
        if self._dead is None or self._dead[0] != drains:
            # From the drains to their egresses, not the other way: naming all
            # 97,000 egresses of meta-32k took its first failure's cycle 0.3 s.
            mask = np.zeros(len(self.capacity), dtype=bool)
            for name in drains.links:
                mask[self._ends(self._named(name))] = True
            for switch in drains.switches & self.fabric.switches.keys():
                for link in self.fabric.ports(switch).values():
                    mask[self._ends(link)] = True
            self._dead = (drains, mask)
        return self._dead[1]

    def _named(self, name: str) -> Link | None:
        """The link `name` (link_name's) names, None if none of this fabric."""
        switch, _, port = name.rpartition(":")
        known = switch in self.fabric.switches and port.isdigit()
        link = self.fabric.ports(switch).get(int(port)) if known else None
        return link if link is not None and link_name(self.fabric, link) == name else None

    def _ends(self, link: Link | None) -> list[int]:
        """The egress ids of a link's two directions."""
        return [self.ids[end] for end in (link.a, link.b) if end in self.ids] if link is not None else []
