"""Rebalancing: the moves that bring every spine-tier link of the fabric
back under capacity, as one pass over the cycle's elephants. Pure.

A pass runs in named stages over one `Inputs` record:

1. `off_dead_links`: any live path beats none; an elephant on a dead link
   moves now, hysteresis or not (and a TCP flow whose ACKs may cross one
   is pinned where it is, which steers its ACKs back the same way).
2. `single_moves`: loads are arrays over the fabric's egresses, by the
   elephants' demands and as measured. The most utilized link over
   capacity takes a turn (gains.Turn) and sheds elephants while a move
   lowers the mover's bottleneck by `min_gain` by demand and the
   measurements agree; a bound from the routes' peaks (Fleet.may_gain)
   skips links none of whose elephants could gain. The work is
   proportional to the links over capacity, not to the fabric.
3. `joint_plans`: where single moves stopped (a swap or a chain is needed,
   whose first move alone gains nothing), plans of two moves, then a long
   search's routing (exact, else annealing), each judged by the max-min
   rates of every flow it touches (plan.Planner), on links measured full.
4. `outcome` (outcome.py): per elephant that ends the pass elsewhere than
   it began, one move (a flow moved twice in a pass changes path once; one
   moved back where it was, not at all), and the links reported collided or
   unfixable.

Caps are local: each leaf moves at most `max_moves_per_leaf` elephants per
pass (by default its uplink count), a moved flow stays put for
`hysteresis_s`, and no flow changes path more than `max_path_changes`
times while it stays an elephant and the links stay as they are.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

import numpy as np

from controller.fabric import NicId
from controller.te.engine.anneal import anneal
from controller.te.engine.catalog import FlowCatalog
from controller.te.engine.elephants import Connections
from controller.te.engine.exact import exact, premature
from controller.te.engine.fleet import Fleet
from controller.te.engine.fruitless import alike_within, fingerprint, searched_before
from controller.te.engine.gains import ONE_BY_ONE, Turn
from controller.te.engine.links import LinkIndex
from controller.te.engine.outcome import Outcome, outcome_of
from controller.te.engine.plan import Contest, Plan, Planner
from controller.te.engine.state import Elephants, EngineConfig, Fruitless, Move
from controller.te.view import FlowKey

# Up to this many elephants every move is a plan judged by the max-min
# rates; beyond, single moves by the flow's own bottleneck come first (in
# arrays, fabric-wide), and plans take what they leave.
PLANNED_ONLY = 512
ANNEALING_RESTARTS = 3  # seeds an annealing search tries before it gives up for the pass


@dataclass(frozen=True)
class Inputs:
    """What one pass works on."""

    index: LinkIndex
    catalog: FlowCatalog
    dead: np.ndarray  # per egress
    elephants: Elephants
    background: np.ndarray  # per egress, load beyond the elephants'
    port_load: np.ndarray  # per egress, what its port measures
    moves: Mapping[FlowKey, Move]  # as the pass starts
    now: float
    cfg: EngineConfig
    steered: Collection[tuple[NicId, NicId]] = frozenset()
    metered: Collection[FlowKey] = frozenset()
    changes: Mapping[FlowKey, int] = field(default_factory=dict)  # path changes per elephant so far
    # Per elephant: a placed job's flow between iterations, load by demand
    # where it is, never moved (nothing measures it now). None: none.
    dormant: np.ndarray | None = None
    fruitless: Fruitless | None = None  # the last joint search, if it found no plan
    pause: Callable[[], None] = lambda: None  # between stages (Engine.pause)


def rebalance(inputs: Inputs) -> Outcome:
    """Starts from where the elephants are (placing min-max those whose
    switch did not say), and runs the stages."""
    rebalancing = Pass(inputs)
    if inputs.dead.any():
        rebalancing.off_dead_links()
    rebalancing.single_moves()
    inputs.pause()
    rebalancing.joint_plans()
    inputs.pause()
    return rebalancing.outcome()


class Pass:
    """One rebalancing pass: the fleet as moves leave it, what may still
    move, and what moved."""

    def __init__(self, inputs: Inputs) -> None:
        self.inputs = inputs
        e, catalog, cfg = inputs.elephants, inputs.catalog, inputs.cfg
        self.fleet = fleet = Fleet(inputs.index, catalog, e, inputs.background, inputs.port_load, inputs.dead)
        # Where the switches did not say where a flow is, it counts as load where
        # it would do least harm, and is not moved: a move judged against a guessed
        # path can leave the fabric worse than the hash did.
        self.located = fleet.rows >= 0
        for i in np.flatnonzero(~self.located).tolist():
            fleet.place(i, fleet.least_loaded(i) or 0)
        self.start = fleet.rows.copy()
        self.why: dict[int, str] = {}  # elephant -> why it moved (its last move's reason)
        self.acks: list[int] = []  # elephants pinned where they are for their ACKs' sake
        self.rescued: set[int] = set()  # elephants moved off a dead path in this pass
        self.relieved: set[int] = set()
        self.stuck: set[int] = set()
        n = len(e)
        held, resting, metered = (np.zeros(n, dtype=bool) for _ in range(3))
        for at, move in zip(e.find(catalog.rows(list(inputs.moves))).tolist(), inputs.moves.values()):
            if at >= 0:
                held[at], resting[at] = move.held, move.held or inputs.now - move.moved_at < cfg.hysteresis_s
        at = e.find(catalog.rows(list(inputs.metered)))
        metered[at[at >= 0]] = True
        spent, self.last = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)  # last: one path change left
        if inputs.changes and cfg.max_path_changes:
            at = e.find(catalog.rows(list(inputs.changes)))
            counts = np.array(list(inputs.changes.values()), dtype=np.int64)
            spent[at[at >= 0]] = counts[at >= 0] >= cfg.max_path_changes
            self.last[at[at >= 0]] = counts[at >= 0] == cfg.max_path_changes - 1
        self.metered = metered
        self.movable = self.located & ~held & ~catalog.among(e.cat, inputs.steered)
        if inputs.dormant is not None:
            self.movable &= ~inputs.dormant
        self.free = self.movable & ~resting & ~spent  # may move in this pass
        self.waiting = self.movable & resting & ~spent  # may move once their hysteresis is over
        # Moves left this pass per source leaf: `max_moves_per_leaf`, or its uplink count.
        self.moves_left = (
            np.array(catalog.uplinks)
            if not cfg.max_moves_per_leaf
            else np.full(len(catalog.uplinks), cfg.max_moves_per_leaf)
        )
        self.moved = np.zeros(n, dtype=bool)
        # Kept until a search replaces it: its key says whether it still
        # applies (a calm cycle in between made meta-32k search again).
        self.fruitless: Fruitless | None = inputs.fruitless
        self.expected: np.ndarray | None = None  # per elephant, its max-min rate where the plans left it
        self._planner: Planner | None = None
        self._calm = False

    def allowed(self, i: int) -> bool:
        """Elephant i may move now: free, and its leaf has moves left (a
        flow moved in this pass already spent its leaf's)."""
        return bool(self.free[i] and (self.moved[i] or self.moves_left[self.fleet.leaf[i]] > 0))

    def move(self, i: int, row: int, why: str, costs: bool = True) -> tuple[list[int], list[int]]:
        """Moves elephant i to its route `row`; (the links it left, those it
        joined). `costs`: it takes one of its leaf's moves (a failover does not)."""
        fleet = self.fleet
        if not self.moved[i]:
            self.moves_left[fleet.leaf[i]] -= costs
            self.moved[i] = True
        before = fleet.hops(i).tolist()
        fleet.move(i, row)
        self.why[i] = why
        return before, fleet.hops(i).tolist()

    def off_dead_links(self) -> None:
        fleet, index, dead = self.fleet, self.inputs.index, self.inputs.dead
        elephants = self.inputs.elephants
        free = ~self.inputs.catalog.among(elephants.cat, self.inputs.steered)
        on_dead = free & dead[index.table()[fleet.rows]].any(axis=1)
        for i in np.flatnonzero(on_dead).tolist():
            row = fleet.least_loaded(i)
            if row is not None:
                self.move(i, row, "path down", costs=False)
                self.rescued.add(i)
        # The data path survived (the ingress leaf failed over) but the ACKs hash
        # on their own and may cross the dead link: pinning the flow where it is
        # also steers its ACKs back the same way. They may die where the route
        # back across the flow's via lives while another route back is dead.
        tcp = np.array([key[2] == "tcp" and key not in self.inputs.moves for key in elephants.keys], dtype=bool)
        candidates = np.flatnonzero(free & ~on_dead & tcp)
        back = index.reverse_rows(fleet.rows[candidates])
        table = index.table()
        starts, _, block = index.blocks()
        row_dead = dead[table].any(axis=1)
        block_dead = np.logical_or.reduceat(row_dead, starts) if len(starts) else np.zeros(0, dtype=bool)
        found = back >= 0
        acks = np.zeros(len(candidates), dtype=bool)
        acks[found] = ~row_dead[back[found]] & block_dead[block[back[found]]]
        self.acks = candidates[acks].tolist()
        self.free[self.acks] = False  # pinned where it is this pass

    def single_moves(self) -> None:
        """Turns of the links over capacity, hottest first (see the module docstring)."""
        fleet, cfg = self.fleet, self.inputs.cfg
        # A flow getting most of its demand gains nothing from a move; a metered
        # one's rate is ours to set, and moving it may relieve others.
        satisfied = (fleet.bps[:, 1] >= cfg.satisfied * fleet.bps[:, 0]) & ~self.metered
        eligible = self.free & ~self.moved & ~satisfied
        planner = self.planner()
        if len(self.inputs.elephants) <= PLANNED_ONLY:
            eligible[:] = False  # every move is a plan, weighed by the max-min rates (joint_plans)
        elif planner is not None:  # nor one its NIC holds, whatever the demands say
            eligible &= planner.route_bound() | self.metered
        over = fleet.over_mask() & fleet.limiting()
        self.hot_at_start = set(np.flatnonzero(over & (fleet.count >= 2)).tolist())
        # A link none of whose elephants may gain from a move (the steady state
        # behind an oversubscribed core: hundreds of links over capacity by
        # demand, all alike) is stuck without a turn of its own, unless a move
        # of this pass touches it: one bound over all their elephants at once.
        queued_links = np.flatnonzero(over & (fleet.count >= 1))
        on_queued = fleet.on_links(queued_links)
        on_queued = on_queued[eligible[on_queued]]
        maybe = np.zeros(len(eligible), dtype=bool)
        maybe[on_queued[fleet.may_gain(on_queued, cfg)]] = True
        has_turn = fleet.links_with(maybe)
        self.stuck = set(queued_links[~has_turn[queued_links]].tolist())
        # One live heap entry per link, at the utilization it was queued with: a
        # link touched by many moves is evaluated once per change, not once per push.
        queued = {link: fleet.utilization(link) for link in queued_links[has_turn[queued_links]].tolist()}
        heap = [(-u, link) for link, u in queued.items()]
        heapq.heapify(heap)
        while heap:
            minus_u, link = heapq.heappop(heap)
            if queued.get(link) != -minus_u:
                continue  # a later entry of this link is queued
            del queued[link]
            loaded, unloaded = self._turn(link, eligible)
            for changed in unloaded - loaded:
                self._queue(queued, heap, changed, loaded=False)
            for changed in loaded:
                self._queue(queued, heap, changed, loaded=True)

    def _turn(self, link: int, eligible: np.ndarray) -> tuple[set[int], set[int]]:
        """One link's turn; (the links its moves loaded, those they unloaded)."""
        fleet, cfg = self.fleet, self.inputs.cfg
        loaded: set[int] = set()
        unloaded: set[int] = set()
        if not fleet.over(link) or not fleet.limits_a_member(link):
            return loaded, unloaded
        members = fleet.member_array(link)
        candidates = members[eligible[members]]
        if len(candidates) > ONE_BY_ONE:  # a few are weighed exactly for less than the bound costs
            candidates = candidates[fleet.may_gain(candidates, cfg)]
        if not len(candidates):
            self.stuck.add(link)
            return loaded, unloaded

        def shed(i: int, row: int, gain: float) -> list[int]:
            e = self.inputs.elephants
            why = (
                f"its bottleneck -{gain:.2f} of capacity (demand {e.demand_bps[i] / 1e9:.0f} Gb/s, "
                f"measured {e.rate_bps[i] / 1e9:.0f})"
            )
            left, joined = self.move(i, row, why)
            unloaded.update(left)
            loaded.update(joined)
            eligible[i] = False  # it rests now
            return left + joined

        if Turn(fleet, link, candidates, self.metered).run(cfg, lambda i: self.allowed(i), shed):
            self.relieved.add(link)
        if not loaded:
            self.stuck.add(link)
        return loaded, unloaded

    def _queue(self, queued: dict[int, float], heap: list[tuple[float, int]], link: int, loaded: bool) -> None:
        """A link a move changed: queued if over capacity and it took load,
        or queued already (at its new utilization). One that only gave load
        up offers its elephants nothing new: their routes are lighter."""
        fleet = self.fleet
        if (loaded or link in queued) and fleet.over(link) and queued.get(link) != (u := fleet.utilization(link)):
            queued[link] = u
            heapq.heappush(heap, (-u, link))

    def joint_plans(self) -> None:
        """Plans for the flows single moves left squeezed, the slowest first;
        each link tried once while the routing stays as it is. Only where
        some link is over capacity by demand (else every elephant gets its
        demand, the most a routing can give it), and not again on inputs a
        search found nothing on."""
        inputs = self.inputs
        if self.planner() is None:
            return
        if len(inputs.elephants) > PLANNED_ONLY and self.moved.any():
            # Single moves are still at work: what they leave is known once the
            # ports measure their moves (a plan searched now cost 3 s a cycle
            # on ft2-16k's first cycles, make bench-scale).
            return
        step = alike_within(inputs.cfg, self.fleet.capacity)
        caps = _caps(inputs.elephants, self.metered)
        key = fingerprint(self.fleet.rows, inputs.elephants.cat, self.free, caps, inputs.dead, step)
        searches = searched_before(inputs.fruitless, key, inputs.background, inputs.now, inputs.cfg, step)
        planner = self.planner()
        assert planner is not None
        planner.refresh()
        last = inputs.fruitless
        searched = last.links if last is not None and searches != 0 else frozenset()
        confirmed = planner.confirmed()
        if searches < 0 and searched.issuperset(confirmed):
            return  # self.fruitless is `last` already
        tried: set[int] = set()
        long_tried = False
        while True:
            plan: Plan | None = None
            for link in confirmed:
                if link in tried or planner.spent():
                    continue
                tried.add(link)
                inputs.pause()  # a search is the longest piece of a cycle: the API may go first between two
                plan = planner.plans_for(link, self.allowed)
                if plan is not None:
                    break
            if plan is None and not long_tried and len(inputs.elephants) <= PLANNED_ONLY:
                long_tried = True  # where every move is a plan (the annealer's steps are scalar)
                plan = self._long_plan(planner, confirmed)
            if plan is None:
                if self.moved.any():
                    self.expected = planner.x
                else:
                    # A spent budget is a search of them all: the links left
                    # wait out hysteresis_s with the rest (at 32K GPUs the budget
                    # went on the same link every cycle, make bench-three-tier).
                    done = searched | tried | (set(confirmed) if planner.spent() else set())
                    count = last.searches if searches < 0 and last is not None else max(searches, 0) + 1
                    self.fruitless = Fruitless(key, inputs.background, inputs.now, count, frozenset(done))
                return
            why = (
                f"a plan of {len(plan.moves)}: the slowest flow it changes +{plan.gain_bps / 1e9:.2f} Gb/s, "
                f"all of them {plan.total_bps / 1e9:+.2f} Gb/s"
            )

            def move(i: int, row: int, why: str = why) -> None:
                self.move(i, row, why)

            planner.apply(plan, move)
            self.relieved.add(plan.relieved)
            tried.clear()  # the routing changed: a link tried before may have a plan now
            confirmed = planner.confirmed()

    def planner(self) -> Planner | None:
        """The max-min model of the fleet (plan.Planner), made on first use;
        None where no link is over capacity by demand (every elephant gets
        its demand, the most a routing can give it)."""
        if self._planner is None and not self._calm:
            over = self.fleet.over_mask()
            over[self.inputs.index.pad] = False
            self._calm = not over.any()
            if not self._calm:
                inputs, catalog, fleet = self.inputs, self.inputs.catalog, self.fleet
                e = inputs.elephants
                ends = np.stack([catalog.nic_tx[catalog.src[e.cat]], catalog.nic_rx[catalog.dst[e.cat]]], axis=1)
                # Measured: a fresh record well under its demand (a dormant job flow measures nothing).
                held_back = (e.flow >= 0) & (fleet.bps[:, 1] < inputs.cfg.satisfied * fleet.bps[:, 0])
                caps = _caps(e, self.metered)
                qps = Connections.of(catalog, e.cat).sum(np.ones(len(e.cat)))
                contest = Contest(ends, caps, self.free, held_back, qps, inputs.background, inputs.port_load)
                self._planner = Planner(fleet, contest, inputs.cfg)
        return self._planner

    def _long_plan(self, planner: Planner, confirmed: list[int]) -> Plan | None:
        """A plan of any length, where the slowest squeezed flow's link is
        congested, if the max-min rates of what it touches beat min_gain:
        the exact search's, else (too large, or nothing found in its time)
        simulated annealing's. Made whole or not at all (the leaves'
        budgets bound single moves)."""
        if not confirmed:
            return None
        link, movable = confirmed[0], self.free & planner.movable

        def worth(moves: tuple[tuple[int, int], ...] | None) -> Plan | None:
            if not moves or not (plan := planner.plan(moves, link)).worth:
                return None
            # A second search, so only for a plan worth making: searched again as the waiting flows come free.
            return None if premature(planner, movable, self.waiting, self.last, moves) else plan

        self.inputs.pause()
        moves = exact(planner, movable)
        if moves is not None:
            # No annealing after it: on Hedera's busy patterns it never beat the
            # search's routing, and cost randx5 0.7-1.5 s of CPU a cycle.
            return worth(moves)
        seed = int(self.inputs.now * 1000) & 0xFFFFFFFF
        for restart in range(ANNEALING_RESTARTS):
            self.inputs.pause()
            if (plan := worth(anneal(planner, movable, seed + restart))) is not None:
                return plan
        return None

    def outcome(self) -> Outcome:
        return outcome_of(self)


def _caps(elephants: Elephants, metered: np.ndarray) -> np.ndarray:
    """Per elephant the most it would send: a TCP flow takes what the
    network gives it; any other sends what it measures (a metered one's
    rate is its meter's, set in the cycle)."""
    elastic = np.array([key[2] == "tcp" for key in elephants.keys], dtype=bool) & ~metered
    return np.where(elastic, np.inf, elephants.rate_bps)
