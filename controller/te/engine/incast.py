"""Incast: many senders converging on one NIC beyond its capacity, each
metered at its ingress leaf to a fair share of that NIC. Pure."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from controller.fabric import Endpoint, Fabric, NicId
from controller.te.engine.links import link_index
from controller.te.engine.state import EngineConfig, Meter, Move, nic_of
from controller.te.view import FlowKey, FlowSample, PortSample


def find_incasts(
    fabric: Fabric,
    flows: Mapping[FlowKey, FlowSample],
    ports: Mapping[Endpoint, PortSample],
    now: float,
    cfg: EngineConfig,
    jobs: frozenset[tuple[NicId, NicId]] = frozenset(),
) -> dict[NicId, list[tuple[FlowKey, NicId]]]:
    """Receivers in incast -> their senders' flows (key, source NIC). The
    offered load is the larger of what the receiver's port sends and what its
    senders' flows measure at their ingress (before any meter of ours). A
    placed job's own flows (an all-to-all converges on every NIC by design)
    count as load but are never metered as senders."""
    floor = max(cfg.incast_sender_fraction * fabric.spec.rates.nic_gbps * 1e9, 1.0)
    oldest = now - cfg.max_age_s
    by_address: dict[str, list[FlowKey]] = defaultdict(list)
    for key, sample in flows.items():
        if sample.observed_at >= oldest and sample.rate_bps >= floor:
            by_address[key[1]].append(key)
    senders: dict[NicId, list[tuple[FlowKey, NicId]]] = defaultdict(list)
    offered: dict[NicId, float] = defaultdict(float)
    for address, keys in by_address.items():
        if len(keys) < cfg.incast_fan_in:
            continue  # most receivers: parsed no further
        dst = nic_of(address)
        for key in keys:
            src = nic_of(key[0])
            if src is not None and dst is not None and src != dst:
                if (src, dst) not in jobs:
                    senders[dst].append((key, src))
                offered[dst] += flows[key].rate_bps
    out = {}
    for dst, flows_in in senders.items():
        if len({src for _, src in flows_in}) < cfg.incast_fan_in:
            continue
        try:
            egress = fabric.attachment(dst)
        except KeyError:
            continue
        port = ports.get(egress)
        load = max(offered[dst], port.tx_bps if port else 0.0)
        if load >= cfg.incast_utilization * fabric.link_at(egress).capacity_bps:
            out[dst] = sorted(flows_in)
    return out


def meter_incasts(
    fabric: Fabric,
    old: Mapping[FlowKey, Meter],
    incasts: Mapping[NicId, list[tuple[FlowKey, NicId]]],
    now: float,
    cfg: EngineConfig,
) -> dict[FlowKey, Meter]:
    """Every sender's flow into a receiver in incast metered to its share of the
    receiver's NIC. A share that barely changed keeps the old rate (no meter
    churn on noise); a meter whose receiver left incast stays for
    `expire_after_s`, so an incast that flickers does not flap its meters."""
    meters = {}
    for dst, keys in incasts.items():
        share = cfg.incast_headroom * fabric.access_link(dst).capacity_bps / len(keys)
        for key, src in keys:
            before = old.get(key)
            rate = (
                before.rate_bps
                if before and abs(before.rate_bps - share) <= cfg.meter_rate_tolerance * share
                else share
            )
            meters[key] = Meter(key, src, dst, rate, now)
    for key, meter in old.items():
        if key not in meters and now - meter.last_incast <= cfg.expire_after_s:
            meters[key] = meter
    return meters


def pin_metered(
    fabric: Fabric,
    meters: Mapping[FlowKey, Meter],
    moves: dict[FlowKey, Move],
    flows: Mapping[FlowKey, FlowSample],
    now: float,
) -> None:
    """A meter rides on an entry at the flow's ingress leaf, and an entry there
    must also say where the flow goes: a metered flow that crosses spines and
    was not moved is pinned where the switch already sends it."""
    for key, meter in meters.items():
        sample = flows.get(key)
        if key in moves or sample is None:
            continue
        index = link_index(fabric)
        via = index.via_of(index.routes(meter.src, meter.dst), sample.ingress)
        if via:
            moves[key] = Move(key, meter.src, meter.dst, via, now, now)
