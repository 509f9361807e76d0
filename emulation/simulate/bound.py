"""The optimum the simulator judges every routing against. Pure.

`emulation.model.optimum.optimum_bounds` in the fabric's real units with the
phase's dead links removed: the splittable max-min optimum (exact, LP) is
the yardstick; the single-path optimum (what per-flow TE can reach at best,
when known) and the throughput bound (fairness aside) are reported beside it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from controller.fabric import Fabric
from emulation.model.optimum import ModelFlow, Outage, Units, optimum_bounds
from emulation.simulate.traffic import SimFlow


@dataclass(frozen=True)
class Bound:
    aggregate_bps: float  # the splittable max-min optimum's aggregate
    method: str
    solve_s: float
    single_path_bps: float | None = None  # None: unknown (too large to be exact)
    throughput_bps: float | None = None


def optimum_bound(fabric: Fabric, flows: Sequence[SimFlow], dead: Sequence[str] = ()) -> Bound:
    if not flows:
        return Bound(0.0, "no flows", 0.0, 0.0, 0.0)
    started = time.perf_counter()
    bounds = optimum_bounds(
        fabric,
        [ModelFlow(f.src, f.dst, f.demand_bps) for f in flows],
        units=Units.REAL,
        outage=Outage.of(links=dead),
    )
    single = bounds.single_path
    return Bound(
        bounds.splittable.aggregate_bps,
        bounds.splittable.method,
        time.perf_counter() - started,
        single.aggregate_bps if single is not None else None,
        bounds.throughput_bps,
    )
