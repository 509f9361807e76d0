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
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from controller.fabric import Fabric, NicId
from controller.te.engine.links import LinkIndex, Routes
from controller.te.engine.state import Decision, DecisionKind, Elephant, EngineConfig, Move, describe_flow
from controller.te.view import FlowKey

TOLERANCE = 1e-6  # of capacity: a link at exactly its capacity is full, not over


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

    def gains(self, i: int, dead: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(2, routes): what moving elephant i to each of its routes saves on its
        bottleneck, by demand and as measured (-inf for its own route and dead
        ones); only the links the two paths do not share count. And (routes,):
        each route's peak utilization by demand with elephant i moved onto it."""
        routes, here = self.routes[i], self.row(i)
        hops, old = routes.hops, routes.hops[here]
        bps = self.bps[i]
        new_load = (self.both[:, hops] + bps[:, None, None]) / routes.capacity  # (2, routes, hops)
        old_load = self.both[:, old] / routes.capacity[here]  # (2, old hops)
        if routes.disjoint:
            gain = old_load.max(axis=1)[:, None] - new_load.max(axis=2)
            peak = new_load[0].max(axis=1)
        else:
            shared = (hops[:, :, None] == old[None, None, :]).any(axis=2)  # on the old path too
            kept = (old[None, :, None] == hops[:, None, :]).any(axis=2)  # old link still used there
            new_peak = np.where(shared, -np.inf, new_load).max(axis=2)
            old_peak = np.where(kept, -np.inf, old_load[:, None, :]).max(axis=2)
            with np.errstate(invalid="ignore"):  # its own route: nothing differs, -inf - -inf
                gain = old_peak - new_peak
            # A link both routes share carries the elephant already.
            peak = np.where(shared, self.both[0, hops] / routes.capacity, new_load[0]).max(axis=1)
        gain[:, here] = -np.inf
        if dead.any():
            gain[:, dead[hops].any(axis=1)] = -np.inf
        return gain, peak

    def best(
        self, i: int, dead: np.ndarray, cfg: EngineConfig, metered: bool = False
    ) -> tuple[float, int, float] | None:
        """The route that saves most by demand, among those saving `min_gain` by
        demand and something as measured (a metered flow's rate is its meter's,
        known without noise: its demand gain is enough): (gain, route, the
        route's peak utilization by demand once the elephant is on it)."""
        gain, peak = self.gains(i, dead)
        ok = (gain[0] >= cfg.min_gain) & ((gain[1] > 0) | metered)
        if not ok.any():
            return None
        row = int(np.argmax(np.where(ok, gain[0], -np.inf)))
        return float(gain[0, row]), row, float(peak[row])

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

    def movable(i: int) -> bool:
        e = elephants[i]
        move = moves.get(e.key)
        return bool(located[i]) and (e.src, e.dst) not in steered and not (move is not None and move.held)

    def moved(i: int, row: int, why: str) -> None:
        e = elephants[i]
        before, after = routes[i].vias[fleet.row(i)], routes[i].vias[row]
        fleet.move(i, row)
        decisions.append(Decision(DecisionKind.REROUTE, describe_flow(e.key), f"{before} -> {after}: {why}", now))
        moves[e.key] = Move(e.key, e.src, e.dst, after, now, now, from_via=before, rate_before=e.rate_bps)

    if dead.any():
        _off_dead_links(fleet, dead, moves, now, steered, moved, decisions)

    over = fleet.over_mask()
    hot_at_start = set(np.flatnonzero(over & (fleet.count >= 2)).tolist())
    budget: dict[str, int] = {}
    relieved: set[int] = set()
    stuck: set[int] = set()
    heap = [(-fleet.utilization(link), link) for link in np.flatnonzero(over & (fleet.count >= 1)).tolist()]
    heapq.heapify(heap)
    while heap:
        _, link = heapq.heappop(heap)
        if not fleet.over(link):
            continue
        # Of the moves that pass, the one leaving the lower peak on the link
        # it relieves and the route it takes: the lowest peak, not the largest
        # gain, which would favour the smallest elephants and can leave the
        # big ones stuck where only a swap would free them.
        best: tuple[float, float, int, int] | None = None  # peak after, -gain, elephant, route
        for i in sorted(fleet.members(link), key=lambda i: elephants[i].key):
            e = elephants[i]
            # A flow getting most of its demand gains nothing from a move; a
            # metered one's rate is ours to set, and moving it may relieve others.
            satisfied = e.rate_bps >= cfg.satisfied * e.demand_bps and e.key not in metered
            if not movable(i) or _resting(moves.get(e.key), now, cfg) or satisfied:
                continue
            leaf = fabric.attachment(elephants[i].src).node
            if budget.get(leaf, cfg.max_moves_per_leaf or len(routes[i].vias)) <= 0:
                continue
            found = fleet.best(i, dead, cfg, e.key in metered)
            if found is not None:
                gain, row, peak = found
                left = (fleet.both[0, link] - fleet.bps[i, 0]) / fleet.capacity[link]
                candidate = (max(left, peak), -gain, i, row)
                best = candidate if best is None else min(best, candidate)
        if best is None:
            stuck.add(link)
            continue
        _, minus_gain, i, row = best
        gain = -minus_gain
        e = elephants[i]
        leaf = fabric.attachment(e.src).node
        budget[leaf] = budget.get(leaf, cfg.max_moves_per_leaf or len(routes[i].vias)) - 1
        why = (
            f"its bottleneck -{gain:.2f} of capacity (demand {e.demand_bps / 1e9:.0f} Gb/s, "
            f"measured {e.rate_bps / 1e9:.0f})"
        )
        moved(i, row, why)
        relieved.add(link)
        for changed in (link, *routes[i].hops[row].tolist()):
            if fleet.over(changed):
                heapq.heappush(heap, (-fleet.utilization(changed), changed))

    collisions, unfixable = {}, {}
    for link in sorted(hot_at_start | {link for link in stuck if fleet.count[link] >= 2}):
        members = sorted(fleet.members(link))
        sources = {fabric.attachment(elephants[i].src).node for i in members}
        egress = index.egresses[link]
        if egress.node not in sources and len(sources) < 2:
            continue  # downstream of one leaf's collision: the same flows, reported at its uplink
        name = f"{egress.node}:{egress.port}"
        why = f"{len(members)} elephants, demand {fleet.utilization(link):.2f} of the link"
        # Fixable: relieved now, or a move would relieve it but for hysteresis or budget.
        if (
            link in relieved
            or not fleet.over(link)
            or any(movable(i) and fleet.best(i, dead, cfg, elephants[i].key in metered) for i in members)
        ):
            collisions[name] = why
        else:
            unfixable[name] = why
    names = frozenset(f"{index.egresses[link].node}:{index.egresses[link].port}" for link in relieved)
    return Outcome(decisions, collisions, unfixable, names)


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
