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

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Mapping

from controller.fabric import Endpoint, Fabric, NicId
from controller.fabric import addressing as ad
from controller.te.jobs import Drains, JobFlow
from controller.te.load import drained, link_name
from controller.te.paths import Layer, assign_greedy, candidate_vias
from controller.te.view import FlowKey, FlowSample, PortSample


@dataclass(frozen=True)
class EngineConfig:
    elephant_fraction: float = 0.1  # of the NIC rate (Hedera)
    max_age_s: float = 1.0
    hysteresis_s: float = 3.0
    max_moves_per_cycle: int = 4
    min_gain: float = 0.05  # utilization points a move must save on the flow's bottleneck
    expire_after_s: float = 3.0  # a moved flow not seen for this long gives its entry back
    incast_fan_in: int = 3
    incast_sender_fraction: float = 0.01  # of the NIC rate: below it a flow is not a sender (an ACK stream, a probe)
    incast_utilization: float = 0.9
    # Senders are metered to this fraction of the receiver NIC's fair share:
    # under 1 so the receiver's queue drains instead of sitting full.
    incast_headroom: float = 0.95
    meter_rate_tolerance: float = 0.1  # a new fair share within this of the old keeps the meter as is


@dataclass(frozen=True)
class Elephant:
    key: FlowKey
    src: NicId
    dst: NicId
    rate_bps: float
    via: str  # the spine it crosses now ("" if unknown)
    demand_bps: float = 0.0


@dataclass(frozen=True)
class Move:
    key: FlowKey
    src: NicId
    dst: NicId
    via: str
    moved_at: float
    last_seen: float


@dataclass(frozen=True)
class Meter:
    """A rate limit on one incast sender's flow at its ingress leaf."""

    key: FlowKey
    src: NicId
    dst: NicId
    rate_bps: float
    last_incast: float  # when its receiver was last seen in incast


@dataclass(frozen=True)
class Decision:
    kind: str  # collision | reroute | incast | expire | link-down
    subject: str
    reason: str
    at: float


@dataclass(frozen=True)
class TeState:
    moves: Mapping[FlowKey, Move] = field(default_factory=dict)
    incasts: frozenset[str] = frozenset()  # destination NICs currently in incast
    collisions: frozenset[str] = frozenset()  # uplinks currently collided
    down: frozenset[str] = frozenset()  # links telemetry reports down
    recent: Mapping[FlowKey, tuple[Elephant, float]] = field(default_factory=dict)  # elephant, last seen
    meters: Mapping[FlowKey, Meter] = field(default_factory=dict)


def _nic(address: str) -> NicId | None:
    try:
        return ad.parse_nic_address(address)
    except ad.AddressError:
        return None


def find_elephants(fabric: Fabric, flows: Mapping[FlowKey, FlowSample], moves: Mapping[FlowKey, Move],
                   now: float, cfg: EngineConfig) -> list[Elephant]:
    threshold = cfg.elephant_fraction * fabric.spec.rates.nic_gbps * 1e9
    out = []
    for key, sample in sorted(flows.items()):
        if now - sample.observed_at > cfg.max_age_s or sample.rate_bps < threshold:
            continue
        src, dst = _nic(key[0]), _nic(key[1])
        if src is None or dst is None:
            continue
        try:
            if not fabric.vias(src, dst):
                continue  # same leaf: nothing to steer
        except KeyError:
            continue  # not a NIC of this fabric
        via = moves[key].via if key in moves else _ingress_next_hop(fabric, sample)
        out.append(Elephant(key, src, dst, sample.rate_bps, via))
    return out


def _ingress_next_hop(fabric: Fabric, sample: FlowSample) -> str:
    """Where the flow's ingress leaf sends it (its spine, in a 2-tier fabric); "" if unreported."""
    if sample.ingress is None:
        return ""
    return fabric.link_at(sample.ingress).peer(sample.ingress.node).node


