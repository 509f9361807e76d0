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

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from controller.fabric import Endpoint, Fabric, NicId
from controller.fabric import addressing as ad
from controller.te.engine.elephants import find_elephants
from controller.te.engine.incast import find_incasts, meter_incasts, pin_metered
from controller.te.engine.links import LinkIndex, Routes, link_index
from controller.te.engine.rebalance import rebalance
from controller.te.engine.state import (
    Decision,
    DecisionKind,
    Elephant,
    EngineConfig,
    Move,
    Seen,
    TeState,
    describe_flow,
)
from controller.te.jobs import Drains
from controller.te.load import link_name
from controller.te.view import FlowKey, FlowSample, PortSample


def step(
    fabric: Fabric,
    state: TeState,
    flows: Mapping[FlowKey, FlowSample],
    ports: Mapping[Endpoint, PortSample],
    now: float,
    cfg: EngineConfig = EngineConfig(),
    drains: Drains = Drains(),
    steered: frozenset[tuple[NicId, NicId]] = frozenset(),
    jobs: frozenset[tuple[NicId, NicId]] = frozenset(),
) -> tuple[TeState, list[Decision]]:
    """`steered`: NIC pairs an operator pins. Their flows count as load but
    are never moved: that intent outranks adaptive TE (a move made before the
    pin is given back). `jobs`: NIC pairs of placed jobs' flows. TE may
    rebalance them among their spines, but never meters them as incast
    senders: a job's all-to-all converges on every NIC by design; and their
    fresh records share their NICs in the demand estimate at any rate."""
    index = link_index(fabric)
    decisions: list[Decision] = []
    moves = dict(state.moves)
    # A link telemetry reports down is treated like a drain: no elephant is
    # placed on it, and those on it must move now, hysteresis or not.
    down = frozenset(
        link_name(fabric, fabric.link_at(e))
        for e, s in ports.items()
        if not s.up and now - s.observed_at <= cfg.max_age_s
    )
    decisions += [
        Decision(DecisionKind.LINK_DOWN, name, "telemetry reports no carrier", now)
        for name in sorted(down - state.down)
    ]
    dead = index.dead(Drains(drains.switches, drains.links | down))

    before = state.recent
    elephants, routes = find_elephants(fabric, index, flows, moves, before, now, cfg, jobs)
    seen = {e.key for e in elephants}
    for key, move in list(moves.items()):
        if (move.src, move.dst) in steered:
            del moves[key]
            decisions.append(Decision(DecisionKind.EXPIRE, describe_flow(key), "pinned by intent; TE lets go", now))
            continue
        if key in seen:
            continue
        last_seen = max(move.last_seen, state.recent[key].at if key in state.recent else move.last_seen)
        if now - last_seen > cfg.expire_after_s:
            del moves[key]
            decisions.append(Decision(DecisionKind.EXPIRE, describe_flow(key), "flow quiet; back to ECMP", now))
    fresh = {e: s for e, s in ports.items() if now - s.observed_at <= cfg.max_age_s}
    tx, port_at = _port_load(index, fresh)
    explained, folded_at = _explained(index, flows, elephants, routes, port_at, state, cfg)
    # Background is believed only once smoothed: the residual's EWMA starts
    # from nothing, not from its first sample, which is two independent
    # noisy readings' difference (up to 60% of a full link under ±30% noise).
    before_residual = state.residual if state.residual is not None and len(state.residual) == len(tx) else 0.0
    # Unclamped: noise averages out under the EWMA only if its sign is kept.
    # No port sample: no evidence of background.
    raw = np.where(np.isfinite(port_at), tx - explained, 0.0)
    residual = (1 - cfg.background_smoothing) * before_residual + cfg.background_smoothing * raw
    background = np.where(residual > cfg.background_floor * index.capacity, residual, 0.0)
    decisions += _settle(dead, elephants, routes, moves, now, cfg)
    # Elephants seen lately. A flow black-holed by a failure measures ~0 at
    # once and stops looking like an elephant; it is exactly the one to move.
    recent = dict(before)
    for key in before.keys() - seen:
        if now - before[key].at > cfg.expire_after_s:
            del recent[key]
    recent.update({e.key: Seen(e, now) for e in elephants})
    starved, starved_routes = [], []
    if dead.any():
        for key in recent.keys() - seen:
            e = recent[key].elephant
            if key in moves:
                e = e._replace(via=moves[key].via)  # where it is now, if we moved it
            found = index.routes(e.src, e.dst)
            if e.via in found.position and dead[found.hops[found.position[e.via]]].any():
                starved.append(e)
                starved_routes.append(found)

    incasts = find_incasts(fabric, flows, fresh, now, cfg, jobs)
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
    # A metered flow carries what its meter lets through, whatever its record
    # (counted before the meter) says; TE may move it to relieve others.
    placed = [
        e._replace(rate_bps=min(e.rate_bps, meters[e.key].rate_bps)) if e.key in meters else e
        for e in elephants + starved
    ]
    outcome = rebalance(
        fabric,
        index,
        dead,
        placed,
        routes + starved_routes,
        background,
        tx,
        moves,
        now,
        cfg,
        steered,
        frozenset(meters),
    )
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
    pin_metered(fabric, meters, moves, flows, now)
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


