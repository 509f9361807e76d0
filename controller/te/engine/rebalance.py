"""Rebalancing: the fewest elephant moves that bring every spine-tier link of
the fabric back under capacity in one cycle.

Loads are arrays over the fabric's egresses (LinkIndex), kept twice: by the
elephants' demands (what they would send, bounded by what a path can carry)
and by what they measure. A move is made only when it lowers the flow's own
bottleneck by `min_gain` by demand, and the measurements agree (they show a
gain too): a gain only the demands see is a demand no routing can meet. So a
fabric whose best routing still shares a link makes no move at all, and a
flow is never moved from where the hash put it to somewhere that measures
worse. Only a squeezed elephant (or a metered one) is a candidate, which
keeps noisy counters from moving flows that get what they ask for.

Caps are local: each leaf moves at most `max_moves_per_leaf` elephants per
cycle (by default its uplink count), and a moved flow stays put for
`hysteresis_s`. The work is proportional to the links over capacity, not to
the fabric: loads are summed with one bincount, and only the elephants on a
link over capacity are looked at one by one. Pure."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from controller.fabric import Fabric, NicId
from controller.te.engine.links import LinkIndex, Routes
from controller.te.engine.state import Decision, DecisionKind, Elephant, EngineConfig, Move, describe_flow
from controller.te.view import FlowKey

TOLERANCE = 1e-6  # of capacity: a link at exactly its capacity is full, not over
BATCH_ELEPHANTS = 4096  # elephants per array pass of best_of: bounds its temporaries to tens of MB


@dataclass(frozen=True)
class Outcome:
    decisions: list[Decision]
    collisions: dict[str, str]  # link -> why: over capacity and TE can act on it
    unfixable: dict[str, str]  # link -> why: over capacity and no move relieves it
    relieved: frozenset[str]  # links a move of this cycle took load off


class _Fleet:
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


def rebalance(
    fabric: Fabric,
    index: LinkIndex,
    dead: np.ndarray,
    elephants: list[Elephant],
    routes: list[Routes],
    background: np.ndarray,
    port_load: np.ndarray,
    moves: dict[FlowKey, Move],
    now: float,
    cfg: EngineConfig,
    steered: frozenset[tuple[NicId, NicId]] = frozenset(),
    metered: frozenset[FlowKey] = frozenset(),
) -> Outcome:
    """Starts from where the elephants are (placing min-max those whose
    switch did not say), moves those on dead links, then fixes every link
    over capacity that a move can fix. Updates `moves`."""
    fleet = _Fleet(index, elephants, routes, background, port_load)
    # Where the switches did not say where a flow is, it counts as load where
    # it would do least harm, and is not moved: a move judged against a guessed
    # path can leave the fabric worse than the hash did.
    located = fleet.rows >= 0
    for i in np.flatnonzero(~located).tolist():
        fleet.place(i, fleet.least_loaded(i, dead) or 0)
    decisions: list[Decision] = []

    def moved(i: int, row: int, why: str) -> None:
        e = elephants[i]
        before, after = routes[i].vias[fleet.row(i)], routes[i].vias[row]
        fleet.move(i, row)
        decisions.append(Decision(DecisionKind.REROUTE, describe_flow(e.key), f"{before} -> {after}: {why}", now))
        moves[e.key] = Move(e.key, e.src, e.dst, after, now, now, from_via=before, rate_before=e.rate_bps)

    if dead.any():
        _off_dead_links(fleet, dead, moves, now, steered, moved, decisions)

    # Per elephant, as arrays: what may move at all, and what may move now.
    found = [moves.get(e.key) for e in elephants]
    movable = located & ~np.array([m is not None and m.held for m in found], dtype=bool)
    if steered:
        movable &= ~np.array([(e.src, e.dst) in steered for e in elephants], dtype=bool)
    is_metered = np.array([e.key in metered for e in elephants], dtype=bool)
    # A flow getting most of its demand gains nothing from a move; a metered
    # one's rate is ours to set, and moving it may relieve others.
    satisfied = (fleet.bps[:, 1] >= cfg.satisfied * fleet.bps[:, 0]) & ~is_metered
    resting = np.array([_resting(m, now, cfg) for m in found], dtype=bool)
    eligible = movable & ~resting & ~satisfied
    leaves: dict[int, str] = {}

    def leaf_of(i: int) -> str:
        if i not in leaves:
            leaves[i] = fabric.attachment(elephants[i].src).node
        return leaves[i]

    over = fleet.over_mask() & fleet.limiting()
    hot_at_start = set(np.flatnonzero(over & (fleet.count >= 2)).tolist())
    budget: dict[str, int] = {}
    relieved: set[int] = set()
    stuck: set[int] = set()
    # One live heap entry per link, at the utilization it was queued with: a
    # link touched by many moves is evaluated once per change, not once per push.
    queued = {link: fleet.utilization(link) for link in np.flatnonzero(over & (fleet.count >= 1)).tolist()}
    # One array pass over every elephant on those links: the move each could
    # make now. A link none of whose elephants could move (the steady state
    # behind an oversubscribed core: hundreds of links over capacity by
    # demand, all alike) is stuck without a turn of its own, unless a move of
    # this pass touches it.
    on_queued = np.array(sorted({i for link in queued for i in fleet.members(link)}), dtype=np.int64)
    could = np.zeros(len(elephants), dtype=bool)
    could[list(fleet.best_of(on_queued[movable[on_queued]], dead, cfg, is_metered))] = True
    for link in list(queued):
        on_link = np.fromiter(fleet.members(link), dtype=np.int64)
        if not (could[on_link] & eligible[on_link]).any():
            del queued[link]
            stuck.add(link)
    heap = [(-u, link) for link, u in queued.items()]
    heapq.heapify(heap)
    touched: set[int] = set()

    def queue(link: int) -> None:
        touched.add(link)
        if fleet.over(link) and queued.get(link) != (u := fleet.utilization(link)):
            queued[link] = u
            heapq.heappush(heap, (-u, link))

    while heap:
        minus_u, link = heapq.heappop(heap)
        if queued.get(link) != -minus_u:
            continue  # a later entry of this link is queued
        del queued[link]
        if not fleet.over(link) or not fleet.limits_a_member(link):
            continue
        # Of the moves that pass, the one leaving the lower peak on the link
        # it relieves and the route it takes: the lowest peak, not the largest
        # gain, which would favour the smallest elephants and can leave the
        # big ones stuck where only a swap would free them.
        best: tuple[float, float, int, int] | None = None  # peak after, -gain, elephant, route
        candidates = [
            i
            for i in fleet.members(link)
            if eligible[i] and budget.get(leaf_of(i), cfg.max_moves_per_leaf or len(routes[i].vias)) > 0
        ]
        for i, (gain, row, peak) in fleet.best_of(candidates, dead, cfg, is_metered).items():
            left = (fleet.both[0, link] - fleet.bps[i, 0]) / fleet.capacity[link]
            candidate = (max(left, peak), -gain, i, row)
            best = candidate if best is None else min(best, candidate)
        if best is None:
            stuck.add(link)
            continue
        _, minus_gain, i, row = best
        gain = -minus_gain
        e = elephants[i]
        leaf = leaf_of(i)
        budget[leaf] = budget.get(leaf, cfg.max_moves_per_leaf or len(routes[i].vias)) - 1
        why = (
            f"its bottleneck -{gain:.2f} of capacity (demand {e.demand_bps / 1e9:.0f} Gb/s, "
            f"measured {e.rate_bps / 1e9:.0f})"
        )
        left_hops = fleet.hops(i).tolist()
        moved(i, row, why)
        eligible[i] = False  # it rests now
        relieved.add(link)
        for changed in (link, *left_hops, *routes[i].hops[row].tolist()):
            queue(changed)

    collisions, unfixable = {}, {}
    for link in sorted(hot_at_start | {link for link in stuck if fleet.count[link] >= 2}):
        members = sorted(fleet.members(link))
        egress = index.egresses[link]
        if not _own_or_shared(egress.node, map(leaf_of, members)):
            continue  # downstream of one leaf's collision: the same flows, reported at its uplink
        name = f"{egress.node}:{egress.port}"
        why = f"{len(members)} elephants, demand {fleet.utilization(link):.2f} of the link"
        # Fixable: relieved now, or a move would relieve it but for hysteresis
        # or budget (as the pass began, where no move of it touched the link).
        if link in touched:
            fixable = bool(fleet.best_of([i for i in members if movable[i]], dead, cfg, is_metered))
        else:
            fixable = bool(could[members].any())
        if link in relieved or not fleet.over(link) or fixable:
            collisions[name] = why
        else:
            unfixable[name] = why
    names = frozenset(f"{index.egresses[link].node}:{index.egresses[link].port}" for link in relieved)
    return Outcome(decisions, collisions, unfixable, names)


def _own_or_shared(node: str, sources: Iterator[str]) -> bool:
    """The link's own switch is a source leaf, or its elephants come from two
    leaves or more; reading only as many sources as it takes to tell."""
    first = None
    for leaf in sources:
        if leaf == node or (first is not None and leaf != first):
            return True
        first = leaf
    return False


def _off_dead_links(
    fleet: _Fleet,
    dead: np.ndarray,
    moves: dict[FlowKey, Move],
    now: float,
    steered: frozenset[tuple[NicId, NicId]],
    moved: Callable[[int, int, str], None],
    decisions: list[Decision],
) -> None:
    """Any live path beats none: an elephant whose route crosses a dead link
    moves now, hysteresis or not."""
    for i, e in enumerate(fleet.elephants):
        if (e.src, e.dst) in steered:
            continue
        if dead[fleet.hops(i)].any():
            row = fleet.least_loaded(i, dead)
            if row is not None:
                moved(i, row, "path down")
        elif e.key[2] == "tcp" and e.key not in moves and _acks_may_die(fleet, i, dead):
            # The data path survived (the ingress leaf failed over) but the
            # ACKs hash on their own and may cross the dead link: pinning the
            # flow where it is also steers its ACKs back the same way.
            via = fleet.routes[i].vias[fleet.row(i)]
            moves[e.key] = Move(e.key, e.src, e.dst, via, now, now, from_via=via)
            why = f"ACKs pinned via {via}: their hashed path may cross a dead link"
            decisions.append(Decision(DecisionKind.REROUTE, describe_flow(e.key), why, now))


def _acks_may_die(fleet: _Fleet, i: int, dead: np.ndarray) -> bool:
    e = fleet.elephants[i]
    back = fleet.index.routes(e.dst, e.src)
    via = fleet.routes[i].vias[fleet.row(i)]
    if via not in back.position:
        return False
    hops_dead = dead[back.hops].any(axis=1)
    return not hops_dead[back.position[via]] and bool(hops_dead.any())


def _resting(move: Move | None, now: float, cfg: EngineConfig) -> bool:
    return move is not None and (move.held or now - move.moved_at < cfg.hysteresis_s)
