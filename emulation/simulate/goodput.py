"""Goodput figures: unbounded flows judged against the exact splittable
max-min optimum (emulation.model.optimum), each flow credited up to its
optimum rate (`bound.credited`), per phase (flows starting or stopping,
links dying or coming back). Pure.

- ECMP and spraying, static per phase;
- TE per cycle of the closed loop, against the phase the cycle falls in;
  and the loop's own figures (moves, flow-mods, engine step, speed).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from emulation.model.sharing import Sharing
from emulation.model.stats import percentile
from emulation.simulate.bound import Bound, credited
from emulation.simulate.conditions import Condition, Phase
from emulation.simulate.figures import natural_demand, outcome
from emulation.simulate.loop import LoopResult, LoopSettings
from emulation.simulate.prepared import Prepared, ecmp_routing, spray_routing
from emulation.simulate.records import (
    CycleFigures,
    LoopFigures,
    OptimumFigures,
    PhaseFigures,
    RoutingFigures,
    Spread,
    TargetFigures,
    TeFigures,
    TimeSplit,
)
from emulation.simulate.traffic import demands

TARGET = 0.97
STEADY_CYCLES = 100


def static_figures(prep: Prepared, phase: Phase, bound: Bound, sharing: Sharing) -> PhaseFigures:
    """ECMP and spraying at one phase, against its optimum."""
    network = prep.network
    condition = Condition(phase.start_s, phase.dead)
    demand = np.where(phase.started, demands(prep.arm.flows), 0.0)
    natural = natural_demand(prep.routes, prep.arm.flows, phase.started)
    ecmp, spray = ecmp_routing(prep, condition, sharing), spray_routing(prep, condition, sharing)  # ECMP: ACKs too
    uplink = network.is_uplink
    ecmp_outcome, spray_outcome = outcome(ecmp, demand, natural, uplink), outcome(spray, demand, natural, uplink)

    best = bound.per_flow(phase.started)

    def judged(rates: np.ndarray) -> float:
        return credited(rates, best) / bound.aggregate_bps if bound.aggregate_bps else 0.0

    return PhaseFigures(
        phase.start_s,
        list(phase.dead),
        int(phase.started.sum()),
        OptimumFigures.of(bound),
        RoutingFigures(ecmp_outcome.aggregate_bps, judged(ecmp_outcome.rates), ecmp_outcome.collided_uplinks),
        RoutingFigures(spray_outcome.aggregate_bps, judged(spray_outcome.rates), spray_outcome.collided_uplinks),
    )


def fractions(result: LoopResult, phases: Sequence[Phase], bounds: Sequence[Bound]) -> list[float]:
    """TE's credited rates per cycle (`Cycle.credited_bps`) over the optimum
    of the phase it falls in."""
    starts = [p.start_s for p in phases]
    out = []
    for c in result.cycles:
        bound = bounds[bisect.bisect_right(starts, c.t + 1e-9) - 1].aggregate_bps
        out.append(c.credited_bps / bound if bound else 0.0)
    return out


def yardstick(phases: Sequence[Phase], bounds: Sequence[Bound]) -> Callable[[float], np.ndarray]:
    """Per flow, its optimum rate at time t (in the phase t falls in), for
    the loop to credit each cycle's rates against."""
    starts = [p.start_s for p in phases]
    best = [b.per_flow(p.started) for p, b in zip(phases, bounds)]
    return lambda t: best[bisect.bisect_right(starts, t + 1e-9) - 1]


def cycle_rows(result: LoopResult, judged: Sequence[float] | None) -> list[CycleFigures]:
    """Per cycle; with `judged` (fractions of the optimum) for goodput runs."""
    return [
        CycleFigures(
            round(c.t, 6),
            None if judged is None else judged[i],
            c.aggregate_bps,
            c.collided_uplinks,
            c.engine_collisions,
            c.reroutes,
            c.moves_active,
            c.meters_active,
            c.flow_mods,
            c.meter_mods,
            c.path_changes,
            c.step_s,
            c.fluid_s,
            c.telemetry_s,
            c.overlay_s,
            dict(c.decisions),
        )
        for i, c in enumerate(result.cycles)
    ]