def _port_load(index: LinkIndex, ports: Mapping[Endpoint, PortSample]) -> tuple[np.ndarray, np.ndarray]:
    """Per egress, what its port reports sending (0 if unreported), and when
    that sample was taken (-inf if unreported)."""
    tx = np.zeros(len(index.capacity))
    at = np.full(len(index.capacity), -np.inf)
    for egress, sample in ports.items():
        i = index.ids.get(egress)
        if i is not None:
            tx[i] = sample.tx_bps
            at[i] = sample.observed_at
    return tx, at


def _explained(
    index: LinkIndex,
    flows: Mapping[FlowKey, FlowSample],
    elephants: list[Elephant],
    routes: list[Routes],
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
    rows = [r.base + r.position[e.via] for e, r in zip(elephants, routes) if e.via in r.position]
    now_load = np.zeros(len(index.capacity))
    if rows:
        # This sample's rates, not the smoothed ones: the same instant as the port counters.
        rates = [flows[e.key].rate_bps for e, r in zip(elephants, routes) if e.via in r.position]
        now_load = index.loads(np.array(rows, dtype=np.int64), np.array(rates))
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
    dead: np.ndarray,
    elephants: list[Elephant],
    routes: list[Routes],
    moves: dict[FlowKey, Move],
    now: float,
    cfg: EngineConfig,
) -> list[Decision]:
    """Once a move has had `hysteresis_s` to take effect, it is checked once
    against the rate the flow had before: a flow that measures worse goes
    back where it was and is held there. TE never leaves a flow worse off
    than the hash did."""
    out = []
    for e, found in zip(elephants, routes):
        move = moves.get(e.key)
        if move is None or move.settled or now - move.moved_at < cfg.hysteresis_s:
            continue
        back = found.position.get(move.from_via)
        worse = move.rate_before > 0 and e.rate_bps < move.rate_before * (1 - cfg.revert_margin)
        if worse and back is not None and not dead[found.hops[back]].any():
            moves[e.key] = Move(
                e.key, e.src, e.dst, move.from_via, now, now, from_via=move.via, settled=True, held=True
            )
            out.append(
                Decision(
                    DecisionKind.REVERT,
                    describe_flow(e.key),
                    f"{move.via} -> {move.from_via}: measured {e.rate_bps / 1e9:.0f} Gb/s after the move, "
                    f"{move.rate_before / 1e9:.0f} before; held",
                    now,
                )
            )
        else:
            moves[e.key] = replace(move, settled=True)
    return out
