"""The elephants of one rebalancing pass as arrays: their routes (rows of
the LinkIndex's route table), demands and rates, the load they put on every
egress by demand and as measured, which elephants each link carries, and
every known route's peak, kept current as elephants move. Pure."""

from __future__ import annotations

import numpy as np

from controller.te.engine.catalog import FlowCatalog
from controller.te.engine.links import LinkIndex, Routes
from controller.te.engine.state import Elephants, EngineConfig

TOLERANCE = 1e-6  # of capacity: a link at exactly its capacity is full, not over


def distinct(values: np.ndarray) -> np.ndarray:
    """np.unique for the short arrays of a turn, where its general form's
    setup costs more than the sort."""
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if len(ordered) else ordered


class Fleet:
    """The cycle's elephants as arrays (route-table row, demand, rate), their
    summed loads by demand (row 0) and as measured (row 1), and which
    elephants each link carries (looked up only for the links worked on)."""

    def __init__(
        self,
        index: LinkIndex,
        catalog: FlowCatalog,
        elephants: Elephants,
        background: np.ndarray,
        port_load: np.ndarray,
        dead: np.ndarray,
    ) -> None:
        self.index = index
        self.dead = dead
        self.elephants = elephants
        self.capacity = index.capacity
        cat = elephants.cat
        self.bps = np.stack([elephants.demand_bps, elephants.rate_bps], axis=1).astype(float).reshape(-1, 2)
        self.rows = elephants.row.copy()
        self.base = catalog.base[cat]
        self.nroutes = catalog.nroutes[cat]
        self.disjoint = catalog.disjoint[cat]
        self.leaf = catalog.leaf[cat]
        self.both = np.stack([background, background])
        self._joined: dict[int, list[int]] = {}  # link -> elephants moved onto it
        self._moved = False
        placed = np.flatnonzero(self.rows >= 0)
        if len(placed):
            links = index.table()[self.rows[placed]]
            self.both[0] += index.loads(self.rows[placed], self.bps[placed, 0])
            self.both[1] += index.loads(self.rows[placed], self.bps[placed, 1])
            self.count = np.bincount(links.ravel(), minlength=len(self.capacity))
            order = np.argsort(links.ravel(), kind="stable")
            self._links = links.ravel()[order]
            self._owners = np.repeat(placed, links.shape[1])[order]
        else:
            self.count = np.zeros(len(self.capacity), dtype=np.int64)
            self._links = self._owners = np.zeros(0, dtype=np.int64)
        # Measured: what the ports say they send, where that is more than the
        # elephants' records explain (a full queue's port sends at capacity
        # while its squeezed flows measure less).
        self.both[1] = np.maximum(self.both[1], port_load)
        self._peak = np.zeros(0)  # per route-table row, its peak utilization by demand (route_peaks)
        self._dead_row = np.zeros(0, dtype=bool)
        self._widest = np.zeros(0)  # per block, its widest hop's capacity
        self._lowest = np.zeros((2, 0), dtype=np.int64)  # per block, the rows of its lowest two live peaks
        self._stale: set[int] = set()  # links whose rows' peaks are out of date
        self._live: dict[int, np.ndarray] = {}  # block -> its routes that cross no dead link
        # Per route-table row (as the table was), the elephants on it.
        self._occupied = np.bincount(self.rows[self.rows >= 0], minlength=len(index.table()))

    def row(self, i: int) -> int:
        """Elephant i's route, as a row of its routes."""
        return int(self.rows[i] - self.base[i])

    def hops(self, i: int) -> np.ndarray:
        return self.index.hops(int(self.rows[i]))

    def route_hops(self, i: int, row: int) -> np.ndarray:
        return self.index.hops(int(self.base[i]) + row)

    def via(self, i: int, row: int) -> str:
        return self.index.via_at[int(self.base[i]) + row]

    def member_array(self, link: int) -> np.ndarray:
        """The elephants on `link` now, sorted: those there at the start and
        those moved onto it since, where they still are."""
        lo, hi = np.searchsorted(self._links, [link, link + 1])
        found = self._owners[lo:hi]
        if link in self._joined:
            found = distinct(np.concatenate([found, self._joined[link]]))
            found = found[(self.index.table()[self.rows[found]] == link).any(axis=1)]
        elif self._moved:
            found = found[(self.index.table()[self.rows[found]] == link).any(axis=1)]
        return found

    def on_links(self, links: np.ndarray) -> np.ndarray:
        """The elephants on any of `links`, before any place or move."""
        taken = np.zeros(len(self.capacity), dtype=bool)
        taken[links] = True
        return np.unique(self._owners[taken[self._links]])

    def links_with(self, flagged: np.ndarray) -> np.ndarray:
        """Per egress: some flagged elephant is on it (before any place or move)."""
        out = np.zeros(len(self.capacity), dtype=bool)
        out[self._links[flagged[self._owners]]] = True
        return out

    def collided(self, links: np.ndarray, catalog: FlowCatalog) -> np.ndarray:
        """Per link of `links`, as elephants stand now: it carries some, and
        its own switch is one of their source leaves or they come from two
        leaves or more. Else it is downstream of one leaf's collision: the
        same flows, told at that leaf's uplink."""
        placed = np.flatnonzero(self.rows >= 0)
        hops = self.index.table()[self.rows[placed]]
        leaves = len(catalog.leaf_names)
        pairs = distinct((hops * leaves + self.leaf[placed][:, None]).ravel())
        link, leaf = pairs // leaves, pairs % leaves
        sources = np.bincount(link, minlength=len(self.capacity))
        own = np.zeros(len(self.capacity), dtype=bool)
        own[link[leaf == catalog.link_leaf(self.index)[link]]] = True
        out: np.ndarray = (self.count[links] > 0) & (own[links] | (sources[links] >= 2))
        return out

    def limiting(self) -> np.ndarray:
        """Per egress: the bottleneck, by demand, of some placed elephant (ties
        count). A link over capacity that limits none of its elephants (they
        are all held harder elsewhere: behind an oversubscribed core, every
        leaf link they cross) is no collision, and no move made for it can
        lower their bottleneck that a move made for their bottleneck could not."""
        mask = np.zeros(len(self.capacity), dtype=bool)
        placed = np.flatnonzero(self.rows >= 0)
        if len(placed):
            links = self.index.table()[self.rows[placed]]
            util = self.both[0][links] / self.capacity[links]
            mask[links[util >= util.max(axis=1, keepdims=True) * (1 - TOLERANCE)]] = True
        mask[self.index.pad] = False
        return mask

    def limits_a_member(self, link: int) -> bool:
        """Some elephant on `link` has it for its bottleneck by demand (ties count)."""
        rows = self.index.rows_through([link])
        rows = rows[rows < len(self._occupied)]
        rows = rows[self._occupied[rows] > 0]
        hops = self.index.table()[rows]
        peak = (self.both[0][hops] / self.capacity[hops]).max(axis=1, initial=0.0)
        return bool((peak <= self.utilization(link) * (1 + TOLERANCE)).any())

    def over_mask(self) -> np.ndarray:
        out: np.ndarray = self.both[0] > self.capacity * (1 + TOLERANCE)
        return out

    def over(self, link: int) -> bool:
        return bool(self.both[0, link] > self.capacity[link] * (1 + TOLERANCE))

    def utilization(self, link: int) -> float:
        return float(self.both[0, link] / self.capacity[link])

    def place(self, i: int, row: int) -> None:
        """Puts elephant i (on no route yet) on its route `row`."""
        self.rows[i] = self.base[i] + row
        hops = self.hops(i)
        self.both[:, hops] += self.bps[i][:, None]
        self.count[hops] += 1
        for link in hops.tolist():
            self._joined.setdefault(link, []).append(i)
        self._moved = True
        self._stale.update(hops.tolist())
        self._occupied[self.rows[i]] += 1

    def move(self, i: int, row: int) -> None:
        # A path is a handful of links: scalar updates beat fancy indexing here.
        demand, rate = self.bps[i].tolist()
        both, count = self.both, self.count
        old, new = self.hops(i).tolist(), self.route_hops(i, row).tolist()
        for link in old:
            both[0, link] -= demand
            both[1, link] -= rate
            count[link] -= 1
        for link in new:
            self._joined.setdefault(link, []).append(i)
            both[0, link] += demand
            both[1, link] += rate
            count[link] += 1
        self._occupied[self.rows[i]] -= 1
        self._occupied[self.base[i] + row] += 1
        self.rows[i] = self.base[i] + row
        self._moved = True
        self._stale.update(old, new)

    def _route_peaks(self) -> np.ndarray:
        """Per route-table row its peak utilization by demand; and, per
        block, the rows of its two lowest live peaks (may_gain). Made on
        first use for the blocks the elephants' routes are in (the table
        also holds every leaf pair seen lately; no turn reads those), then
        what the moves since changed is worked out again when next asked
        for."""
        table = self.index.table()
        block = self.index.blocks()[2]
        if len(self._peak) != len(table):
            self._peak = np.full(len(table), np.inf)
            self._dead_row = np.zeros(len(table), dtype=bool)
            self._widest = np.zeros(int(block[-1]) + 1 if len(block) else 0)
            self._lowest = np.full((2, len(self._widest)), len(table), dtype=np.int64)
            self._stale.clear()
            used = distinct(block[self.base[self.nroutes > 0]])
            rows, offsets, _ = self._block_rows(used)
            hops = table[rows]
            self._peak[rows] = (self.both[0][hops] / self.capacity[hops]).max(axis=1, initial=0.0)
            self._dead_row[rows] = self.dead[hops].any(axis=1)
            widest = np.where(hops == self.index.pad, 0.0, self.capacity[hops]).max(axis=1, initial=0.0)
            self._widest[used] = np.maximum.reduceat(widest, offsets) if len(used) else widest[:0]
            self._rank(used)
        elif self._stale:
            rows = self.index.rows_through(list(self._stale))
            self._stale.clear()
            self._peak[rows] = (self.both[0][table[rows]] / self.capacity[table[rows]]).max(axis=1, initial=0.0)
            self._rank(distinct(block[rows]))
        return self._peak

    def _block_rows(self, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the rows of `blocks`, block after block; where each block's
        rows start in that; per row, its block's position in `blocks`)."""
        starts, sizes, _ = self.index.blocks()
        size = sizes[blocks]
        offsets = np.cumsum(size) - size
        segment = np.repeat(np.arange(len(blocks)), size)
        return starts[blocks][segment] + np.arange(int(size.sum())) - offsets[segment], offsets, segment

    def _rank(self, blocks: np.ndarray) -> None:
        """The rows of the lowest and next lowest live peak of each of `blocks` (-1: none)."""
        if not len(blocks):
            return
        rows, offsets, segment = self._block_rows(blocks)
        live = np.where(self._dead_row[rows], np.inf, self._peak[rows])
        lowest = np.minimum.reduceat(live, offsets)
        first = np.minimum.reduceat(np.where(live == lowest[segment], rows, len(self._peak)), offsets)
        rest = np.where(rows == first[segment], np.inf, live)
        second = np.minimum.reduceat(
            np.where(rest == np.minimum.reduceat(rest, offsets)[segment], rows, len(self._peak)), offsets
        )
        self._lowest[0, blocks], self._lowest[1, blocks] = first, second

    def may_gain(self, members: np.ndarray, cfg: EngineConfig) -> np.ndarray:
        """Per elephant of `members`: a move could save it `min_gain` by
        demand. A bound from whole routes: where no two of a pair's routes
        share a link, none saves more than its route's peak less the lowest
        live peak of the others raised by the elephant's demand over their
        widest hop. A few lookups per member instead of a pass over every
        route of each: behind an oversubscribed core, where every core link
        is over capacity and none can be relieved, this is what most turns
        of a link cost."""
        if not len(members):
            return np.zeros(0, dtype=bool)
        peak = np.append(self._route_peaks(), np.inf)  # row -1, or len: no live route
        block = self.index.blocks()[2]
        here = self.rows[members]
        b = block[here]
        first, second = self._lowest[0, b], self._lowest[1, b]
        other = np.where(first == here, second, first)
        others = np.where(self._dead_row[np.minimum(other, len(block) - 1)] & (other < len(block)), np.inf, peak[other])
        raised = self.bps[members, 0] / self._widest[b]
        out: np.ndarray = ~self.disjoint[members] | (peak[here] - others - raised >= cfg.min_gain)
        return out

    def best_move_now(self, i: int, cfg: EngineConfig, metered: bool) -> tuple[int, float, float] | None:
        """(route, gain, the route's peak with it there) of elephant i's best
        move on the loads as they stand, None if none passes: gains.Weights'
        test for one elephant, over its own routes only (a turn weighs a few
        elephants so, and checks each move after its first: Weights' padded
        arrays cost more for one)."""
        routes = self.index.routes_at(int(self.base[i]))
        hops, cap = routes.hops, routes.capacity
        here = self.row(i)
        demand, rate = self.bps[i].tolist()
        by_demand, measured = self.both[0][hops], self.both[1][hops]
        with_demand = (by_demand + demand) / cap
        with_rate = (measured + rate) / cap
        if routes.disjoint:
            peak = with_demand.max(axis=1)
            gain = (by_demand[here] / cap[here]).max() - peak
            falls = (measured[here] / cap[here]).max() > with_rate.max(axis=1)
            fair = (cap / (self.count[hops] + 1)).min(axis=1)
        else:
            shared = np.isin(hops, hops[here])  # on the old route too: it carries the elephant already
            kept = (hops[here][None, :, None] == hops[:, None, :]).any(axis=2)  # old link still used there
            before = [np.where(kept, -np.inf, load[here] / cap[here]).max(axis=1) for load in (by_demand, measured)]
            new_demand = np.where(shared, -np.inf, with_demand).max(axis=1)
            new_rate = np.where(shared, -np.inf, with_rate).max(axis=1)
            peak = np.where(shared, by_demand / cap, with_demand).max(axis=1)
            fair = (cap / (self.count[hops] + ~shared)).min(axis=1)
            with np.errstate(invalid="ignore"):  # its own route: nothing differs, -inf - -inf
                gain = before[0] - new_demand
                falls = before[1] - new_rate > 0
        ok = (gain >= cfg.min_gain) & (falls | (fair >= rate * (1 + cfg.min_gain)) | metered)
        ok[here] = False
        ok &= self._live_routes(routes)
        if not ok.any():
            return None
        row = int(np.argmax(np.where(ok, gain, -np.inf)))
        return row, float(gain[row]), float(peak[row])

    def _live_routes(self, routes: Routes) -> np.ndarray:
        """Per route of a block: it crosses no dead link (dead links are fixed for a cycle)."""
        live = self._live.get(routes.base)
        if live is None:
            live = self._live[routes.base] = ~self.dead[routes.hops].any(axis=1)
        return live

    def least_loaded(self, i: int) -> int | None:
        """The live route whose peak would be lowest with elephant i on it."""
        routes = self.index.routes_at(int(self.base[i]))
        hops = routes.hops
        peaks = ((self.both[0, hops] + self.bps[i, 0]) / self.capacity[hops]).max(axis=1)
        peaks[~self._live_routes(routes)] = np.inf
        row = int(np.argmin(peaks)) if len(peaks) else -1
        return row if row >= 0 and np.isfinite(peaks[row]) else None