def te_summary(result: LoopResult, judged: Sequence[float], settings: LoopSettings) -> TeFigures:
    """The loop's figures with TE's fraction of the optimum (`fractions`)."""
    frac = judged
    # The first cycle from which TE stays at or above the target to the end,
    # counted in engine steps that had run before it was measured.
    holds_from = None
    for i in range(len(frac) - 1, -1, -1):
        if frac[i] < TARGET:
            break
        holds_from = i
    first = next((i for i, f in enumerate(frac) if f >= TARGET), None)
    goal = TargetFigures(
        frac[0] if frac else 0.0,
        frac[-1] if frac else 0.0,
        min(frac[-STEADY_CYCLES:], default=0.0),
        TARGET,
        first,
        holds_from,
        None if first is None else result.cycles[first].t,
    )
    return TeFigures(goal, loop_summary(result, settings))


def _spread(times: list[float]) -> Spread:
    return Spread(
        percentile(times, 0.5), percentile(times, 0.99), max(times, default=0.0),
        statistics.fmean(times) if times else 0.0,
    )  # fmt: skip


def per_change_max(changed_at: Sequence[tuple[float, np.ndarray]], changes_s: Sequence[float]) -> int:
    """The most times one flow's path changed between two changes of
    traffic or links (the emulation's `path_changes_per_flow_per_change_max`)."""
    counts = Counter((int(flow), bisect.bisect_right(changes_s, t)) for t, flows in changed_at for flow in flows)
    return max(counts.values(), default=0)


def loop_summary(result: LoopResult, settings: LoopSettings) -> LoopFigures:
    """What the closed loop did and what it cost, whatever it is judged by."""
    cycles = result.cycles
    steady = cycles[-STEADY_CYCLES:]
    steps = [c.step_s for c in cycles]
    sim_s = len(cycles) * settings.interval_s
    loop_wall = result.wall_s  # everything in the loop, bookkeeping and progress included
    moved = result.path_changes_per_flow
    return LoopFigures(
        reroutes_total=sum(c.reroutes for c in cycles),
        reroutes_per_cycle_max=max((c.reroutes for c in cycles), default=0),
        steady_cycles=len(steady),
        reroutes_steady=sum(c.reroutes for c in steady),
        flow_mods_total=sum(c.flow_mods for c in cycles),
        flow_mods_steady=sum(c.flow_mods for c in steady),
        meter_mods_total=sum(c.meter_mods for c in cycles),
        path_changes_per_flow_max=int(moved.max()) if moved.size else 0,
        path_changes_per_flow_per_change_max=per_change_max(result.path_changed_at, settings.changes_s),
        path_changes_per_moved_flow_mean=float(moved[moved > 0].mean()) if (moved > 0).any() else 0.0,
        flows_moved=int((moved > 0).sum()),
        collided_uplinks_first=cycles[0].collided_uplinks if cycles else 0,
        collided_uplinks_final=cycles[-1].collided_uplinks if cycles else 0,
        engine_step_s=_spread(steps),
        engine_step_cpu_s=_spread([c.step_cpu_s for c in cycles]),
        time_split_s=TimeSplit(
            fluid_model=sum(c.fluid_s for c in cycles),
            telemetry=sum(c.telemetry_s for c in cycles),
            engine=sum(steps),
            overlay=sum(c.overlay_s for c in cycles),
            other=max(result.wall_s - sum(c.fluid_s + c.telemetry_s + c.step_s + c.overlay_s for c in cycles), 0.0),
        ),
        cycles=len(cycles),
        simulated_s=sim_s,
        loop_wall_s=loop_wall,
        sim_s_per_wall_s=sim_s / loop_wall if loop_wall else math.inf,
    )
