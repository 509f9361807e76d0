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

from controller.fabric import Endpoint, Fabric, NicId
from controller.fabric import addressing as ad
from controller.te.engine.elephants import collisions, estimate_demands, find_elephants
from controller.te.engine.incast import find_incasts, meter_incasts, pin_metered
from controller.te.engine.rebalance import rebalance
from controller.te.engine.state import Decision, DecisionKind, EngineConfig, TeState, describe_flow
from controller.te.jobs import Drains
from controller.te.load import drained, link_name
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
) -> tuple[TeState, list[Decision]]:
    """`steered`: NIC pairs a pin or a placed job already steers. Their flows
    count as load but are never moved: that intent outranks adaptive TE."""
    decisions: list[Decision] = []
    moves = dict(state.moves)
    nic_bps = fabric.spec.rates.nic_gbps * 1e9
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
    drains = Drains(drains.switches, drains.links | down)

    elephants = find_elephants(fabric, flows, moves, now, cfg)
    seen = {e.key for e in elephants}
    for key, move in list(moves.items()):
        if key in seen:
            moves[key] = replace(move, last_seen=now)
        elif now - move.last_seen > cfg.expire_after_s:
            del moves[key]
            decisions.append(Decision(DecisionKind.EXPIRE, describe_flow(key), "flow quiet; back to ECMP", now))
    demands = estimate_demands(elephants, nic_bps)
    elephants = [replace(e, demand_bps=demands[e.key]) for e in elephants]
    # Elephants seen lately. A flow black-holed by a failure measures ~0 at
    # once and stops looking like an elephant; it is exactly the one to move.
    recent = {k: e for k, (e, seen_at) in state.recent.items() if now - seen_at <= cfg.expire_after_s}
    recent.update({e.key: e for e in elephants})
    starved = []
    for key, e in recent.items():
        if key in seen or not down:
            continue
        e = replace(e, via=moves[key].via) if key in moves else e  # where it is now, if we moved it
        if e.via and drained(fabric, Drains(links=down), fabric.egress_path(e.src, e.dst, e.via)):
            starved.append(e)

    # Background: measured load minus what the elephants themselves send.
    fresh = {e: s for e, s in ports.items() if now - s.observed_at <= cfg.max_age_s}
    background = {e: s.tx_bps for e, s in fresh.items()}
    for e in elephants:
        if e.via:
            for egress in fabric.egress_path(e.src, e.dst, e.via):
                if egress in background:
                    background[egress] = max(background[egress] - e.rate_bps, 0.0)

    collided = collisions(fabric, elephants)
    decisions += [
        Decision(DecisionKind.COLLISION, name, reason, now)
        for name, reason in sorted(collided.items())
        if name not in state.collisions
    ]
    incasts = find_incasts(fabric, flows, fresh, now, cfg)
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
    decisions += rebalance(fabric, drains, elephants + starved, background, moves, now, cfg, steered)
    pin_metered(fabric, meters, moves, flows, now)
    new_recent = {k: (e, now if k in seen else state.recent[k][1]) for k, e in recent.items()}
    return TeState(
        moves, frozenset(ad.nic_ip(d) for d in incasts), frozenset(collided), down, new_recent, meters
    ), decisions
