"""Elephants and their demand: which measured flows are big enough to steer,
what each would send if the network were not in its way, and which uplinks
their demands collide on. Pure."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from controller.fabric import Endpoint, Fabric, NicId
from controller.te.engine.state import Elephant, EngineConfig, Move, nic_of
from controller.te.view import FlowKey, FlowSample


def find_elephants(
    fabric: Fabric, flows: Mapping[FlowKey, FlowSample], moves: Mapping[FlowKey, Move], now: float, cfg: EngineConfig
) -> list[Elephant]:
    threshold = cfg.elephant_fraction * fabric.spec.rates.nic_gbps * 1e9
    out = []
    for key, sample in sorted(flows.items()):
        if now - sample.observed_at > cfg.max_age_s or sample.rate_bps < threshold:
            continue
        src, dst = nic_of(key[0]), nic_of(key[1])
        if src is None or dst is None:
            continue
        try:
            if not fabric.vias(src, dst):
                continue  # same leaf: nothing to steer
        except KeyError:
            continue  # not a NIC of this fabric
        via = moves[key].via if key in moves else ingress_next_hop(fabric, sample)
        out.append(Elephant(key, src, dst, sample.rate_bps, via))
    return out


def ingress_next_hop(fabric: Fabric, sample: FlowSample) -> str:
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


def uplink_of(fabric: Fabric, e: Elephant, via: str) -> Endpoint:
    return fabric.egress_path(e.src, e.dst, via)[1]


def collisions(fabric: Fabric, elephants: list[Elephant]) -> dict[str, str]:
    """Uplinks carrying two or more elephants whose demands exceed them, where
    a parallel uplink exists: 'switch:port' -> why."""
    by_uplink: dict[Endpoint, list[Elephant]] = defaultdict(list)
    for e in elephants:
        if e.via:
            by_uplink[uplink_of(fabric, e, e.via)].append(e)
    out = {}
    for uplink, members in sorted(by_uplink.items()):
        capacity = fabric.link_at(uplink).capacity_bps
        demand = sum(e.demand_bps for e in members)
        if len(members) >= 2 and demand > capacity * 1.05 and len(fabric.vias(members[0].src, members[0].dst)) > 1:
            out[f"{uplink.node}:{uplink.port}"] = (
                f"{len(members)} elephants, demand {demand / capacity:.2f} of the uplink"
            )
    return out
