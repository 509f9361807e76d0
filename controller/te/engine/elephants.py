"""Elephants and their demand: which measured flows are big enough to steer,
and what each would send if the network were not in its way, bounded by
what any of its paths can carry. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from controller.fabric import Fabric, NicId
from controller.te.demand import nic_limited
from controller.te.engine.links import LinkIndex, Routes
from controller.te.engine.state import Elephant, EngineConfig, Move, Seen, nic_of
from controller.te.view import FlowKey, FlowSample


def find_elephants(
    fabric: Fabric,
    index: LinkIndex,
    flows: Mapping[FlowKey, FlowSample],
    moves: Mapping[FlowKey, Move],
    recent: Mapping[FlowKey, Seen],
    now: float,
    cfg: EngineConfig,
    planned: frozenset[tuple[NicId, NicId]] = frozenset(),
) -> tuple[list[Elephant], list[Routes]]:
    """Fresh flow records (stale data is never acted on) at or above
    `elephant_fraction` of the NIC rate, between NICs of this fabric on
    different leaves: the ones an overlay entry can steer; with their routes.
    Their rates are smoothed with what `recent` saw (one noisy sample must
    not move a flow) and their demands are Hedera's, bounded by the widest
    route's narrowest hop: a demand no path can carry is no demand.

    Hedera splits each NIC among every flow it sends or receives, the mice
    too (a sender above `incast_sender_fraction` of the NIC): split among the
    elephants alone, an all-to-all NIC's demands jump each time one of its
    many similar flows crosses the elephant threshold, and the jumps read as
    collisions that are not there. `planned`: NIC pairs placed jobs send
    between; a fresh record of one shares its NICs at any rate (an elastic
    flow of a collective starved now is fast a second later), while a job
    with no records (idle, or between iterations) takes no share."""
    # Hedera's threshold is a share of the NIC; where every path is narrower
    # than a NIC, of what the flow's widest path carries: a flow taking a
    # tenth of its path is an elephant there, however wide its NIC.
    nic_bps = fabric.spec.rates.nic_gbps * 1e9
    sender_floor = min(cfg.incast_sender_fraction * nic_bps, cfg.elephant_fraction * float(index.capacity.min()))
    oldest = now - cfg.max_age_s
    a = cfg.smoothing
    senders: list[tuple[NicId, NicId]] = []
    seen: list[tuple[FlowKey, NicId, NicId, float, str]] = []
    sender_of: list[int] = []  # per elephant, its row in `senders`
    routes = []
    for key, sample in flows.items():
        if sample.observed_at < oldest or (sample.rate_bps < sender_floor and not planned):
            continue
        src, dst = nic_of(key[0]), nic_of(key[1])
        if src is None or dst is None:
            continue
        if sample.rate_bps < sender_floor and (src, dst) not in planned:
            continue
        try:
            found = index.routes(src, dst)
        except KeyError:
            continue  # not a NIC of this fabric
        senders.append((src, dst))
        if not found.vias:
            continue  # same leaf: nothing to steer
        last = recent.get(key)
        rate = sample.rate_bps if last is None else (1 - a) * last.elephant.rate_bps + a * sample.rate_bps
        # Hysteresis: a known elephant stays one until its smoothed rate falls
        # to half the threshold. Behind an oversubscribed core a flow's fair
        # share sits near the threshold (1/7 of a NIC at 7:1), and noisy
        # samples dropping it in and out each cycle swing every path's load
        # by demand, which reads as collisions that move flows forever.
        threshold = cfg.elephant_fraction * min(nic_bps, found.bottleneck_bps)
        if (rate < threshold / 2) if last is not None else (sample.rate_bps < threshold):
            continue
        move = moves.get(key)
        via = move.via if move is not None else index.via_of(found, sample.ingress, sample.transit)
        seen.append((key, src, dst, rate, via))
        sender_of.append(len(senders) - 1)
        routes.append(found)
    shares = nic_limited([s for s, _ in senders], [d for _, d in senders], nic_bps)
    demands = shares[np.array(sender_of, dtype=np.int64)].tolist() if seen else []
    out = [Elephant(*s, min(d, r.bottleneck_bps)) for s, d, r in zip(seen, demands, routes)]
    return out, routes


def estimate_demands(elephants: Sequence[Elephant], nic_bps: float, rounds: int = 10) -> dict[FlowKey, float]:
    """Hedera's demand estimation: senders split their NIC among flows not yet
    limited elsewhere; a receiver asked for more than its NIC gives every flow
    at least the max-min fair share and marks the cut ones receiver-limited.
    Repeated to a fixed point."""
    demands = nic_limited([e.src for e in elephants], [e.dst for e in elephants], nic_bps, rounds)
    return {e.key: float(d) for e, d in zip(elephants, demands)}
