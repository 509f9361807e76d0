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
the fabric: loads are summed with one bincount; the most utilized link over
capacity takes a turn (gains.Turn) and sheds elephants while a move passes;
a bound from the routes' peaks (Fleet.may_gain) tells, with a few lookups,
the links none of whose elephants could gain, which take no turn at all
(behind an oversubscribed core, most of them). Pure."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection
from dataclasses import dataclass

import numpy as np

from controller.fabric import NicId
from controller.te.engine.catalog import FlowCatalog
from controller.te.engine.fleet import Fleet
from controller.te.engine.gains import ONE_BY_ONE, Turn, any_gain
from controller.te.engine.links import LinkIndex
from controller.te.engine.state import Decision, DecisionKind, Elephants, EngineConfig, Move, describe_flow
from controller.te.view import FlowKey


@dataclass(frozen=True)
class Outcome:
    decisions: list[Decision]
    collisions: dict[str, str]  # link -> why: over capacity and TE can act on it
    unfixable: dict[str, str]  # link -> why: over capacity and no move relieves it
    relieved: frozenset[str]  # links a move of this cycle took load off


def rebalance(
    index: LinkIndex,
    catalog: FlowCatalog,
    dead: np.ndarray,
    elephants: Elephants,
    background: np.ndarray,
    port_load: np.ndarray,
    moves: dict[FlowKey, Move],
    now: float,
    cfg: EngineConfig,
    steered: Collection[tuple[NicId, NicId]] = frozenset(),
    metered: Collection[FlowKey] = frozenset(),
) -> Outcome:
    """Starts from where the elephants are (placing min-max those whose
    switch did not say), moves those on dead links, then fixes every link
    over capacity that a move can fix. Updates `moves`."""
    fleet = Fleet(index, catalog, elephants, background, port_load, dead)
    # Where the switches did not say where a flow is, it counts as load where
    # it would do least harm, and is not moved: a move judged against a guessed
    # path can leave the fabric worse than the hash did.
    located = fleet.rows >= 0
    for i in np.flatnonzero(~located).tolist():
        fleet.place(i, fleet.least_loaded(i) or 0)
    decisions: list[Decision] = []

    def moved(i: int, row: int, why: str) -> None:
        key, c = elephants.keys[i], int(elephants.cat[i])
        before, after = fleet.via(i, fleet.row(i)), fleet.via(i, row)
        fleet.move(i, row)
        decisions.append(Decision(DecisionKind.REROUTE, describe_flow(key), f"{before} -> {after}: {why}", now))
        moves[key] = Move(
            key,
            catalog.src_nic(c),
            catalog.dst_nic(c),
            after,
            now,
            now,
            from_via=before,
            rate_before=float(elephants.rate_bps[i]),
        )

    if dead.any():
        _off_dead_links(fleet, catalog, dead, moves, now, steered, moved, decisions)

    # Per elephant, as arrays: what may move at all, and what may move now.
    held, resting, is_metered = (np.zeros(len(elephants), dtype=bool) for _ in range(3))
    for at, move in zip(elephants.find(catalog.rows(list(moves))).tolist(), moves.values()):
        if at >= 0:
            held[at], resting[at] = move.held, _resting(move, now, cfg)
    metered_at = elephants.find(catalog.rows(list(metered)))
    is_metered[metered_at[metered_at >= 0]] = True
    movable = located & ~held & ~catalog.among(elephants.cat, steered)
    # A flow getting most of its demand gains nothing from a move; a metered
    # one's rate is ours to set, and moving it may relieve others.
    satisfied = (fleet.bps[:, 1] >= cfg.satisfied * fleet.bps[:, 0]) & ~is_metered
    eligible = movable & ~resting & ~satisfied
    # Moves left this cycle per source leaf: `max_moves_per_leaf`, or its uplink count.
    moves_left = (
        np.array(catalog.uplinks)
        if not cfg.max_moves_per_leaf
        else np.full(len(catalog.uplinks), cfg.max_moves_per_leaf)
    )

    over = fleet.over_mask() & fleet.limiting()
    hot_at_start = set(np.flatnonzero(over & (fleet.count >= 2)).tolist())
    relieved: set[int] = set()
    # A link none of whose elephants may gain from a move (the steady state
    # behind an oversubscribed core: hundreds of links over capacity by
    # demand, all alike) is stuck without a turn of its own, unless a move
    # of this pass touches it: one bound over all their elephants at once.
    queued_links = np.flatnonzero(over & (fleet.count >= 1))
    on_queued = fleet.on_links(queued_links)
    on_queued = on_queued[eligible[on_queued]]
    maybe = np.zeros(len(elephants), dtype=bool)
    maybe[on_queued[fleet.may_gain(on_queued, cfg)]] = True
    has_turn = fleet.links_with(maybe)
    stuck = set(queued_links[~has_turn[queued_links]].tolist())
    # One live heap entry per link, at the utilization it was queued with: a
    # link touched by many moves is evaluated once per change, not once per push.
    queued = {link: fleet.utilization(link) for link in queued_links[has_turn[queued_links]].tolist()}
    heap = [(-u, link) for link, u in queued.items()]
    heapq.heapify(heap)

    def queue(link: int, loaded: bool) -> None:
        """A link whose load a move changed: queued if over capacity and it
        took load (its elephants may gain from a move now), or queued
        already (at its new utilization). One that only gave load up has
        nothing new to offer its own elephants: their routes are lighter."""
        if (loaded or link in queued) and fleet.over(link) and queued.get(link) != (u := fleet.utilization(link)):
            queued[link] = u
            heapq.heappush(heap, (-u, link))

    loaded: set[int] = set()  # links the moves of a turn loaded and unloaded
    unloaded: set[int] = set()

    def shed(i: int, row: int, gain: float) -> list[int]:
        """Moves elephant i off the link whose turn it is; the links it changed."""
        moves_left[fleet.leaf[i]] -= 1
        why = (
            f"its bottleneck -{gain:.2f} of capacity (demand {elephants.demand_bps[i] / 1e9:.0f} Gb/s, "
            f"measured {elephants.rate_bps[i] / 1e9:.0f})"
        )
        before = fleet.hops(i).tolist()
        moved(i, row, why)
        after = fleet.hops(i).tolist()
        unloaded.update(before)
        loaded.update(after)
        eligible[i] = False  # it rests now
        return before + after

    while heap:
        minus_u, link = heapq.heappop(heap)
        if queued.get(link) != -minus_u:
            continue  # a later entry of this link is queued
        del queued[link]
        if not fleet.over(link) or not fleet.limits_a_member(link):
            continue
        members = fleet.member_array(link)
        candidates = members[eligible[members]]
        if len(candidates) > ONE_BY_ONE:  # a few are weighed exactly for less than the bound costs
            candidates = candidates[fleet.may_gain(candidates, cfg)]
        if not len(candidates):
            stuck.add(link)
            continue
        loaded.clear()
        unloaded.clear()
        if Turn(fleet, link, candidates, is_metered).run(cfg, lambda i: moves_left[fleet.leaf[i]] > 0, shed):
            relieved.add(link)
        if not loaded:
            stuck.add(link)
            continue
        for changed in unloaded - loaded:
            queue(changed, loaded=False)
        for changed in loaded:
            queue(changed, loaded=True)

    collisions: dict[str, str] = {}
    unfixable: dict[str, str] = {}
    over_still: list[tuple[str, str, np.ndarray]] = []
    report = np.array(sorted(hot_at_start | {link for link in stuck if fleet.count[link] >= 2}), dtype=np.int64)
    for link in report[fleet.collided(report, catalog)].tolist():
        egress = index.egresses[link]
        name = f"{egress.node}:{egress.port}"
        why = f"{fleet.count[link]} elephants, demand {fleet.utilization(link):.2f} of the link"
        if link in relieved or not fleet.over(link):
            collisions[name] = why
        else:
            over_still.append((name, why, fleet.member_array(link)))
    # Fixable all the same: a move would relieve it but for hysteresis or budget.
    if over_still:
        pool = np.unique(np.concatenate([members for _, _, members in over_still]))
        pool = pool[movable[pool]]
        maybe = np.zeros(len(elephants), dtype=bool)
        maybe[pool[fleet.may_gain(pool, cfg)]] = True
        for name, why, members in over_still:
            fixable = any_gain(fleet, members[maybe[members]], cfg, is_metered)
            (collisions if fixable else unfixable)[name] = why
    names = frozenset(f"{index.egresses[link].node}:{index.egresses[link].port}" for link in relieved)
    return Outcome(decisions, collisions, unfixable, names)