def estimate_demands(elephants: list[Elephant], nic_bps: float, rounds: int = 10) -> dict[FlowKey, float]:
    """Hedera's demand estimation: senders split their NIC among flows not yet
    limited elsewhere; a receiver asked for more than its NIC gives every flow
    at least the max-min fair share and marks the cut ones receiver-limited.
    Repeated to a fixed point."""
    demand = {e.key: 0.0 for e in elephants}
    limited: set[FlowKey] = set()
    by_src: dict[NicId, list[FlowKey]] = defaultdict(list)
    by_dst: dict[NicId, list[FlowKey]] = defaultdict(list)
    for e in elephants:
        by_src[e.src].append(e.key)
        by_dst[e.dst].append(e.key)
    for _ in range(rounds):
        before = dict(demand)
        for keys in by_src.values():
            free = [k for k in keys if k not in limited]
            left = max(nic_bps - sum(demand[k] for k in keys if k in limited), 0.0)
            for k in free:
                demand[k] = left / len(free)
        for keys in by_dst.values():
            if sum(demand[k] for k in keys) <= nic_bps * (1 + 1e-9):
                continue
            total, pending = nic_bps, sorted(keys, key=lambda k: demand[k])
            while pending and demand[pending[0]] < total / len(pending):
                total -= demand[pending.pop(0)]  # small flows keep what they ask for
            for k in pending:
                demand[k] = total / len(pending)
                limited.add(k)
        if demand == before:
            break
    return demand


def _uplink(fabric: Fabric, e: Elephant, via: str) -> Endpoint:
    return fabric.egress_path(e.src, e.dst, via)[1]


def step(fabric: Fabric, state: TeState, flows: Mapping[FlowKey, FlowSample],
         ports: Mapping[Endpoint, PortSample], now: float, cfg: EngineConfig = EngineConfig(),
         drains: Drains = Drains(), steered: frozenset[tuple[NicId, NicId]] = frozenset()
         ) -> tuple[TeState, list[Decision]]:
    """`steered`: NIC pairs a pin or a placed job already steers. Their flows
    count as load but are never moved: that intent outranks adaptive TE."""
    decisions: list[Decision] = []
    moves = dict(state.moves)
    nic_bps = fabric.spec.rates.nic_gbps * 1e9
    # A link telemetry reports down is treated like a drain: no elephant is
    # placed on it, and those on it must move now, hysteresis or not.
    down = frozenset(link_name(fabric, fabric.link_at(e)) for e, s in ports.items()
                     if not s.up and now - s.observed_at <= cfg.max_age_s)
    decisions += [Decision("link-down", name, "telemetry reports no carrier", now)
                  for name in sorted(down - state.down)]
    drains = Drains(drains.switches, drains.links | down)

    elephants = find_elephants(fabric, flows, moves, now, cfg)
    seen = {e.key for e in elephants}
    for key, move in list(moves.items()):
        if key in seen:
            moves[key] = replace(move, last_seen=now)
        elif now - move.last_seen > cfg.expire_after_s:
            del moves[key]
            decisions.append(Decision("expire", _describe(key), "flow quiet; back to ECMP", now))
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

    collided = _collisions(fabric, elephants)
    decisions += [Decision("collision", name, reason, now) for name, reason in sorted(collided.items())
                  if name not in state.collisions]
    incasts = _incasts(fabric, flows, fresh, now, cfg)
    meters = _meter_incasts(fabric, state.meters, incasts, now, cfg)
    for dst, senders in sorted(incasts.items()):
        if ad.nic_ip(dst) not in state.incasts:
            share = meters[senders[0][0]].rate_bps
            decisions.append(Decision("incast", ad.nic_ip(dst), f"{len(senders)} senders into one NIC; each "
                                      f"metered at its leaf to {share / 1e9:.1f} Gb/s", now))
    decisions += [Decision("expire", ad.nic_ip(dst), "incast over; meters removed", now)
                  for dst in sorted({m.dst for m in state.meters.values()} - {m.dst for m in meters.values()})]
    decisions += _rebalance(fabric, drains, elephants + starved, background, moves, now, cfg, steered)
    _pin_metered(fabric, meters, moves, flows, now)
    new_recent = {k: (e, now if k in seen else state.recent[k][1]) for k, e in recent.items()}
    return TeState(moves, frozenset(ad.nic_ip(d) for d in incasts), frozenset(collided), down,
                   new_recent, meters), decisions


