"""The end of a rebalancing pass: per elephant that ends elsewhere than it
began, one move and its decision record (a flow moved twice in a pass
changes path once; one moved back where it was, not at all), and the links
reported collided (over capacity, and TE can act on them, now or once the
flows moved lately rest out their hysteresis) or unfixable (no move of any
of their flows relieves them). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from controller.te.engine.gains import any_gain
from controller.te.engine.links import LinkIndex
from controller.te.engine.state import Decision, DecisionKind, Fruitless, Move, describe_flow
from controller.te.view import FlowKey

if TYPE_CHECKING:
    from controller.te.engine.rebalance import Pass


@dataclass(frozen=True)
class Outcome:
    moves: dict[FlowKey, Move]
    decisions: list[Decision]
    collisions: dict[str, str]  # link -> why: over capacity and TE can act on it
    unfixable: dict[str, str]  # link -> why: over capacity and no move relieves it
    relieved: frozenset[str]  # links a move of this pass took load off
    fruitless: Fruitless | None = None  # this pass's joint search (or the one before), if it found no plan


def outcome_of(done: Pass) -> Outcome:
    return Outcome(*_moves(done), *_collisions(done), _relieved_names(done), done.fruitless)


def _moves(done: Pass) -> tuple[dict[FlowKey, Move], list[Decision]]:
    """Per elephant that ends elsewhere than it started, one move."""
    inputs, fleet = done.inputs, done.fleet
    e, catalog, now = inputs.elephants, inputs.catalog, inputs.now
    moves = dict(inputs.moves)
    decisions: list[Decision] = []
    for i in np.flatnonzero(fleet.rows != done.start).tolist():
        key, c = e.keys[i], int(e.cat[i])
        before = inputs.index.via_at[int(done.start[i])]
        after = fleet.via(i, fleet.row(i))
        moves[key] = Move(
            key,
            catalog.src_nic(c),
            catalog.dst_nic(c),
            after,
            now,
            now,
            before,
            float(e.rate_bps[i]),
            rate_expected=0.0 if done.expected is None else float(done.expected[i]),
            rescued=i in done.rescued,
        )
        decisions.append(
            Decision(
                DecisionKind.REROUTE,
                describe_flow(key),
                f"{before} -> {after}: {done.why[i]}",
                now,
                flow=key,
                from_via=before,
                to_via=after,
            )
        )
    for i in done.acks:
        key, c = e.keys[i], int(e.cat[i])
        via = fleet.via(i, fleet.row(i))
        moves[key] = Move(key, catalog.src_nic(c), catalog.dst_nic(c), via, now, now, from_via=via, rescued=True)
        why = f"ACKs pinned via {via}: their hashed path may cross a dead link"
        decisions.append(
            Decision(DecisionKind.REROUTE, describe_flow(key), why, now, flow=key, from_via=via, to_via=via)
        )
    return moves, decisions


def _collisions(done: Pass) -> tuple[dict[str, str], dict[str, str]]:
    fleet, index, cfg = done.fleet, done.inputs.index, done.inputs.cfg
    collisions: dict[str, str] = {}
    unfixable: dict[str, str] = {}
    over_still: list[tuple[str, str, np.ndarray]] = []
    report = np.array(
        sorted(done.hot_at_start | {link for link in done.stuck if fleet.count[link] >= 2}), dtype=np.int64
    )
    for link in report[fleet.collided(report, done.inputs.catalog)].tolist():
        name = _name(index, link)
        why = f"{fleet.count[link]} elephants, demand {fleet.utilization(link):.2f} of the link"
        if link in done.relieved or not fleet.over(link):
            collisions[name] = why
        else:
            over_still.append((name, why, fleet.member_array(link)))
    # Fixable all the same: a move would relieve it but for hysteresis or budget.
    if over_still:
        pool = np.unique(np.concatenate([members for _, _, members in over_still]))
        pool = pool[done.movable[pool]]
        maybe = np.zeros(len(done.movable), dtype=bool)
        maybe[pool[fleet.may_gain(pool, cfg)]] = True
        # Flows moved in this pass rest from now on, unless that spent their last path change.
        resting = done.waiting | ((fleet.rows != done.start) & ~done.last)
        for name, why, members in over_still:
            if resting[members].any():
                # Not searched with them yet: a swap or a chain through a flow that
                # rests frees what no move of the others does (Hedera's randbij4
                # seed 1: a plan of five, once they were free, 3.1 s in).
                collisions[name] = f"{why}; {_resting(done, members[resting[members]])}"
                continue
            fixable = any_gain(fleet, members[maybe[members]], cfg, done.metered)
            (collisions if fixable else unfixable)[name] = why
    return collisions, unfixable


def _resting(done: Pass, resting: np.ndarray) -> str:
    """How many of a link's elephants wait out their hysteresis, and for how long yet."""
    inputs = done.inputs
    earlier = [None if done.moved[i] else inputs.moves.get(inputs.elephants.keys[i]) for i in resting.tolist()]
    moved = [inputs.now if move is None else move.moved_at for move in earlier]
    left = max(moved) + inputs.cfg.hysteresis_s - inputs.now
    return f"{len(moved)} of them rest after a move, searched again in {max(left, 0.0):.1f} s"


def _relieved_names(done: Pass) -> frozenset[str]:
    return frozenset(_name(done.inputs.index, link) for link in done.relieved)


def _name(index: LinkIndex, link: int) -> str:
    egress = index.egresses[link]
    return f"{egress.node}:{egress.port}"
