"""The adaptive TE engine: telemetry in, elephant moves and decisions out. Pure.

One `step` per cycle (the TE runner calls it as each telemetry batch lands, 50-200 ms apart):

1. Elephants: fresh flow records (younger than `max_age_s`; stale data is
   never acted on) at >= `elephant_fraction` of the NIC rate, crossing spines.
2. Demand: what each elephant would send if the network were not in its way
   (Hedera's estimator: senders share their NIC, receivers cap what they can
   take, iterated to a fixed point). A collided TCP flow's *measured* rate is
   half its demand; moving on measurements alone would under-correct.
3. Collisions: two or more elephants on one uplink whose demands exceed it
   while a parallel uplink has room.
4. Placement: all elephants min-max over the spines (the same greedy +
   improvement as job placement) on top of the measured non-elephant load.
   Moves are capped per cycle, a moved flow is left alone for
   `hysteresis_s`, and a move must lower the flow's predicted bottleneck by
   `min_gain` of capacity: noisy telemetry cannot make flows flap.
5. Incast: many senders converging on one NIC beyond its capacity. Their
   demands are the NIC's fair share each, which spreads them over the spines
   instead of piling them onto one (protecting bystanders there), and each
   sender's flow is metered at its ingress leaf to `incast_headroom` of that
   fair share. The excess is dropped at the edge, before it takes spine and
   downlink capacity, so the receiver's queue drains and every sender gets
   the same share (a drop-tail queue under overload is not fair: it favours
   whichever port the switch serves first). Flow records are counted before
   the meter, so a metered incast still measures as one and its meters stay
   until it is over for `expire_after_s`.

Moves are soft state, not intent: they are rebuilt from the switches'
tables (their cookie says "te") after a restart, and expire when the flow
goes quiet.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

import numpy as np

from controller.fabric import Endpoint, Fabric, NicId
from controller.fabric import addressing as ad
from controller.te.engine.catalog import FlowCatalog, flow_catalog
from controller.te.engine.elephants import find_elephants
from controller.te.engine.frames import FlowFrame, PortFrame, frames
from controller.te.engine.incast import find_incasts, meter_incasts, pin_metered
from controller.te.engine.links import LinkIndex, link_index
from controller.te.engine.rebalance import rebalance
from controller.te.engine.state import (
    Decision,
    DecisionKind,
    Elephants,
    EngineConfig,
    Move,
    Recent,
    TeState,
    describe_flow,
)
from controller.te.jobs import Drains
from controller.te.load import link_name
from controller.te.view import FlowKey, FlowSample, PortSample


def step(
    fabric: Fabric,
    state: TeState,
    flows: FlowFrame | Mapping[FlowKey, FlowSample],
    ports: PortFrame | Mapping[Endpoint, PortSample],
    now: float,
    cfg: EngineConfig = EngineConfig(),
    drains: Drains = Drains(),
    steered: Collection[tuple[NicId, NicId]] = frozenset(),
    jobs: Collection[tuple[NicId, NicId]] = frozenset(),
) -> tuple[TeState, list[Decision]]:
    """`flows`, `ports`: telemetry as frames, or as the LinkView keeps it.
    `steered`: NIC pairs an operator pins. Their flows count as load but
    are never moved: that intent outranks adaptive TE (a move made before the
    pin is given back). `jobs`: NIC pairs of placed jobs' flows. TE may
    rebalance them among their spines, but never meters them as incast
    senders: a job's all-to-all converges on every NIC by design; and their
    fresh records share their NICs in the demand estimate at any rate."""
    index = link_index(fabric)
    catalog = flow_catalog(fabric)
    catalog.trim()
    flows, ports = frames(index, flows, ports)
    cat = catalog.rows(flows.keys)
    decisions: list[Decision] = []
    moves = dict(state.moves)
    # A link telemetry reports down is treated like a drain: no elephant is
    # placed on it, and those on it must move now, hysteresis or not.
    fresh = now - ports.observed_at <= cfg.max_age_s
    down = frozenset(
        link_name(fabric, fabric.link_at(index.egresses[i])) for i in np.flatnonzero(fresh & ~ports.up).tolist()
    )
    decisions += [
        Decision(DecisionKind.LINK_DOWN, name, "telemetry reports no carrier", now)
        for name in sorted(down - state.down)
    ]
    dead = index.dead(Drains(drains.switches, drains.links | down))

    before = state.recent
    if before.generation != catalog.generation:  # the catalog started over: where the flows are now
        before = replace(before, cat=catalog.rows(before.keys), generation=catalog.generation)
    elephants, last = find_elephants(catalog, flows, cat, moves, before, now, cfg, jobs)
    recent, kept = _recent(before, elephants, last, now, cfg, catalog.generation)
    seen = recent.find(catalog.rows(list(moves)))
    for (key, move), r in zip(list(moves.items()), seen.tolist()):
        if (move.src, move.dst) in steered:
            del moves[key]
            decisions.append(Decision(DecisionKind.EXPIRE, describe_flow(key), "pinned by intent; TE lets go", now))
            continue
        last_seen = move.last_seen if r < 0 else max(move.last_seen, float(recent.at[r]))
        if now - last_seen > cfg.expire_after_s:
            del moves[key]
            decisions.append(Decision(DecisionKind.EXPIRE, describe_flow(key), "flow quiet; back to ECMP", now))
    tx = np.where(fresh, ports.tx_bps, 0.0)
    port_at = np.where(fresh, ports.observed_at, -np.inf)
    explained, folded_at = _explained(index, elephants, port_at, state, cfg)
    # Background is believed only once smoothed: the residual's EWMA starts
    # from nothing, not from its first sample, which is two independent
    # noisy readings' difference (up to 60% of a full link under ±30% noise).
    before_residual = state.residual if state.residual is not None and len(state.residual) == len(tx) else 0.0
    # Unclamped: noise averages out under the EWMA only if its sign is kept.
    # No port sample: no evidence of background.
    raw = np.where(np.isfinite(port_at), tx - explained, 0.0)
    residual = (1 - cfg.background_smoothing) * before_residual + cfg.background_smoothing * raw
    background = np.where(residual > cfg.background_floor * index.capacity, residual, 0.0)
    decisions += _settle(index, catalog, dead, elephants, moves, now, cfg)
    starved = _starved(index, catalog, dead, recent, kept, moves) if dead.any() else None

    incasts = find_incasts(catalog, flows, cat, PortFrame(tx, port_at, ports.up), now, cfg, jobs)
    meters = meter_incasts(fabric, state.meters, incasts, now, cfg)
    for dst, senders in sorted(incasts.items()):
        if ad.nic_ip(dst) not in state.incasts:
            share = meters[senders[0][0]].rate_bps
            decisions.append(
                Decision(
                    DecisionKind.INCAST,
                    ad.nic_ip(dst),
                    f"{len(senders)} senders into one NIC; each metered at its leaf to {share / 1e9:.1f} Gb/s",
                    now,
                )
            )
    decisions += [
        Decision(DecisionKind.EXPIRE, ad.nic_ip(dst), "incast over; meters removed", now)
        for dst in sorted({m.dst for m in state.meters.values()} - {m.dst for m in meters.values()})
    ]
    placed = elephants if starved is None else elephants + starved
    # A metered flow carries what its meter lets through, whatever its record
    # (counted before the meter) says; TE may move it to relieve others.
    if meters:
        rate = placed.rate_bps.copy()
        for i, meter in zip(placed.find(catalog.rows(list(meters))).tolist(), meters.values()):
            if i >= 0:
                rate[i] = min(rate[i], meter.rate_bps)
        placed = replace(placed, rate_bps=rate)
    outcome = rebalance(index, catalog, dead, placed, background, tx, moves, now, cfg, steered, meters.keys())
    # An unfixable link stays unfixable while it stays over, until a move
    # actually relieves it: one decision per onset, not one each time a noisy
    # verdict wavers.
    unfixable = outcome.unfixable.keys() | {
        n for n in state.unfixable & outcome.collisions.keys() if n not in outcome.relieved
    }
    collisions = outcome.collisions.keys() - unfixable
    why = {**outcome.collisions, **outcome.unfixable}
    decisions += [
        Decision(DecisionKind.COLLISION, name, why[name], now) for name in sorted(collisions - state.collisions)
    ]
    decisions += [
        Decision(DecisionKind.UNFIXABLE, name, why[name], now) for name in sorted(unfixable - state.unfixable)
    ]
    decisions += outcome.decisions
    pin_metered(catalog, meters, moves, flows, now)
    return TeState(
        moves,
        frozenset(ad.nic_ip(d) for d in incasts),
        frozenset(collisions),
        down,
        recent,
        meters,
        frozenset(unfixable),
        residual,
        explained,
        folded_at,
    ), decisions


def _recent(
    before: Recent, elephants: Elephants, last: np.ndarray, now: float, cfg: EngineConfig, generation: int
) -> tuple[Recent, int]:
    """The elephants seen lately: those of this cycle, and those seen before
    and not for `expire_after_s`; and how many of the latter (they come first)."""
    kept = np.ones(len(before), dtype=bool)
    kept[last[last >= 0]] = False
    kept &= now - before.at <= cfg.expire_after_s
    old = np.flatnonzero(kept)
    recent = Recent(
        [before.keys[i] for i in old.tolist()] + elephants.keys,
        np.concatenate([before.rate_bps[old], elephants.rate_bps]),
        np.concatenate([before.demand_bps[old], elephants.demand_bps]),
        np.concatenate([before.at[old], np.full(len(elephants), now)]),
        np.concatenate([before.row[old], elephants.row]),
        np.concatenate([before.cat[old], elephants.cat]),
        generation,
    )
    return recent, len(old)


def _starved(
    index: LinkIndex, catalog: FlowCatalog, dead: np.ndarray, recent: Recent, kept: int, moves: Mapping[FlowKey, Move]
) -> Elephants:
    """Elephants seen lately and not now whose path crosses a dead link: a
    flow black-holed by a failure measures ~0 at once and stops looking
    like an elephant; it is exactly the one to move."""
    row, cat = recent.row[:kept].copy(), recent.cat[:kept]
    for r, move in zip(recent.find(catalog.rows(list(moves))).tolist(), moves.values()):
        if 0 <= r < kept and cat[r] >= 0:
            row[r] = index.row_of(int(catalog.base[cat[r]]), move.via)  # where it is now: we moved it
    starved = np.flatnonzero((row >= 0) & (cat >= 0))
    starved = starved[dead[index.table()[row[starved]]].any(axis=1)]
    return Elephants(
        [recent.keys[i] for i in starved.tolist()],
        np.full(len(starved), -1),
        cat[starved],
        recent.rate_bps[starved],
        np.zeros(len(starved)),
        recent.demand_bps[starved],
        row[starved],
    )


def _explained(
    index: LinkIndex,
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
    explained by its own."""
    located = elephants.row >= 0
    # This sample's rates, not the smoothed ones: the same instant as the port counters.
    now_load = index.loads(elephants.row[located], elephants.raw_bps[located])
    fresh = np.isfinite(port_at)
    if state.explained is None or state.port_at is None or len(state.explained) != len(now_load):
        return np.where(fresh, now_load, 0.0), port_at
    a = cfg.port_smoothing
    new = port_at > state.port_at  # a port sample the LinkView has folded in since the last cycle
    first = new & ~np.isfinite(state.port_at)
    explained = np.where(first, now_load, np.where(new, a * now_load + (1 - a) * state.explained, state.explained))
    # A port with no fresh sample keeps its filter's state, as the LinkView keeps its last rate.
    return explained, np.where(fresh, port_at, state.port_at)


