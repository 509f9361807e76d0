"""The elephants of one rebalancing pass as arrays: their routes (rows of
the LinkIndex's route table), demands and rates, the load they put on every
egress by demand and as measured, and what moving each of them would gain.
Pure."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from controller.te.engine.links import LinkIndex, Routes
from controller.te.engine.state import Elephant, EngineConfig

TOLERANCE = 1e-6  # of capacity: a link at exactly its capacity is full, not over
BATCH_ELEPHANTS = 4096  # elephants per array pass of best_of: bounds its temporaries to tens of MB


class Fleet:
    """The cycle's elephants as arrays (route-table row, demand, rate), their
    summed loads by demand (row 0) and as measured (row 1), and which
    elephants each link carries (looked up only for the links worked on)."""

    def __init__(
        self,
        index: LinkIndex,
        elephants: list[Elephant],
        routes: list[Routes],
        background: np.ndarray,
        port_load: np.ndarray,
    ) -> None:
        self.index = index
        self.elephants = elephants
        self.routes = routes
        self.capacity = index.capacity
        self.bps = np.array([(e.demand_bps, e.rate_bps) for e in elephants], dtype=float).reshape(-1, 2)
        self.rows = np.array(
            [r.base + r.position[e.via] if e.via in r.position else -1 for e, r in zip(elephants, routes)],
            dtype=np.int64,
        )
        self.both = np.stack([background, background])
        self.base = np.array([r.base for r in routes], dtype=np.int64)
        self.nroutes = np.array([len(r.vias) for r in routes], dtype=np.int64)
        self.disjoint = np.array([r.disjoint for r in routes], dtype=np.int64)
        self._members: dict[int, set[int]] = {}
        placed = np.flatnonzero(self.rows >= 0)
        table = index.table()
        if len(placed):
            self.both[0] += index.loads(self.rows[placed], self.bps[placed, 0])
            self.both[1] += index.loads(self.rows[placed], self.bps[placed, 1])
            links = table[self.rows[placed]]
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

    def row(self, i: int) -> int:
        """Elephant i's route, as a row of its Routes."""
        return int(self.rows[i]) - self.routes[i].base

    def hops(self, i: int) -> np.ndarray:
        return self.routes[i].hops[self.row(i)]

    def members(self, link: int) -> set[int]:
        """The elephants on `link` now (kept current by place and move once asked for)."""
        found = self._members.get(link)
        if found is None:
            lo, hi = np.searchsorted(self._links, [link, link + 1])
            found = self._members[link] = set(self._owners[lo:hi].tolist())
        return found

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
            util = self.both[0, links] / self.capacity[links]
            mask[links[util >= util.max(axis=1, keepdims=True) * (1 - TOLERANCE)]] = True
        mask[self.index.pad] = False
        return mask

    def limits_a_member(self, link: int) -> bool:
        members = list(self.members(link))
        if not members:
            return False
        links = self.index.table()[self.rows[members]]
        peaks = (self.both[0, links] / self.capacity[links]).max(axis=1)
        return bool((peaks <= self.utilization(link) * (1 + TOLERANCE)).any())

    def over_mask(self) -> np.ndarray:
        return self.both[0] > self.capacity * (1 + TOLERANCE)

    def over(self, link: int) -> bool:
        return bool(self.both[0, link] > self.capacity[link] * (1 + TOLERANCE))

    def utilization(self, link: int) -> float:
        return float(self.both[0, link] / self.capacity[link])

    def place(self, i: int, row: int) -> None:
        """Puts elephant i (on no route yet) on its route `row`."""
        self.rows[i] = self.routes[i].base + row
        hops = self.hops(i)
        self.both[:, hops] += self.bps[i][:, None]
        self.count[hops] += 1
        for link in hops.tolist():
            self.members(link).add(i)

    def move(self, i: int, row: int) -> None:
        # A path is a handful of links: scalar updates beat fancy indexing here.
        demand, rate = self.bps[i].tolist()
        both, count = self.both, self.count
        for link in self.hops(i).tolist():
            self.members(link).discard(i)
            both[0, link] -= demand
            both[1, link] -= rate
            count[link] -= 1
        for link in self.routes[i].hops[row].tolist():
            self.members(link).add(i)
            both[0, link] += demand
            both[1, link] += rate
            count[link] += 1
        self.rows[i] = self.routes[i].base + row

    def best_of(
        self, members: Sequence[int], dead: np.ndarray, cfg: EngineConfig, metered: np.ndarray
    ) -> dict[int, tuple[float, int, float]]:
        """Per elephant of `members` that has one, the route that saves most on
        its bottleneck by demand, among those saving `min_gain` by demand and
        something as measured (a metered flow's rate is its meter's, known
        without noise: its demand gain is enough): (gain, route, the route's
        peak utilization by demand once the elephant is on it). Only links the
        two routes do not share count. `metered`: per elephant.

        Elephants whose route sets have one shape (every cross-cluster pair of
        a three-tier fabric, every cross-pod pair of a two-tier one) go in one
        array pass: an oversubscribed core keeps hundreds of elephants on each
        link over capacity, and a pass per elephant was most of a cycle there."""
        idx = np.asarray(members, dtype=np.int64)
        out: dict[int, tuple[float, int, float]] = {}
        if not len(idx):
            return out
        shapes, which = np.unique(self.nroutes[idx] * 2 + self.disjoint[idx], return_inverse=True)
        for g, shape in enumerate(shapes.tolist()):
            group = idx[which == g]
            for start in range(0, len(group), BATCH_ELEPHANTS):
                chunk = group[start : start + BATCH_ELEPHANTS]
                gain, peak, fair = self._gains(chunk, shape // 2, bool(shape % 2), dead)
                # As measured: the route's load falls, or its fair share beats
                # what the flow gets now. Behind an oversubscribed core every
                # link is full as measured, a lone TCP flow filling its own:
                # only the shares tell a move from a link of three to a link
                # of one from a move that gains nothing.
                fairer = fair >= self.bps[chunk, 1][:, None] * (1 + cfg.min_gain)
                ok = (gain[0] >= cfg.min_gain) & ((gain[1] > 0) | fairer | metered[chunk][:, None])
                rows = np.argmax(np.where(ok, gain[0], -np.inf), axis=1)
                for m in np.flatnonzero(ok.any(axis=1)).tolist():
                    row = int(rows[m])
                    out[int(chunk[m])] = (float(gain[0, m, row]), row, float(peak[m, row]))
        return out

    def _gains(
        self, idx: np.ndarray, nroutes: int, disjoint: bool, dead: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(2, M, routes): what moving each elephant of `idx` (all with
        `nroutes` routes) to each of its routes saves on its bottleneck, by
        demand and as measured (-inf for its own route and dead ones); and,
        (M, routes) each: each route's peak utilization by demand with it
        moved there, and its fair share there by count (the narrowest hop's
        capacity over its elephants, this one included: a floor on its
        max-min rate, as elephants held elsewhere leave it more)."""
        hops = self.index.table()[self.base[idx, None] + np.arange(nroutes)]  # (M, R, H), pad-filled
        cap = self.capacity[hops]
        here = self.rows[idx] - self.base[idx]
        m = np.arange(len(idx))
        bps = self.bps[idx].T  # (2, M)
        new_load = (self.both[:, hops] + bps[:, :, None, None]) / cap  # (2, M, R, H)
        old = hops[m, here]  # (M, H)
        old_load = self.both[:, old] / cap[m, here]  # (2, M, H)
        if disjoint:
            gain = old_load.max(axis=2)[:, :, None] - new_load.max(axis=3)
            peak = new_load[0].max(axis=2)
            fair = (cap / (self.count[hops] + 1)).min(axis=2)
        else:
            shared = (hops[:, :, :, None] == old[:, None, None, :]).any(axis=3)  # on the old route too
            kept = (old[:, None, :, None] == hops[:, :, None, :]).any(axis=3)  # old link still used there
            new_peak = np.where(shared, -np.inf, new_load).max(axis=3)
            old_peak = np.where(kept, -np.inf, old_load[:, :, None, :]).max(axis=3)
            with np.errstate(invalid="ignore"):  # its own route: nothing differs, -inf - -inf
                gain = old_peak - new_peak
            # A link both routes share carries the elephant already.
            peak = np.where(shared, self.both[0, hops] / cap, new_load[0]).max(axis=2)
            fair = (cap / (self.count[hops] + ~shared)).min(axis=2)
        gain[:, m, here] = -np.inf
        if dead.any():
            gain[:, dead[hops].any(axis=2)] = -np.inf
        return gain, peak, fair

    def least_loaded(self, i: int, dead: np.ndarray) -> int | None:
        """The live route whose peak would be lowest with elephant i on it."""
        hops = self.routes[i].hops
        peaks = ((self.both[0, hops] + self.bps[i, 0]) / self.capacity[hops]).max(axis=1)
        peaks[dead[hops].any(axis=1)] = np.inf
        row = int(np.argmin(peaks)) if len(peaks) else -1
        return row if row >= 0 and np.isfinite(peaks[row]) else None
