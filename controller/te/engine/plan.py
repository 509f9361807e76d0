"""Joint re-routing: plans of one or two moves, judged by the max-min rates
the whole routing would give, for the elephants single moves left squeezed.

A single move must lower the moving flow's own bottleneck, so it stops
where freeing a flow takes a swap or a chain: the first move alone gains
nothing, or even costs, and only the pair does. Here a plan is weighed by
what every flow it touches would get. The model is the elephants on their
routes, each crossing its source NIC's link and its receiver's as well as
the switches' (so a NIC shared by several flows is shared here too, and a
flow no routing can help is seen as such), elastic (TCP, a placed job's) or
held to what it sends (UDP, a meter), over the capacity background leaves.

A flow is squeezed where a switch-to-switch link (one a route chooses, not
a NIC's) froze it. For the most squeezed first, the planner tries every
move of a flow on that link to another route, and, behind each, every move
of a flow off the link where the mover would now be held (which makes a
swap when that flow takes the mover's old route). A plan is judged on its
component (the flows on every link its moves leave or join, the rest held
at their rates) by the max-min order: the sorted rates after against
before, at the first place they differ. The best plan that beats
`min_gain` of the relieved link's capacity there, for each of its moves
(a move is a path change: each must pay its way), is made, and the rates
are worked out again; the next squeezed flow follows. Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from controller.te.engine.fleet import Fleet, distinct
from controller.te.engine.maxmin import fill_paths, lex_gain
from controller.te.engine.state import EngineConfig

RATE_TOLERANCE = 1e-6  # of capacity: rates closer than this are equal in the max-min order
# Plans weighed per pass, at most: as many as make this many elephants'
# rates (a plan's weight is a fill of every elephant's), within (least,
# most). The joint search's work is bounded whatever the fabric (on a large
# one, single moves already fixed what one move fixes); a search cut short
# runs again hysteresis_s later, as one that found nothing (fruitless.py).
# At 20 per elephant, Hedera's randx5 (80 elephants) weighed 1,900 plans a
# pass, and an emulated TE cycle took 3-7 s.
EVALUATIONS = (24_000, 300, 3000)  # elephant fills, least, most
# Up to this many elephants a plan is weighed on all of them; beyond, on
# its component (the flows on the links it changes, the others held at
# their rates, which ignores how a change there ripples further). The
# same size as rebalance.PLANNED_ONLY: a whole fill per plan made TE cycles
# take 3.2 s at 1,000 elephants on ft2-16k (make bench-soak).
WHOLE = 512
# Plans weighed per pass above WHOLE elephants, in the same units: a plan's
# weight is two fills of its component, whose size the fabric sets (3
# elephants on ft2-16k's core links, 450 on meta-32k's). At most 100 (each
# 0.4 ms at 16K GPUs whatever its size: 3,000 made a pass 1.3 s, make
# bench-scale); a plain 100 made every search cycle of meta-32k 90 ms
# longer than the others, and them its step's p99 (make bench-three-tier).
LARGE_EVALUATIONS = (24_000, 1, 100)  # elephant fills, least, most


@dataclass(frozen=True)
class Plan:
    """Moves (elephant, route as a row of its routes) made together, what
    they gain and the link they relieve."""

    moves: tuple[tuple[int, int], ...]
    gain_bps: float  # in the max-min order: at the first rate that differs
    total_bps: float  # in the sum of the rates
    relieved: int
    worth: bool  # it pays its way (Planner.worth)


@dataclass(frozen=True)
class Contest:
    """What the planner weighs the fleet's elephants with. Per elephant:
    `ends`, (elephants, 2) the link ids of its source NIC's transmit side
    and its receiver's leaf port; `cap`, the most it sends (inf: elastic);
    `movable`, may move now; `held_back`, measures well under its demand;
    `qps`, the queue pairs of its connection, of which moving one is that
    share of a path change (elephants.Connections). Per link: `background`,
    the load no elephant makes; `port_load`, what the ports measured."""

    ends: np.ndarray
    cap: np.ndarray
    movable: np.ndarray
    held_back: np.ndarray
    qps: np.ndarray
    background: np.ndarray
    port_load: np.ndarray


class Planner:
    """The fleet's placed elephants with their full paths (NIC links
    included) and max-min rates, kept current as plans are made."""

    def __init__(self, fleet: Fleet, contest: Contest, cfg: EngineConfig) -> None:
        self.fleet = fleet
        self.ends = contest.ends
        self.cap = contest.cap
        self.cfg = cfg
        self.movable = contest.movable & (fleet.rows >= 0) & (fleet.nroutes > 1)
        capacity = fleet.capacity
        self.capacity = np.maximum(capacity - contest.background, 0.0)
        self.capacity[fleet.index.pad] = np.inf
        self.port_load = contest.port_load
        self.held_back = contest.held_back
        self.qps = contest.qps
        self.placed = np.flatnonzero(fleet.rows >= 0)
        self.tolerance = RATE_TOLERANCE * float(np.min(capacity[np.isfinite(capacity)], initial=1.0))
        self._joined: dict[int, list[int]] = {}
        self.evaluations = 0
        self.filled = self.last_filled = 0  # elephants' rates the plans weighed took, in all and the last
        self._index()
        self.rates()

    def path(self, i: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """(len(i), hops): each elephant's full path on the route-table rows `rows`."""
        table = self.fleet.index.table()
        # NIC links first: where a flow is held equally by its NIC and a
        # route's link, the NIC is its bottleneck (no move can help it).
        return np.concatenate([self.ends[i], table[rows]], axis=1)

    def _index(self) -> None:
        self._rows = self.fleet.rows.copy()  # the rows self.paths are of
        self.paths = np.full((len(self.fleet.rows), self.fleet.index.table().shape[1] + 2), self.fleet.index.pad)
        self.paths[self.placed] = self.path(self.placed, self.fleet.rows[self.placed])
        links = self.paths[self.placed].ravel()
        order = np.argsort(links, kind="stable")
        self._links = links[order]
        self._owners = np.repeat(self.placed, self.paths.shape[1])[order]

    def refresh(self) -> None:
        """The fleet's elephants moved (single moves): their paths and the
        rates again; the links they joined count as loaded by this pass."""
        moved = self.placed[self._rows[self.placed] != self.fleet.rows[self.placed]]
        if not len(moved):
            # The paths and rates stand: re-indexing 16K elephants' paths took
            # 7 ms a cycle at 32K GPUs, and a whole fill is most of a large pass's time.
            return
        self._index()
        for i in moved.tolist():
            for link in self.paths[i].tolist():
                self._joined.setdefault(link, []).append(i)
        self.rates()

    def route_bound(self) -> np.ndarray:
        """Per elephant: frozen, in the model, by a link a route chooses (a move may help it)."""
        b = self.bottleneck
        out: np.ndarray = (b >= 0) & (b != self.ends[:, 0]) & (b != self.ends[:, 1])
        return out

    def members(self, links: np.ndarray) -> np.ndarray:
        """The placed elephants on any of `links` now."""
        lo = np.searchsorted(self._links, links)
        hi = np.searchsorted(self._links, links, side="right")
        found = [self._owners[a:b] for a, b in zip(lo.tolist(), hi.tolist())]
        found += [np.array(self._joined[link], dtype=np.int64) for link in links.tolist() if link in self._joined]
        candidates = distinct(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)
        return candidates[np.isin(self.paths[candidates], links).any(axis=1)]

    def rates(self) -> None:
        """Every placed elephant's max-min rate and bottleneck, and the load they put on each link."""
        self.x = np.zeros(len(self.fleet.rows))
        self.bottleneck = np.full(len(self.fleet.rows), -1, dtype=np.int64)
        placed = self.placed
        self.x[placed], self.bottleneck[placed] = fill_paths(self.paths[placed], self.capacity, self.cap[placed])
        self.load = np.bincount(
            self.paths[placed].ravel(), np.repeat(self.x[placed], self.paths.shape[1]), len(self.capacity)
        )

    def squeezed(self) -> np.ndarray:
        """Placed elephants frozen by a link a route chooses (not a NIC's), the slowest first."""
        found = np.flatnonzero(self.route_bound())
        return found[np.argsort(self.x[found], kind="stable")]

    def spent(self) -> bool:
        """The pass has weighed as many plans as it may."""
        fills, least, most = LARGE_EVALUATIONS if len(self.placed) > WHOLE else EVALUATIONS
        # The next plan, as large as the last, would take the fills past the budget.
        over = self.filled + self.last_filled > fills
        return self.evaluations >= most or (self.evaluations >= least and over)

    def evaluate(self, moves: tuple[tuple[int, int], ...]) -> tuple[float, float]:
        """What the moves gain on their component: in the max-min order, and in the sum of the rates."""
        self.evaluations += 1
        fleet = self.fleet
        movers = np.array([i for i, _ in moves], dtype=np.int64)
        new_rows = np.array([fleet.base[i] + row for i, row in moves], dtype=np.int64)
        if len(self.placed) <= WHOLE:
            # Every placed elephant, none held: their rates before the moves
            # are self.x, which rates() filled from these very inputs.
            component, left, was = self.placed, self.capacity, self.x[self.placed]
            fills = len(component)
        else:
            component, left = self._component(movers, new_rows)
            was, _ = fill_paths(self.paths[component], left, self.cap[component])
            fills = 2 * len(component)  # `was` as well as `now`
        after = self.paths[component]
        after[np.searchsorted(component, movers)] = self.path(movers, new_rows)
        now, _ = fill_paths(after, left, self.cap[component])
        self.last_filled = fills
        self.filled += fills
        return lex_gain(was, now, self.tolerance), float(now.sum() - was.sum())

    def _component(self, movers: np.ndarray, new_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The elephants on the links the moves leave or join, and the
        capacity the others, held at their rates, leave them."""
        pad = self.fleet.index.pad
        touched = np.concatenate([self.paths[movers].ravel(), self.path(movers, new_rows).ravel()])
        component = self.members(distinct(touched[touched != pad]))
        held = np.bincount(
            self.paths[component].ravel(), np.repeat(self.x[component], self.paths.shape[1]), len(self.capacity)
        )
        left = np.maximum(self.capacity - (self.load - held), 0.0)
        left[pad] = np.inf
        return component, left

    def worth(self, moves: tuple[tuple[int, int], ...], gain: tuple[float, float], link: int) -> bool:
        """The moves pay their way, each a path change, in one of two ways.
        For the slowest flow they change (the max-min order): min_gain of
        the link they relieve per move, losing nothing in the sum of the
        rates. Or in the sum, no flow left slower than before: twice
        min_gain of what each moved flow sends (its demand, at most the
        link). A path change costs what its transient reorders or drops, in
        proportion to the flow's rate: at a link's price each, no plan among
        flows that send a fifth of a link (five per NIC, Hedera's randx5)
        ever paid, however many links it cleared. For the QPs of a
        connection both are in a QP's units: moving one of 16 is a sixteenth
        of a path change, and its gain is measured against a sixteenth of
        the link, or of its demand. In a link's units no plan of QPs,
        however much faster it makes the connection's slowest, is ever
        worth it."""
        lex, total = gain
        capacity = float(self.fleet.capacity[link])
        qps = [float(self.qps[i]) for i, _ in moves]
        per_link = self.cfg.min_gain * capacity / max(qps) * sum(1.0 / n for n in qps)
        per_flow = self.cfg.min_gain * sum(
            min(float(self.fleet.bps[i, 0]), capacity) / n for (i, _), n in zip(moves, qps)
        )
        # TCP does not share a link as max-min does: what a plan takes from
        # some flows to give to slower ones, TCP gives back to whoever it
        # likes, and a gain in the sum that no flow's own rate shows much of
        # is the first it does not deliver.
        return (lex >= per_link and total >= -self.tolerance) or (lex > self.tolerance and total >= 2 * per_flow)

    def plan(self, moves: tuple[tuple[int, int], ...], link: int) -> Plan:
        gain = self.evaluate(moves)
        return Plan(moves, gain[0], gain[1], link, self.worth(moves, gain, link))

    def apply(self, plan: Plan, move: Callable[[int, int], object]) -> None:
        """Makes the plan's moves through `move(elephant, row)`, which moves it in the fleet."""
        for i, row in plan.moves:
            move(i, row)
            new = self.path(np.array([i]), np.array([self.fleet.rows[i]]))[0]
            for link in new.tolist():
                self._joined.setdefault(link, []).append(i)
            self.paths[i], self._rows[i] = new, self.fleet.rows[i]
        self.rates()

    def alternatives(self, i: int) -> list[int]:
        """Elephant i's live routes other than its own, as rows of its routes."""
        fleet = self.fleet
        base, here = int(fleet.base[i]), int(fleet.rows[i])
        rows = np.arange(base, base + int(fleet.nroutes[i]))
        hops = fleet.index.table()[rows]
        live = ~fleet.dead[hops].any(axis=1) & (rows != here)
        out: list[int] = (rows[live] - base).tolist()
        return out

    def live_rows(self, i: int) -> list[int]:
        """Elephant i's live routes, its own first, as route-table rows."""
        base = int(self.fleet.base[i])
        return [int(self.fleet.rows[i])] + [base + row for row in self.alternatives(i)]

    def _blocking(self, i: int, row: int) -> np.ndarray:
        """The links of route `row`, not on elephant i's path now, where
        elephants already are and i would have to share: those a second
        move may clear for it."""
        hops = self.fleet.route_hops(i, row)
        hops = hops[~np.isin(hops, self.paths[i])]
        spare = self.capacity[hops] - self.load[hops]
        out: np.ndarray = hops[
            (self.fleet.count[hops] > 0) & (spare < self.x[i] + self.cfg.min_gain * self.capacity[hops])
        ]
        return out

    def confirmed(self) -> list[int]:
        """The squeezed elephants' bottleneck links the measurements agree
        are congested, the slowest elephant's first, each once."""
        links, first = np.unique(self.bottleneck[self.squeezed()], return_index=True)
        links = links[np.argsort(first)]
        out: list[int] = links[self.congested(links)].tolist()
        return out

    def congested(self, links: np.ndarray) -> np.ndarray:
        """Per link, whether the measurements agree that it holds its
        elephants back: two of these three, (a) it measures full (its port,
        or its elephants' records added up: a port's rate is smoothed and
        lags an iteration's start), (b) an elephant on it measures well
        under its demand, (c) its own elephants' demands are more than it
        carries. A noisy background estimate can make a link that one flow
        fills look squeezed in the model, and then only (a) holds. Or a move
        of this pass loaded it (our own doing, not yet measured). One pass
        over the paths: per link it took 28 ms a cycle at 32K GPUs."""
        hops = self.paths[self.placed]
        on = hops.ravel()

        def per_link(values: np.ndarray) -> np.ndarray:
            summed: np.ndarray = np.bincount(on, np.repeat(values, hops.shape[1]), len(self.capacity))[links]
            return summed

        bps = self.fleet.bps[self.placed]
        capacity = self.fleet.capacity[links]
        measured = np.maximum(self.port_load[links], per_link(bps[:, 1]))
        full = measured >= self.cfg.saturated * capacity
        crowded = per_link(bps[:, 0]) >= capacity * (1 + self.cfg.min_gain)
        held_back = per_link(self.held_back[self.placed].astype(float)) > 0
        joined = np.isin(links, np.fromiter(self._joined, dtype=np.int64, count=len(self._joined)))
        out: np.ndarray = joined | (full & (crowded | held_back)) | (crowded & held_back)
        return out

    def plans_for(self, link: int, allowed: Callable[[int], bool]) -> Plan | None:
        """The best plan that relieves `link` and pays its way, None if
        none does: the best single move if one does (fewest moves first),
        else the best pair."""
        movers = [int(g) for g in self.members(np.array([link])) if self.movable[g] and allowed(int(g))]
        singles = [(g, row) for g in movers for row in self.alternatives(g)]
        best: Plan | None = None
        for g, row in singles:
            if self.spent():
                break
            best = _better(best, self.plan(((g, row),), link))
        if best is not None and best.worth:
            return best
        # Spent is checked before each step of the walk, not only before a
        # plan: a core link of meta-32k has thousands of members, and walking
        # them after the budget was spent took 6 s a pass (make bench-three-tier).
        for g, row in singles:
            if self.spent():
                break
            blocking = self._blocking(g, row)
            if not len(blocking):
                continue
            for f in self.members(blocking).tolist():
                if self.spent():
                    break
                if f == g or not self.movable[f] or not allowed(f):
                    continue
                for row2 in self.alternatives(f):
                    if self.spent():
                        break
                    best = _better(best, self.plan(((g, row), (f, row2)), link))
        return best if best is not None and best.worth else None


def _better(best: Plan | None, plan: Plan) -> Plan:
    """Of two plans, the one that pays its way, then the fairer, then the larger total, then the shorter."""
    if best is None:
        return plan
    rank = (plan.worth, plan.gain_bps, plan.total_bps, -len(plan.moves))
    return plan if rank > (best.worth, best.gain_bps, best.total_bps, -len(best.moves)) else best