def _settle(
    index: LinkIndex,
    catalog: FlowCatalog,
    dead: np.ndarray,
    elephants: Elephants,
    moves: dict[FlowKey, Move],
    now: float,
    cfg: EngineConfig,
) -> list[Decision]:
    """Once a move has had `hysteresis_s` to take effect, it is checked once
    against the rate the flow had before: a flow that measures worse goes
    back where it was and is held there. TE never leaves a flow worse off
    than the hash did."""
    out = []
    for (key, move), i in zip(list(moves.items()), elephants.find(catalog.rows(list(moves))).tolist()):
        if i < 0 or move.settled or now - move.moved_at < cfg.hysteresis_s:
            continue
        rate = float(elephants.rate_bps[i])
        back = index.row_of(int(catalog.base[elephants.cat[i]]), move.from_via) if move.from_via else -1
        worse = move.rate_before > 0 and rate < move.rate_before * (1 - cfg.revert_margin)
        if worse and back >= 0 and not dead[index.hops(back)].any():
            moves[key] = Move(
                key, move.src, move.dst, move.from_via, now, now, from_via=move.via, settled=True, held=True
            )
            out.append(
                Decision(
                    DecisionKind.REVERT,
                    describe_flow(key),
                    f"{move.via} -> {move.from_via}: measured {rate / 1e9:.0f} Gb/s after the move, "
                    f"{move.rate_before / 1e9:.0f} before; held",
                    now,
                )
            )
        else:
            moves[key] = replace(move, settled=True)
    return out
