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
the fabric: loads are summed with one bincount, the elephants on links over
capacity are weighed in one array pass (fleet.py), and only links where some
elephant could move take a turn of their own. Pure."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from controller.fabric import Fabric, NicId
from controller.te.engine.fleet import Fleet
from controller.te.engine.links import LinkIndex, Routes
from controller.te.engine.state import Decision, DecisionKind, Elephant, EngineConfig, Move, describe_flow
from controller.te.view import FlowKey


@dataclass(frozen=True)
class Outcome:
    decisions: list[Decision]
    collisions: dict[str, str]  # link -> why: over capacity and TE can act on it
    unfixable: dict[str, str]  # link -> why: over capacity and no move relieves it
    relieved: frozenset[str]  # links a move of this cycle took load off


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
    fleet = Fleet(index, elephants, routes, background, port_load)
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
    fleet: Fleet,
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


def _acks_may_die(fleet: Fleet, i: int, dead: np.ndarray) -> bool:
    e = fleet.elephants[i]
    back = fleet.index.routes(e.dst, e.src)
    via = fleet.routes[i].vias[fleet.row(i)]
    if via not in back.position:
        return False
    hops_dead = dead[back.hops].any(axis=1)
    return not hops_dead[back.position[via]] and bool(hops_dead.any())


def _resting(move: Move | None, now: float, cfg: EngineConfig) -> bool:
    return move is not None and (move.held or now - move.moved_at < cfg.hysteresis_s)