def _off_dead_links(
    fleet: Fleet,
    catalog: FlowCatalog,
    dead: np.ndarray,
    moves: dict[FlowKey, Move],
    now: float,
    steered: Collection[tuple[NicId, NicId]],
    moved: Callable[[int, int, str], None],
    decisions: list[Decision],
) -> None:
    """Any live path beats none: an elephant whose route crosses a dead link
    moves now, hysteresis or not."""
    elephants, index = fleet.elephants, fleet.index
    free = ~catalog.among(elephants.cat, steered)
    on_dead = free & dead[index.table()[fleet.rows]].any(axis=1)
    for i in np.flatnonzero(on_dead).tolist():
        row = fleet.least_loaded(i)
        if row is not None:
            moved(i, row, "path down")
    # The data path survived (the ingress leaf failed over) but the ACKs hash
    # on their own and may cross the dead link: pinning the flow where it is
    # also steers its ACKs back the same way. They may die where the route
    # back across the flow's via lives while another route back is dead.
    tcp = np.array([key[2] == "tcp" and key not in moves for key in elephants.keys], dtype=bool)
    candidates = np.flatnonzero(free & ~on_dead & tcp)
    back = index.reverse_rows(fleet.rows[candidates])
    table = index.table()
    starts, _, block = index.blocks()
    row_dead = dead[table].any(axis=1)
    block_dead = np.logical_or.reduceat(row_dead, starts) if len(starts) else np.zeros(0, dtype=bool)
    found = back >= 0
    acks = np.zeros(len(candidates), dtype=bool)
    acks[found] = ~row_dead[back[found]] & block_dead[block[back[found]]]
    for i in candidates[acks].tolist():
        key, c = elephants.keys[i], int(elephants.cat[i])
        via = fleet.via(i, fleet.row(i))
        moves[key] = Move(key, catalog.src_nic(c), catalog.dst_nic(c), via, now, now, from_via=via)
        why = f"ACKs pinned via {via}: their hashed path may cross a dead link"
        decisions.append(Decision(DecisionKind.REROUTE, describe_flow(key), why, now))


def _resting(move: Move | None, now: float, cfg: EngineConfig) -> bool:
    return move is not None and (move.held or now - move.moved_at < cfg.hysteresis_s)
