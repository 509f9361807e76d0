"""The optimum a run is judged against, and the rates of a given routing. Pure.

Every function takes a Fabric, flows (src NIC, dst NIC, demand), the units
of the capacities (the real fabric's, or the emulation's) and an outage
(dead or drained links and switches carry nothing; a flow with no live path
gets 0):

- `splittable_optimum`: max-min fair rates with the routing chosen by the
  optimiser and every flow free to split over its equal-cost paths. Exact
  (progressive filling by LPs, HiGHS; see lp.py). It bounds what any routing
  reaches in the max-min order: per-flow TE, ECMP, ideal packet spraying.
- `single_path_optimum`: the same with one path per flow, what per-flow TE
  can reach at best. Exact when found, None when unknown (too many routings
  to search and the splittable optimum does not round to one).
- `optimum_bounds`: both, plus the throughput bound, sharing one model.
- `throughput_bound_bps`: the most the flows can carry together, fairness
  aside. A max-min allocation may carry less than this (a flow crossing two
  bottlenecks holds capacity others could use), so an unfair one (TCP's) can
  beat the max-min aggregate; nothing beats this.
- `routing_rates`: max-min rates of a routing you give (a via per flow, or
  shares over vias: ECMP's hash, a TE assignment, ideal spraying).
- `max_min_rates` / `fill`: progressive filling on your own links and paths.

Rates come back in bps, flows in the order given.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from controller.fabric import Endpoint, Fabric, NicId
from emulation.model.fair import fill, max_min_rates
from emulation.model.lp import Filling, OptimumError, max_total, progressive_filling
from emulation.model.network import NO_OUTAGE, ModelFlow, Network, Outage, Units, build_network, capacities
from emulation.model.single_path import (
    EXHAUSTIVE_LIMIT,
    exhaustive,
    flow_rates,
    independent_parts,
    rate_choice,
    rounded,
    routings,
    same_rates,
)

__all__ = [
    "EXHAUSTIVE_LIMIT",
    "NO_OUTAGE",
    "Bounds",
    "ModelFlow",
    "Optimum",
    "OptimumError",
    "OptimumKind",
    "Outage",
    "Units",
    "fill",
    "max_min_rates",
    "optimum_bounds",
    "routing_rates",
    "single_path_optimum",
    "splittable_optimum",
    "throughput_bound_bps",
]


class OptimumKind(str, enum.Enum):
    SPLITTABLE = "max-min fair, splittable"  # a flow may split over its equal-cost paths
    SINGLE_PATH = "max-min fair, single-path"  # one path per flow


@dataclass(frozen=True)
class Optimum:
    kind: OptimumKind
    rates_bps: tuple[float, ...]
    # Per flow, (via, bps) for each path that carries some of it; one entry
    # for a single-path optimum; via "" where the two leaves have one path;
    # empty for a flow with no live path.
    routes: tuple[tuple[tuple[str, float], ...], ...]
    method: str  # how it was found, e.g. "LP (HiGHS), 2 LPs"
    solve_s: float  # wall time, model building included

    @property
    def aggregate_bps(self) -> float:
        return sum(self.rates_bps)

    @property
    def vias(self) -> tuple[str, ...]:
        """Per flow, the via that carries most of it ("" where none)."""
        return tuple(max(r, key=lambda vb: vb[1])[0] if r else "" for r in self.routes)


@dataclass(frozen=True)
class Bounds:
    splittable: Optimum
    single_path: Optimum | None  # None: unknown (too large to be exact)
    throughput_bps: float  # the most the flows can carry together, fairness aside
    solve_s: float
    stats: Mapping[str, int] = field(default_factory=dict)


def splittable_optimum(
    fabric: Fabric, flows: Sequence[ModelFlow], *, units: Units = Units.EMULATED, outage: Outage = NO_OUTAGE
) -> Optimum:
    started = time.perf_counter()
    net = build_network(fabric, flows, capacities(fabric, units, outage))
    return _splittable(net, progressive_filling(net), started)


def concurrent_time_s(
    fabric: Fabric,
    pairs: Sequence[tuple[NicId, NicId]],
    bits: float,
    *,
    units: Units = Units.EMULATED,
    outage: Outage = NO_OUTAGE,
) -> float:
    """The least time in which every one of these flows can move `bits`, each
    free to split over its paths: bits / the largest rate all can have at
    once, the lowest rate of the splittable max-min optimum (its first level).
    Averaged over time, any schedule that ends by T is such a flow of
    bits / T, so nothing finishes sooner. inf: a flow has no live path."""
    if not pairs:
        return 0.0
    optimum = splittable_optimum(fabric, [ModelFlow(s, d) for s, d in pairs], units=units, outage=outage)
    slowest = min(optimum.rates_bps)
    return bits / slowest if slowest > 0 else math.inf


def single_path_optimum(
    fabric: Fabric,
    flows: Sequence[ModelFlow],
    *,
    units: Units = Units.EMULATED,
    outage: Outage = NO_OUTAGE,
    limit: int = EXHAUSTIVE_LIMIT,
) -> Optimum | None:
    return optimum_bounds(fabric, flows, units=units, outage=outage, limit=limit).single_path


def throughput_bound_bps(
    fabric: Fabric, flows: Sequence[ModelFlow], *, units: Units = Units.EMULATED, outage: Outage = NO_OUTAGE
) -> float:
    net = build_network(fabric, flows, capacities(fabric, units, outage))
    return max_total(net) * net.scale_bps


def optimum_bounds(
    fabric: Fabric,
    flows: Sequence[ModelFlow],
    *,
    units: Units = Units.EMULATED,
    outage: Outage = NO_OUTAGE,
    single_path: bool = True,
    limit: int = EXHAUSTIVE_LIMIT,
) -> Bounds:
    """The splittable optimum, the single-path optimum (unless told not to
    look for it, or unknown: None) and the throughput bound, on one model.
    `limit`: the most single-path routings the exhaustive search may rate."""
    started = time.perf_counter()
    net = build_network(fabric, flows, capacities(fabric, units, outage))
    filling = progressive_filling(net)
    split = _splittable(net, filling, started)
    rates = flow_rates(net, filling)
    best: Optimum | None = None
    if single_path:
        t0 = time.perf_counter()
        choice = rounded(net, filling)
        found = rate_choice(net, choice)
        method = "the splittable optimum, rounded to whole paths (same rates: exact)"
        if not same_rates(found, rates):
            parts = independent_parts(net)
            searched = exhaustive(net, rates, limit, parts)
            method = "" if searched is None else _searched(net, parts)
            if searched is not None:
                choice, found = searched
        if method:
            best = Optimum(
                OptimumKind.SINGLE_PATH,
                _bps(found, net),
                tuple(
                    ((net.commodities[net.flow_commodity[i]].vias[c], float(found[i] * net.scale_bps)),)
                    if c >= 0
                    else ()
                    for i, c in enumerate(choice.tolist())
                ),
                method,
                time.perf_counter() - t0,
            )
    throughput = max_total(net) * net.scale_bps
    stats = {
        "flows": len(flows),
        "bundles": len(net.bundles),
        "commodities": len(net.commodities),
        "paths": len(filling.path_commodity),
        "lps": filling.lps,
        "levels": filling.levels,
    }
    return Bounds(split, best, throughput, time.perf_counter() - started, stats)


def _searched(net: Network, parts: list[list[int]]) -> str:
    apart = f" in {len(parts)} independent parts" if len(parts) > 1 else ""
    return f"exhaustive ({sum(routings(net, part) for part in parts)} routings{apart}, up to symmetry)"


def _splittable(net: Network, filling: Filling, started: float) -> Optimum:
    rates = flow_rates(net, filling)
    return Optimum(
        OptimumKind.SPLITTABLE,
        _bps(rates, net),
        _split_routes(net, filling.path_total, rates),
        f"LP (HiGHS): {filling.levels} level(s), {filling.lps} LPs",
        time.perf_counter() - started,
    )


def _bps(rates: np.ndarray, net: Network) -> tuple[float, ...]:
    return tuple((rates * net.scale_bps).tolist())


def _split_routes(net: Network, path_total: np.ndarray, rates: np.ndarray) -> tuple[tuple[tuple[str, float], ...], ...]:
    """Each flow takes its commodity's split in proportion (always a valid
    per-flow decomposition: every flow of a commodity has the same paths)."""
    shares: list[tuple[tuple[str, float], ...]] = []
    p = 0
    for commodity in net.commodities:
        totals = path_total[p : p + len(commodity.paths)]
        p += len(commodity.paths)
        whole = float(totals.sum())
        shares.append(
            tuple((v, float(x) / whole) for v, x in zip(commodity.vias, totals) if x > 1e-9)
            if whole > 1e-9
            else ((commodity.vias[0], 1.0),)
            if commodity.vias
            else ()
        )
    scale = net.scale_bps
    return tuple(
        tuple((v, share * float(rates[i]) * scale) for v, share in shares[c]) if c >= 0 else ()
        for i, c in enumerate(net.flow_commodity.tolist())
    )


Route = str | None | Mapping[str, float]


def routing_rates(
    fabric: Fabric,
    flows: Sequence[ModelFlow],
    routes: Sequence[Route],
    *,
    units: Units = Units.EMULATED,
    outage: Outage = NO_OUTAGE,
) -> list[float]:
    """Max-min rates (bps) when flow i follows routes[i]: a via (None or ""
    where its leaves have a single path), or {via: share} with shares summing
    to 1 (ideal spraying: an equal share on every via). A flow whose route
    crosses a dead link gets 0, as it would until something moves it."""
    caps = capacities(fabric, units, outage)
    index: dict[Endpoint, int] = {}
    hops: dict[tuple[str, str, tuple[tuple[str, float], ...]], dict[int, float]] = {}
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []

    def link_id(e: Endpoint) -> int:
        return index.setdefault(e, len(index))

    for i, (f, route) in enumerate(zip(flows, routes, strict=True)):
        weights = tuple(sorted(route.items())) if isinstance(route, Mapping) else (((route or ""), 1.0),)
        key = (fabric.attachment(f.src).node, fabric.attachment(f.dst).node, weights)
        middle = hops.get(key)
        if middle is None:
            middle = hops[key] = {}
            for via, share in weights:
                for e in fabric.egress_path(f.src, f.dst, via or None)[1:-1]:
                    middle[link_id(e)] = middle.get(link_id(e), 0.0) + share
        for j, w in [
            (link_id(fabric.nic_egress(f.src)), 1.0),
            *middle.items(),
            (link_id(fabric.attachment(f.dst)), 1.0),
        ]:
            rows.append(i)
            cols.append(j)
            vals.append(w)
    incidence = sp.csr_array((vals, (rows, cols)), shape=(len(flows), len(index)))
    link_cap = np.array([caps[e] for e in index], dtype=float)
    demand = np.array([f.demand_bps for f in flows], dtype=float)
    return [r if math.isfinite(r) else 0.0 for r in fill(incidence, link_cap, demand).tolist()]
