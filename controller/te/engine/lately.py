"""What the engine carries from one cycle to the next, and checks against
the present: the elephants seen lately (`recent`), those absent now
(`absent`: starved by a dead link, or dormant), the load their records
explain on each link (`explained`), and moves settling after their
hysteresis (`settle`). Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

import numpy as np

from controller.fabric import NicId
from controller.te.engine.catalog import FlowCatalog
from controller.te.engine.links import LinkIndex
from controller.te.engine.state import (
    Decision,
    DecisionKind,
    Elephants,
    EngineConfig,
    Move,
    PathChanges,
    Recent,
    TeState,
    describe_flow,
)
from controller.te.view import FlowKey


def recent(
    before: Recent,
    elephants: Elephants,
    last: np.ndarray,
    now: float,
    cfg: EngineConfig,
    catalog: FlowCatalog,
    jobs: Collection[tuple[NicId, NicId]],
) -> tuple[Recent, int]:
    """The elephants seen lately: those of this cycle, and those seen before
    and not for `expire_after_s` (a placed job's, for as long as the job is
    placed: it iterates); and how many of the latter (they come first)."""
    kept = np.ones(len(before), dtype=bool)
    kept[last[last >= 0]] = False
    lately = now - before.at <= cfg.expire_after_s
    if jobs and len(before):
        lately |= catalog.among(before.cat, jobs)
    kept &= lately
    old = np.flatnonzero(kept)
    recent = Recent(
        [before.keys[i] for i in old.tolist()] + elephants.keys,
        np.concatenate([before.rate_bps[old], elephants.rate_bps]),
        np.concatenate([before.demand_bps[old], elephants.demand_bps]),
        np.concatenate([before.at[old], np.full(len(elephants), now)]),
        np.concatenate([before.row[old], elephants.row]),
        np.concatenate([before.cat[old], elephants.cat]),
        catalog.owner,
    )
    return recent, len(old)


def absent(
    index: LinkIndex,
    catalog: FlowCatalog,
    dead: np.ndarray,
    recent: Recent,
    kept: int,
    moves: Mapping[FlowKey, Move],
) -> tuple[Elephants, Elephants]:
    """Elephants seen lately and not now, where they are (where we moved
    them, or where they were last seen), in two kinds:
    - starved: those whose path crosses a dead link. A flow black-holed by
      a failure measures ~0 at once and stops looking like an elephant; it
      is exactly the one to move;
    - dormant: the others, seen within `expire_after_s` (a placed job's
      flow for as long as the job is placed: between two iterations). They
      send nothing now, or less than an elephant (TCP under contention
      dips below the threshold and comes back), and will send again: they
      count as load by demand where they are, and are not moved, so a plan
      does not change with who crossed a threshold this cycle, and nothing
      is planned onto their paths meanwhile."""
    row, cat = recent.row[:kept].copy(), recent.cat[:kept]
    for r, move in zip(recent.find(catalog.rows(list(moves))).tolist(), moves.values()):
        if 0 <= r < kept and cat[r] >= 0:
            row[r] = index.row_of(int(catalog.base[cat[r]]), move.via)  # where it is now: we moved it
    row = np.where(row < len(index), row, -1)  # a row of a route index that started over
    known = np.flatnonzero((row >= 0) & (cat >= 0))
    on_dead = dead[index.table()[row[known]]].any(axis=1)
    starved = known[on_dead]
    dormant = known[~on_dead]

    def elephants(i: np.ndarray, measured: bool) -> Elephants:
        """A starved flow keeps its last rate (a move is checked against it); a dormant one sends nothing."""
        rate = recent.rate_bps[i] if measured else np.zeros(len(i))
        return Elephants(
            [recent.keys[k] for k in i.tolist()],
            np.full(len(i), -1),
            cat[i],
            rate,
            np.zeros(len(i)),
            recent.demand_bps[i],
            row[i],
        )

    return elephants(starved, True), elephants(dormant, False)


def explained(
    catalog: FlowCatalog,
    elephants: Elephants,
    port_at: np.ndarray,
    state: TeState,
    cfg: EngineConfig,
) -> tuple[np.ndarray, np.ndarray]:
    """Per egress, the load its elephants' records explain, smoothed as the
    port's own rate was (`port_smoothing`, the LinkView's EWMA: seeded with
    the first sample, then one step per new port sample, not per cycle: a
    cycle may run between two batches); and the time of the port sample
    each egress last folded in.

    The difference from the port's rate is background (mice, flows TE does
    not see). It is one only if both sides went through the same filter.
    Records arrive raw, port rates smoothed: subtracting the one from the
    other, every flow that stops leaves its port's EWMA tail (half its rate,
    then a quarter, ...) as load nobody sends, and every flow that starts a
    hole as deep. Steady traffic never shows it; a collective that
    iterates (send, compute, send) does at every iteration: the tail peaks
    in the compute gap, the residual's EWMA carries it into the next
    iteration, and on a link its one elephant fills exactly, that phantom
    background reads as a collision. Smoothed alike, a flow's tail is
    explained by its own. Every elephant's record explains its share of
    its NIC's link and of its receiver's, located or not."""
    index = catalog.index
    located = elephants.row >= 0
    # This sample's rates, not the smoothed ones: the same instant as the port counters.
    now_load = index.loads(elephants.row[located], elephants.raw_bps[located])
    ends = np.concatenate([catalog.nic_tx[catalog.src[elephants.cat]], catalog.nic_rx[catalog.dst[elephants.cat]]])
    now_load += np.bincount(ends, np.tile(elephants.raw_bps, 2), len(now_load))
    fresh = np.isfinite(port_at)
    if state.explained is None or state.port_at is None or len(state.explained) != len(now_load):
        return np.where(fresh, now_load, 0.0), port_at
    a = cfg.port_smoothing
    new = port_at > state.port_at  # a port sample the LinkView has folded in since the last cycle
    first = new & ~np.isfinite(state.port_at)
    explained = np.where(first, now_load, np.where(new, a * now_load + (1 - a) * state.explained, state.explained))
    # A port with no fresh sample keeps its filter's state, as the LinkView keeps its last rate.
    return explained, np.where(fresh, port_at, state.port_at)


FULL = 0.9  # of a link's capacity: a link this loaded holds its flows back


def settle(
    index: LinkIndex,
    catalog: FlowCatalog,
    dead: np.ndarray,
    measured: tuple[np.ndarray, np.ndarray],
    elephants: Elephants,
    moves: dict[FlowKey, Move],
    now: float,
    cfg: EngineConfig,
    changes: Mapping[FlowKey, PathChanges],
) -> list[Decision]:
    """Once a move has had `hysteresis_s` to take effect, it is checked once
    against the rate the flow had before: a flow that measures worse goes
    back where it was and is held there. TE never leaves a flow worse off
    than the hash did. But a flow whose move spent its last path change
    (`changes`: the path changes TE made each flow) stays: going back
    would be one change more than the bound allows (Hedera's randx5 seed 1:
    moved twice by plans of two, sent back 18.6 s in, three path changes),
    and the plan that moved it was judged on every flow it changed, not on
    this one alone. Worse counts only where its new route is to blame
    (`measured`: per link, its rate and whether a fresh sample came): a hop
    full or dead, or no hop measured. A flow that sends less on a route with room
    was held back by itself: its iteration ending, its sender, its NIC. So
    was one whose sender's or receiver's NIC is full: it shares that NIC
    with others on any route, and TCP shares it unevenly. Sent back and
    held, it would keep a collision the move had fixed until the traffic
    changes (Hedera's rand1: three flows into one NIC, the moved one
    measuring 0.21 of its 0.33 share on a last hop they filled exactly).
    Nor is a flow judged while another move onto or off its route is under
    `max_age_s` old: its smoothed rate is still the one it had before that
    move relieved (or loaded) the route (Hedera's stag3(0.2,0.3): a flow
    that shared a spine until a plan moved the other flow off, sent back
    0.2 s later on the rate it had while sharing, and held where it
    collided for the rest of the run)."""
    out = []
    changed: np.ndarray | None = None  # worked out once a move is due: a fixing cycle has thousands young, none due
    for (key, move), i in zip(list(moves.items()), elephants.find(catalog.rows(list(moves))).tolist()):
        if i < 0 or move.settled or now - move.moved_at < cfg.hysteresis_s:
            continue
        rate = float(elephants.rate_bps[i])
        base = int(catalog.base[elephants.cat[i]])
        route = index.row_of(base, move.via)
        if changed is None:
            changed = _lately_changed(index, catalog, moves, now, cfg)
        if route >= 0 and changed[index.hops(route)].any():
            continue  # checked in a later cycle, on samples taken since
        back = index.row_of(base, move.from_via) if move.from_via else -1
        before = min(move.rate_before, move.rate_expected) if move.rate_expected > 0 else move.rate_before
        worse = (
            before > 0
            and not _spent(changes, key, cfg)
            and rate < before * (1 - cfg.revert_margin)
            and _to_blame(catalog, int(elephants.cat[i]), route, dead, measured)
        )
        if worse and back >= 0 and not dead[index.hops(back)].any():
            moves[key] = Move(
                key, move.src, move.dst, move.from_via, now, now, from_via=move.via, settled=True, held=True
            )
            out.append(
                Decision(
                    DecisionKind.REVERT,
                    describe_flow(key),
                    f"{move.via} -> {move.from_via}: measured {rate / 1e9:.2f} Gb/s after the move, "
                    f"{before / 1e9:.2f} before (or planned); held",
                    now,
                    flow=key,
                    from_via=move.via,
                    to_via=move.from_via,
                )
            )
        else:
            moves[key] = replace(move, settled=True)
    return out


def _spent(changes: Mapping[FlowKey, PathChanges], key: FlowKey, cfg: EngineConfig) -> bool:
    """The flow has had every path change the bound allows."""
    made = changes.get(key)
    return bool(cfg.max_path_changes) and made is not None and made.count >= cfg.max_path_changes


def _lately_changed(
    index: LinkIndex, catalog: FlowCatalog, moves: Mapping[FlowKey, Move], now: float, cfg: EngineConfig
) -> np.ndarray:
    """Per link, whether a move onto or off it is under `max_age_s` old."""
    young = [move for move in moves.values() if now - move.moved_at < cfg.max_age_s]
    rows = []
    for move, cat in zip(young, catalog.rows([move.key for move in young]).tolist()):
        if cat >= 0:
            base = int(catalog.base[cat])
            rows += [index.row_of(base, via) for via in (move.via, move.from_via) if via]
    changed = np.zeros(len(index.capacity), dtype=bool)
    changed[index.table()[[r for r in rows if r >= 0]]] = True
    changed[index.pad] = False  # what pads the table's short routes
    return changed


def _to_blame(
    catalog: FlowCatalog, cat: int, row: int, dead: np.ndarray, measured: tuple[np.ndarray, np.ndarray]
) -> bool:
    """The route on route-table row `row` (-1: none) holds back the flow of
    catalog row `cat`: a hop dead, or none measured, or a hop full while
    neither of the flow's NICs is."""
    index = catalog.index
    if row < 0:
        return True
    hops = index.hops(row)
    if dead[hops].any() or not measured[1][hops].any():
        return True
    ends = np.array([catalog.nic_tx[catalog.src[cat]], catalog.nic_rx[catalog.dst[cat]]])
    return _full(index, hops, measured) and not _full(index, ends, measured)


def _full(index: LinkIndex, links: np.ndarray, measured: tuple[np.ndarray, np.ndarray]) -> bool:
    """One of `links` has a fresh sample at FULL of its capacity or more."""
    tx, fresh = measured[0][links], measured[1][links]
    return bool((tx[fresh] >= FULL * index.capacity[links][fresh]).any())