def _rebalance(fabric: Fabric, drains: Drains, elephants: list[Elephant], background: Mapping[Endpoint, float],
               moves: dict[FlowKey, Move], now: float, cfg: EngineConfig,
               steered: frozenset[tuple[NicId, NicId]] = frozenset()) -> list[Decision]:
    """Starts from where the elephants are and moves as few as it takes: while
    a spine-tier link is over capacity by the elephants' demands, move the
    flow whose move lowers its own bottleneck most (by at least min_gain),
    off the hottest link that can be fixed. Updates `moves`; returns the reroutes."""
    layer = Layer(fabric, background)
    via: dict[FlowKey, str] = {}
    unknown = []
    for e in elephants:
        if e.via:
            via[e.key] = e.via
            layer.add(fabric.egress_path(e.src, e.dst, e.via), e.demand_bps)
        else:
            unknown.append(e)
    if unknown:  # the switches did not say where these are: place them min-max
        placed, _ = assign_greedy(fabric, drains, layer, [JobFlow(e.src, e.dst, e.demand_bps) for e in unknown])
        for e, flow in zip(unknown, placed):
            via[e.key] = flow.via
            layer.add(fabric.egress_path(e.src, e.dst, flow.via), e.demand_bps)
    capacity = fabric.capacity_bps
    decisions = []
    movable = [e for e in elephants if (e.src, e.dst) not in steered]
    for e in movable:  # off dead links first: any live path beats none
        old = fabric.egress_path(e.src, e.dst, via[e.key])
        if not drained(fabric, drains, old):
            if e.key[2] == "tcp" and e.key not in moves and _acks_may_die(fabric, drains, e, via[e.key]):
                # The data path survived (the ingress leaf failed over) but the
                # ACKs hash on their own and may cross the dead link: pinning
                # the flow where it is also steers its ACKs back the same way.
                moves[e.key] = Move(e.key, e.src, e.dst, via[e.key], now, now)
                decisions.append(Decision("reroute", _describe(e.key), f"ACKs pinned via {via[e.key]}: "
                                          "their hashed path may cross a dead link", now))
            continue
        live = candidate_vias(fabric, drains, e.src, e.dst)
        if not live:
            continue
        other = min(live, key=lambda v: (layer.peak(fabric.egress_path(e.src, e.dst, v), e.demand_bps), v))
        new = fabric.egress_path(e.src, e.dst, other)
        layer.add(old, -e.demand_bps)
        layer.add(new, e.demand_bps)
        decisions.append(Decision("reroute", _describe(e.key), f"{via[e.key]} -> {other}: path down", now))
        via[e.key] = other
        moves[e.key] = Move(e.key, e.src, e.dst, other, now, now)
    for _ in range(cfg.max_moves_per_cycle):
        hot = sorted((x for x in layer.added if x.port and not fabric.link_at(x).is_access
                      and layer.bps(x) > capacity[x] * (1 + 1e-9)), key=lambda x: -layer.bps(x) / capacity[x])
        best = None
        for link in hot:
            for e in movable:
                if e.key in moves and now - moves[e.key].moved_at < cfg.hysteresis_s:
                    continue
                old = fabric.egress_path(e.src, e.dst, via[e.key])
                if link not in old:
                    continue
                for other in candidate_vias(fabric, drains, e.src, e.dst):
                    if other == via[e.key]:
                        continue
                    new = fabric.egress_path(e.src, e.dst, other)
                    only_old = [x for x in old if x not in new]
                    only_new = [x for x in new if x not in old]
                    gain = layer.peak(only_old) - layer.peak(only_new, e.demand_bps)
                    if gain >= cfg.min_gain and (best is None or gain > best[0]):
                        best = (gain, e, other, old, new)
            if best is not None:
                break
        if best is None:
            break
        gain, e, other, old, new = best
        layer.add(old, -e.demand_bps)
        layer.add(new, e.demand_bps)
        decisions.append(Decision("reroute", _describe(e.key),
                                  f"{via[e.key]} -> {other}: its bottleneck -{gain:.2f} of capacity "
                                  f"(demand {e.demand_bps / 1e9:.0f} Gb/s, measured {e.rate_bps / 1e9:.0f})", now))
        via[e.key] = other
        moves[e.key] = Move(e.key, e.src, e.dst, other, now, now)
    return decisions


def _acks_may_die(fabric: Fabric, drains: Drains, e: Elephant, via: str) -> bool:
    reverse_ok = fabric.egress_path(e.dst, e.src, via)
    return not drained(fabric, drains, reverse_ok) and any(
        drained(fabric, drains, fabric.egress_path(e.dst, e.src, v)) for v in fabric.vias(e.dst, e.src))


