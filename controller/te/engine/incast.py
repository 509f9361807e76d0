"""Incast: many senders converging on one NIC beyond its capacity, each
metered at its ingress leaf to a fair share of that NIC. Pure."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np

from controller.fabric import Fabric, NicId
from controller.te.engine.catalog import FlowCatalog
from controller.te.engine.frames import FlowFrame
from controller.te.engine.state import EngineConfig, Meter, Move
from controller.te.view import FlowKey


def find_incasts(
    catalog: FlowCatalog,
    flows: FlowFrame,
    cat: np.ndarray,
    now: float,
    cfg: EngineConfig,
    jobs: Collection[tuple[NicId, NicId]] = frozenset(),
) -> dict[NicId, list[tuple[FlowKey, NicId]]]:
    """Receivers in incast -> their senders' flows (key, source NIC): at
    least `incast_fan_in` senders of flows that do not back off (not TCP)
    whose flows, as they measure at their ingress (before any meter of
    ours), offer `incast_overload` times what the receiver's NIC takes. A placed job's own flows (an all-to-all
    converges on every NIC by design) count as load but are never metered
    as senders. `cat`: the records' catalog rows."""
    fabric = catalog.index.fabric
    floor = max(cfg.incast_sender_fraction * fabric.spec.rates.nic_gbps * 1e9, 1.0)
    busy = np.flatnonzero((flows.observed_at >= now - cfg.max_age_s) & (flows.rate_bps >= floor) & (cat >= 0))
    dst = catalog.dst[cat[busy]]
    busy = busy[np.bincount(dst)[dst] >= cfg.incast_fan_in]  # most receivers: looked at no further
    c = cat[busy]
    busy, c = busy[catalog.src[c] != catalog.dst[c]], c[catalog.src[c] != catalog.dst[c]]
    # TCP backs off: its flows converging on a NIC share it, whatever their
    # records' noise adds up to (the emulated agent's short intervals read
    # three such flows at up to twice the NIC now and then).
    responsive = np.array([flows.keys[i][2] == "tcp" for i in busy.tolist()], dtype=bool)
    busy, c = busy[~responsive], c[~responsive]
    offered = np.bincount(catalog.dst[c], weights=flows.rate_bps[busy], minlength=len(catalog.nic_number))
    strangers = ~catalog.among(c, jobs)
    busy, c = busy[strangers], c[strangers]
    out = {}
    order = np.argsort(catalog.dst[c], kind="stable")
    busy, c = busy[order], c[order]
    receivers, starts = np.unique(catalog.dst[c], return_index=True)
    for receiver, mine in zip(receivers.tolist(), np.split(np.arange(len(c)), starts[1:])):
        if len(np.unique(catalog.src[c[mine]])) < cfg.incast_fan_in:
            continue
        dst_nic = catalog.dst_nic(int(c[mine[0]]))
        if offered[receiver] >= cfg.incast_overload * fabric.access_link(dst_nic).capacity_bps:
            senders = zip(busy[mine].tolist(), c[mine].tolist())
            out[dst_nic] = sorted((flows.keys[i], catalog.src_nic(j)) for i, j in senders)
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
    catalog: FlowCatalog,
    meters: Mapping[FlowKey, Meter],
    moves: dict[FlowKey, Move],
    flows: FlowFrame,
    now: float,
) -> None:
    """A meter rides on an entry at the flow's ingress leaf, and an entry there
    must also say where the flow goes: a metered flow that crosses spines and
    was not moved is pinned where the switch already sends it."""
    pending = meters.keys() - moves.keys()
    if not pending:
        return
    index = catalog.index
    for i, key in enumerate(flows.keys):
        if key in pending:
            meter = meters[key]
            routes = index.routes(meter.src, meter.dst)
            row = index.via_row(routes.base, int(flows.ingress[i])) if routes.vias else -1
            if row >= 0:
                moves[key] = Move(key, meter.src, meter.dst, index.via_at[row], now, now)
