"""The optimum the simulator judges every routing against. Pure.

`emulation.model.optimum.optimum_bounds` in the fabric's real units with the
phase's dead links removed: the splittable max-min optimum (exact, LP) is
the yardstick; the single-path optimum (what per-flow TE can reach at best,
when known) and the throughput bound (fairness aside) are reported beside it.

A routing is credited with each flow's rate up to that flow's rate in the
optimum (`credited`): max-min fairness does not maximise the sum, so an
unfair routing's aggregate can exceed the optimum's, and a fraction of the
optimum above 100% would not mean what its name says.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

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
    rates_bps: tuple[float, ...] = ()  # per flow bounded, in the optimum

    def per_flow(self, started: np.ndarray) -> np.ndarray:
        """The optimum's rate of every flow of the arm (`started`: those
        this bound was solved for, in order), 0 for the others."""
        out = np.zeros(len(started))
        out[started] = self.rates_bps
        return out


def credited(rates: np.ndarray, optimum: np.ndarray) -> float:
    """What `rates` add up to, each flow counted up to its optimum rate:
    never above the optimum's aggregate."""
    return float(np.minimum(rates, optimum).sum())


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
        bounds.splittable.rates_bps,
    )