def _collisions(fabric: Fabric, elephants: list[Elephant]) -> dict[str, str]:
    """Uplinks carrying two or more elephants whose demands exceed them, where
    a parallel uplink exists: 'switch:port' -> why."""
    by_uplink: dict[Endpoint, list[Elephant]] = defaultdict(list)
    for e in elephants:
        if e.via:
            by_uplink[_uplink(fabric, e, e.via)].append(e)
    out = {}
    for uplink, members in sorted(by_uplink.items()):
        capacity = fabric.link_at(uplink).capacity_bps
        demand = sum(e.demand_bps for e in members)
        if len(members) >= 2 and demand > capacity * 1.05 and len(fabric.vias(members[0].src, members[0].dst)) > 1:
            out[f"{uplink.node}:{uplink.port}"] = f"{len(members)} elephants, demand {demand / capacity:.2f} of the uplink"
    return out


def _incasts(fabric: Fabric, flows: Mapping[FlowKey, FlowSample], ports: Mapping[Endpoint, PortSample],
             now: float, cfg: EngineConfig) -> dict[NicId, list[tuple[FlowKey, NicId]]]:
    """Receivers in incast -> their senders' flows (key, source NIC). The
    offered load is the larger of what the receiver's port sends and what its
    senders' flows measure at their ingress (before any meter of ours)."""
    senders: dict[NicId, list[tuple[FlowKey, NicId]]] = defaultdict(list)
    offered: dict[NicId, float] = defaultdict(float)
    floor = max(cfg.incast_sender_fraction * fabric.spec.rates.nic_gbps * 1e9, 1.0)
    for key, sample in sorted(flows.items()):
        if now - sample.observed_at > cfg.max_age_s or sample.rate_bps < floor:
            continue
        src, dst = _nic(key[0]), _nic(key[1])
        if src is not None and dst is not None and src != dst:
            senders[dst].append((key, src))
            offered[dst] += sample.rate_bps
    out = {}
    for dst, keys in senders.items():
        if len({src for _, src in keys}) < cfg.incast_fan_in:
            continue
        try:
            egress = fabric.attachment(dst)
        except KeyError:
            continue
        port = ports.get(egress)
        load = max(offered[dst], port.tx_bps if port else 0.0)
        if load >= cfg.incast_utilization * fabric.link_at(egress).capacity_bps:
            out[dst] = keys
    return out


def _meter_incasts(fabric: Fabric, old: Mapping[FlowKey, Meter], incasts: Mapping[NicId, list[tuple[FlowKey, NicId]]],
                   now: float, cfg: EngineConfig) -> dict[FlowKey, Meter]:
    """Every sender's flow into a receiver in incast metered to its share of the
    receiver's NIC. A share that barely changed keeps the old rate (no meter
    churn on noise); a meter whose receiver left incast stays for
    `expire_after_s`, so an incast that flickers does not flap its meters."""
    meters = {}
    for dst, keys in incasts.items():
        share = cfg.incast_headroom * fabric.access_link(dst).capacity_bps / len(keys)
        for key, src in keys:
            before = old.get(key)
            rate = before.rate_bps if before and abs(before.rate_bps - share) <= cfg.meter_rate_tolerance * share \
                else share
            meters[key] = Meter(key, src, dst, rate, now)
    for key, meter in old.items():
        if key not in meters and now - meter.last_incast <= cfg.expire_after_s:
            meters[key] = meter
    return meters


def _pin_metered(fabric: Fabric, meters: Mapping[FlowKey, Meter], moves: dict[FlowKey, Move],
                 flows: Mapping[FlowKey, FlowSample], now: float) -> None:
    """A meter rides on an entry at the flow's ingress leaf, and an entry there
    must also say where the flow goes: a metered flow that crosses spines and
    was not moved is pinned where the switch already sends it."""
    for key, meter in meters.items():
        sample = flows.get(key)
        if key in moves or sample is None:
            continue
        via = _ingress_next_hop(fabric, sample)
        if via in fabric.vias(meter.src, meter.dst):
            moves[key] = Move(key, meter.src, meter.dst, via, now, now)


def _describe(key: FlowKey) -> str:
    src, dst, proto, sport, dport = key
    return f"{src}:{sport}->{dst}:{dport}/{proto or 'ip'}"
